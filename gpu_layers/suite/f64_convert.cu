// Double conversions in every rounding mode: to int, unsigned, long long and unsigned long long (saturating), to float, from 64-bit integers, and rint/trunc/floor/ceil.
extern "C" __global__ void f64_convert(const double* in, const long long* ints, int* si, unsigned* ui,
                                       long long* sl, unsigned long long* ul, float* f, double* d, double* r)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    double x = in[t];
    long long k = ints[t];
    si[4 * t + 0] = __double2int_rn(x);
    si[4 * t + 1] = __double2int_rz(x);
    si[4 * t + 2] = __double2int_rd(x);
    si[4 * t + 3] = __double2int_ru(x);
    ui[4 * t + 0] = __double2uint_rn(x);
    ui[4 * t + 1] = __double2uint_rz(x);
    ui[4 * t + 2] = __double2uint_rd(x);
    ui[4 * t + 3] = __double2uint_ru(x);
    sl[4 * t + 0] = __double2ll_rn(x);
    sl[4 * t + 1] = __double2ll_rz(x);
    sl[4 * t + 2] = __double2ll_rd(x);
    sl[4 * t + 3] = __double2ll_ru(x);
    ul[2 * t + 0] = __double2ull_rn(x);
    ul[2 * t + 1] = __double2ull_rd(x);
    f[4 * t + 0] = __double2float_rn(x);
    f[4 * t + 1] = __double2float_rz(x);
    f[4 * t + 2] = __double2float_rd(x);
    f[4 * t + 3] = __double2float_ru(x);
    double* o = d + 8 * t;
    o[0] = __ll2double_rn(k);
    o[1] = __ll2double_rz(k);
    o[2] = __ll2double_rd(k);
    o[3] = __ll2double_ru(k);
    o[4] = __ull2double_rn((unsigned long long)k);
    o[5] = __ull2double_ru((unsigned long long)k);
    o[6] = __int2double_rn((int)k);
    o[7] = (double)__double2float_rn(x);
    r[4 * t + 0] = rint(x);
    r[4 * t + 1] = trunc(x);
    r[4 * t + 2] = floor(x);
    r[4 * t + 3] = ceil(x);
}
