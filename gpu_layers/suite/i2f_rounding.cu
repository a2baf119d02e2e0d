// Integer to float conversions with every rounding mode, 32- and 64-bit, signed and unsigned.
extern "C" __global__ void i2f_rounding(const int* in, const long long* in64, float* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int x = in[t];
    unsigned u = (unsigned)x;
    long long w = in64[t];
    float* o = out + 12 * t;
    o[0] = __int2float_rn(x);
    o[1] = __int2float_rz(x);
    o[2] = __int2float_rd(x);
    o[3] = __int2float_ru(x);
    o[4] = __uint2float_rn(u);
    o[5] = __uint2float_rz(u);
    o[6] = __uint2float_rd(u);
    o[7] = __uint2float_ru(u);
    o[8] = __ll2float_rn(w);
    o[9] = __ll2float_rz(w);
    o[10] = __ull2float_rd((unsigned long long)w);
    o[11] = __ull2float_ru((unsigned long long)w);
}
