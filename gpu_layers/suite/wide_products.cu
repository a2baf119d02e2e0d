// High halves and widening products: __mulhi, __umulhi, mul.wide, __mul24/__umul24, __[u]mul64hi.
extern "C" __global__ void wide_products(const int* a, const int* b, int* hi_s, unsigned* hi_u,
                                         long long* wide_s, unsigned long long* wide_u, int* m24,
                                         unsigned long long* hi64)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int x = a[t], y = b[t];
    hi_s[t] = __mulhi(x, y);
    hi_u[t] = __umulhi((unsigned)x, (unsigned)y);
    long long p = (long long)x * y;
    wide_s[t] = p;
    wide_u[t] = (unsigned long long)(unsigned)x * (unsigned)y;
    m24[t] = __mul24(x, y) ^ (int)__umul24((unsigned)x, (unsigned)y);
    hi64[t] = (unsigned long long)__mul64hi(p, (long long)y * 1048576ll)
              + __umul64hi((unsigned long long)p, 0x9E3779B97F4A7C15ull);
}
