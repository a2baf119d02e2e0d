// Double arithmetic: IEEE add, sub, mul, a*b+c contracted into fma.rn.f64, div, sqrt, reciprocal, fmin/fmax, fabs, negation and copysign, with subnormals, signed zeros and overflow.
extern "C" __global__ void f64_arith(const double* a, const double* b, const double* c, double* out, int n)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    double x = a[t], y = b[t], z = c[t];
    double* o = out + 12 * t;
    o[0] = __dadd_rn(x, y);
    o[1] = __dsub_rn(x, y);
    o[2] = __dmul_rn(x, y);
    o[3] = x * y + z;
    o[4] = x / y;
    o[5] = sqrt(fabs(x));
    o[6] = 1.0 / y;
    o[7] = fmin(x, y);
    o[8] = fmax(x, z);
    o[9] = -fabs(z);
    o[10] = copysign(x, y);
    o[11] = __fma_rn(x, x, -__dmul_rn(x, x));
}
