extern "C" __global__ void scan_shared(const int* a, int* out, int n) {
    __shared__ int buf[2][256];
    int t = threadIdx.x;
    int src = 0;
    buf[0][t] = t < n ? a[t] : 0;
    __syncthreads();
    for (int offset = 1; offset < 256; offset <<= 1) {
        int v = buf[src][t];
        if (t >= offset) v += buf[src][t - offset];
        buf[1 - src][t] = v;
        src = 1 - src;
        __syncthreads();
    }
    if (t < n) out[t] = buf[src][t];
}
