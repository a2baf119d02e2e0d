extern "C" __global__ void dot_double(const double* x, const double* y, double* out, int n) {
    __shared__ double s[128];
    int t = threadIdx.x;
    double acc = 0.0;
    for (int i = t; i < n; i += 128) acc += x[i] * y[i];
    s[t] = acc;
    __syncthreads();
    for (int stride = 64; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[0] = s[0];
}
