// IEEE division and square root (div.rn / sqrt.rn), fminf/fmaxf, fabsf, reciprocal, sign flip.
extern "C" __global__ void div_sqrt_f32(const float* a, const float* b, float* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float x = a[t], y = b[t];
    float* o = out + 8 * t;
    o[0] = x / y;
    o[1] = sqrtf(fabsf(x));
    o[2] = __fsqrt_rn(__fmul_rn(y, y));
    o[3] = fminf(x, y);
    o[4] = fmaxf(x, y);
    o[5] = y < 0.0f ? -fabsf(x) : fabsf(x);
    o[6] = __fdiv_rn(1.0f, y);
    o[7] = -x * 0.25f;
}
