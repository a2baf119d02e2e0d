// Float corner cases: fma ties that a double-precision fma-then-round would get wrong, subnormal
// inputs and results (no flush to zero), overflow to infinity and the largest finite values.
extern "C" __global__ void float_edge_cases(const float* a, const float* b, const float* c, float* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float x = a[t], y = b[t], z = c[t];
    float* o = out + 10 * t;
    o[0] = __fmaf_rn(x, y, z);
    o[1] = __fmaf_rz(x, y, z);
    o[2] = __fmaf_ru(x, y, z);
    o[3] = __fmaf_rd(x, y, z);
    o[4] = __fdiv_rn(x, y);
    o[5] = __fsqrt_rn(fabsf(z));
    o[6] = __fmul_rn(x, y);
    o[7] = __fadd_rn(x, z);
    o[8] = __fsub_rn(z, x);
    o[9] = __int_as_float(__float2int_rz(__fmul_rn(x, 1024.0f)) & 0x7fffff);
}
