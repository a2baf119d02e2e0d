extern "C" __global__ void stencil_1d(const int* a, int* out, int n) {
    __shared__ int s[64 + 2];
    int t = threadIdx.x;
    int i = blockIdx.x * 64 + t;
    s[t + 1] = i < n ? a[i] : 0;
    if (t == 0) s[0] = (i > 0 && i - 1 < n) ? a[i - 1] : 0;
    if (t == 63) s[65] = i + 1 < n ? a[i + 1] : 0;
    __syncthreads();
    if (i < n) out[i] = s[t] + s[t + 1] + s[t + 2];
}
