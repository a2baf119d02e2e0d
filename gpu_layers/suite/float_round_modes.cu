// Directed rounding intrinsics: add, sub, mul, fma and div rounded toward zero, +inf and -inf.
extern "C" __global__ void float_round_modes(const float* a, const float* b, const float* c, float* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float x = a[t], y = b[t], z = c[t];
    float* o = out + 12 * t;
    o[0] = __fadd_rz(x, y);
    o[1] = __fadd_ru(x, y);
    o[2] = __fadd_rd(x, y);
    o[3] = __fsub_rz(x, y);
    o[4] = __fmul_rz(x, y);
    o[5] = __fmul_ru(x, y);
    o[6] = __fmul_rd(x, y);
    o[7] = __fmaf_rz(x, y, z);
    o[8] = __fmaf_ru(x, y, z);
    o[9] = __fmaf_rd(x, y, z);
    o[10] = __fdiv_rz(x, y);
    o[11] = __fdiv_ru(x, y);
}
