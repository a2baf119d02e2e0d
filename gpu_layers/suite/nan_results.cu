// NaN results, f32 and f64: 0*inf, inf-inf, 0/0, sqrt(-1), fma(inf, 0, x) and NaN inputs with payloads (bit patterns from integer buffers) through add, sub, mul, fma, div, sqrt, min/max and the conversions (f32<->f64, to integers).
extern "C" __global__ void nan_results(const unsigned* fbits, const unsigned long long* dbits, unsigned* fout,
                                       unsigned long long* dout, long long* iout)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float x = __uint_as_float(fbits[2 * t]), y = __uint_as_float(fbits[2 * t + 1]);
    double a = __longlong_as_double((long long)dbits[2 * t]), b = __longlong_as_double((long long)dbits[2 * t + 1]);
    unsigned* fo = fout + 10 * t;
    fo[0] = __float_as_uint(__fadd_rn(x, y));
    fo[1] = __float_as_uint(__fmul_rn(x, y));
    fo[2] = __float_as_uint(__fmaf_rn(x, y, 1.0f));
    fo[3] = __float_as_uint(__fdiv_rn(x, y));
    fo[4] = __float_as_uint(sqrtf(x));
    fo[5] = __float_as_uint(fminf(x, y));
    fo[6] = __float_as_uint(fmaxf(x, y));
    fo[7] = __float_as_uint(__double2float_rn(a));
    fo[8] = __float_as_uint(__double2float_rz(b));
    fo[9] = __float_as_uint(__fsub_rn(x, x));
    unsigned long long* d = dout + 12 * t;
    d[0] = (unsigned long long)__double_as_longlong(__dadd_rn(a, b));
    d[1] = (unsigned long long)__double_as_longlong(__dsub_rn(a, b));
    d[2] = (unsigned long long)__double_as_longlong(__dmul_rn(a, b));
    d[3] = (unsigned long long)__double_as_longlong(__fma_rn(a, b, 1.0));
    d[4] = (unsigned long long)__double_as_longlong(__fma_rn(2.0, a, b));
    d[5] = (unsigned long long)__double_as_longlong(__ddiv_rn(a, b));
    d[6] = (unsigned long long)__double_as_longlong(sqrt(a));
    d[7] = (unsigned long long)__double_as_longlong(fmin(a, b));
    d[8] = (unsigned long long)__double_as_longlong(fmax(a, b));
    d[9] = (unsigned long long)__double_as_longlong((double)x);
    d[10] = (unsigned long long)__double_as_longlong(__dadd_ru(a, 1.0));
    d[11] = (unsigned long long)__double_as_longlong(__dsub_rn(a, a));
    long long* io = iout + 4 * t;
    io[0] = __double2int_rz(a);
    io[1] = __double2ll_rn(b);
    io[2] = __float2int_rn(x);
    io[3] = __float2ll_rz(y);
}
