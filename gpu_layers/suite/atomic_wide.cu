// 64-bit atomics (add, unsigned and signed min/max) and float atomicAdd of exactly summable values.
extern "C" __global__ void atomic_wide(const unsigned long long* v64, const float* vf, unsigned long long* acc,
                                       float* facc, long long* mm)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long v = v64[t];
    atomicAdd(&acc[0], v);
    atomicMax(&acc[1], v);
    atomicMin(&acc[2], v);
    atomicAdd(&facc[t & 1], vf[t]);
    atomicMin(&mm[0], (long long)v);
    atomicMax(&mm[1], (long long)v);
}
