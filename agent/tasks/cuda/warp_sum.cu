extern "C" __global__ void warp_sum(const int* a, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? a[i] : 0;
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0) out[i / 32] = v;
}
