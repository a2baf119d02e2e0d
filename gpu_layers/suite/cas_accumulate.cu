// atomicCAS loops: a wrapping atomic multiply and a float atomic max (order-independent results).
__device__ void atomic_mul(unsigned* addr, unsigned f)
{
    unsigned old = 1u, assumed;
    do {
        assumed = old;
        old = atomicCAS(addr, assumed, assumed * f);
    } while (old != assumed);
}
__device__ void atomic_fmax(float* addr, float v)
{
    int* a = (int*)addr;
    int old = 0, assumed;
    do {
        assumed = old;
        old = atomicCAS(a, assumed, __float_as_int(fmaxf(__int_as_float(assumed), v)));
    } while (old != assumed);
}
extern "C" __global__ void cas_accumulate(const unsigned* factors, const float* vals, unsigned* prods, float* maxes)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    atomic_mul(&prods[t & 3], factors[t]);
    atomic_fmax(&maxes[t & 1], vals[t]);
}
