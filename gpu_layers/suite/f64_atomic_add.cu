// atomicAdd on double in global and shared memory (atom.add.f64) of exactly summable values (scaled by a double parameter), so every order gives the same sums.
extern "C" __global__ void f64_atomic_add(const double* v, double* acc, double* per_block, double scale)
{
    __shared__ double s[2];
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x < 2) s[threadIdx.x] = 0.0;
    __syncthreads();
    double x = v[t];
    atomicAdd(&s[threadIdx.x & 1], x);
    atomicAdd(&acc[0], x);
    atomicAdd(&acc[1 + (t % 3)], x * scale);
    __syncthreads();
    if (threadIdx.x < 2) {
        per_block[2 * blockIdx.x + threadIdx.x] = s[threadIdx.x];
        atomicAdd(&acc[4], s[threadIdx.x]);
    }
}
