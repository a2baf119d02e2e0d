// 64-bit atomics in shared memory (add, min, max, a CAS-loop multiply), a float shared atomicAdd
// of exactly summable values, 64-bit atomicExch on global slots, and read-only (__restrict__) loads.
extern "C" __global__ void atomics64_shared(const unsigned long long* __restrict__ in, const float* __restrict__ fin,
                                            unsigned long long* out, float* fout, unsigned long long* slots,
                                            unsigned long long* old)
{
    __shared__ unsigned long long acc[4];
    __shared__ float facc;
    int t = threadIdx.x;
    int g = blockIdx.x * blockDim.x + t;
    if (t == 0) {
        acc[0] = 0ull;
        acc[1] = 0ull;
        acc[2] = ~0ull;
        acc[3] = 1ull;
        facc = 0.0f;
    }
    __syncthreads();
    unsigned long long v = in[g];
    atomicAdd(&acc[0], v);
    atomicMax(&acc[1], v);
    atomicMin(&acc[2], v);
    unsigned long long seen = 1ull, assumed;
    do {
        assumed = seen;
        seen = atomicCAS(&acc[3], assumed, assumed * (v | 1ull));
    } while (seen != assumed);
    atomicAdd(&facc, fin[g]);
    old[g] = atomicExch(&slots[g], v ^ 0x5555555555555555ull);
    __syncthreads();
    if (t < 4)
        out[4 * blockIdx.x + t] = acc[t];
    if (t == 0)
        fout[blockIdx.x] = facc;
}
