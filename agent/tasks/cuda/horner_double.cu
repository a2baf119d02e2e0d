extern "C" __global__ void horner_double(const double* coef, int degree, const double* x, double* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = x[i];
    double acc = coef[degree];
    for (int d = degree - 1; d >= 0; d--) acc = acc * v + coef[d];
    out[i] = acc;
}
