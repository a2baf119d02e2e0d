extern "C" __global__ void mean_std_double(const float* x, int n, double* out) {
    __shared__ double s1[256];
    __shared__ double s2[256];
    int t = threadIdx.x;
    double a = 0.0, b = 0.0;
    for (int i = t; i < n; i += 256) {
        double v = x[i];
        a += v;
        b += v * v;
    }
    s1[t] = a;
    s2[t] = b;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (t < stride) {
            s1[t] += s1[t + stride];
            s2[t] += s2[t + stride];
        }
        __syncthreads();
    }
    if (t == 0) {
        double mean = s1[0] / n;
        double var = s2[0] / n - mean * mean;
        out[0] = mean;
        out[1] = sqrt(var > 0.0 ? var : 0.0);
    }
}
