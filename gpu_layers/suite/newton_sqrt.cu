// Newton's square root iteration until the value stops changing (float equality as loop exit).
extern "C" __global__ void newton_sqrt(int n, const float* in, float* root, int* iters, int* ulps)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    float a = in[t];
    float x = a > 1.0f ? a : 1.0f;
    int k = 0;
    while (k < 40) {
        float nx = __fmul_rn(0.5f, __fadd_rn(x, __fdiv_rn(a, x)));
        ++k;
        if (nx == x)
            break;
        x = nx;
    }
    root[t] = x;
    iters[t] = k;
    ulps[t] = __float_as_int(x) - __float_as_int(sqrtf(a));
}
