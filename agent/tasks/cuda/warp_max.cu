extern "C" __global__ void warp_max(const int* a, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? a[i] : -2147483647 - 1;
    for (int off = 16; off >= 1; off >>= 1)
        v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (i < n) out[i] = v;
}
