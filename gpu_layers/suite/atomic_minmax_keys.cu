// Global atomicMin/atomicMax, signed and unsigned, into buckets chosen by key.
extern "C" __global__ void atomic_minmax_keys(int n, const int* keys, const int* vals, int* mins, int* maxs,
                                              unsigned* umins, unsigned* umaxs)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    int k = keys[t] & 3, v = vals[t];
    atomicMin(&mins[k], v);
    atomicMax(&maxs[k], v);
    atomicMin(&umins[k], (unsigned)v);
    atomicMax(&umaxs[k], (unsigned)v);
}
