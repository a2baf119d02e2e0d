// Polynomial evaluation by Horner's rule with explicit single-rounding fmas (__fmaf_rn).
extern "C" __global__ void horner_poly(int n, const float* x, const float* coef, int degree, float* y)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    float xv = x[t], acc = coef[degree];
    for (int k = degree - 1; k >= 0; --k)
        acc = __fmaf_rn(acc, xv, coef[k]);
    y[t] = acc;
}
