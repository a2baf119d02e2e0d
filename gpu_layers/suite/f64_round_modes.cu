// Double directed-rounding intrinsics: add, sub, mul, fma, div, reciprocal and sqrt rounded toward zero, +inf and -inf (__dadd_rz, __fma_ru, __ddiv_rd, __drcp_rz, __dsqrt_ru, ...).
extern "C" __global__ void f64_round_modes(const double* a, const double* b, const double* c, double* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    double x = a[t], y = b[t], z = c[t];
    double* o = out + 18 * t;
    o[0] = __dadd_rz(x, y);
    o[1] = __dadd_ru(x, y);
    o[2] = __dadd_rd(x, y);
    o[3] = __dsub_rz(x, y);
    o[4] = __dsub_ru(x, y);
    o[5] = __dmul_rz(x, y);
    o[6] = __dmul_ru(x, y);
    o[7] = __dmul_rd(x, y);
    o[8] = __fma_rz(x, y, z);
    o[9] = __fma_ru(x, y, z);
    o[10] = __fma_rd(x, y, z);
    o[11] = __ddiv_rz(x, y);
    o[12] = __ddiv_ru(x, y);
    o[13] = __ddiv_rd(x, y);
    o[14] = __drcp_rd(y);
    o[15] = __dsqrt_rz(fabs(x));
    o[16] = __dsqrt_ru(fabs(x));
    o[17] = __dsqrt_rd(fabs(z));
}
