// 128-bit add, subtract and low 128 bits of a product from 64-bit halves, with explicit carries.
extern "C" __global__ void add128(const unsigned long long* a, const unsigned long long* b,
                                  unsigned long long* sum, unsigned long long* diff, unsigned long long* prod)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long alo = a[2 * t], ahi = a[2 * t + 1], blo = b[2 * t], bhi = b[2 * t + 1];
    unsigned long long lo = alo + blo;
    unsigned long long carry = lo < alo;
    sum[2 * t] = lo;
    sum[2 * t + 1] = ahi + bhi + carry;
    unsigned long long borrow = alo < blo;
    diff[2 * t] = alo - blo;
    diff[2 * t + 1] = ahi - bhi - borrow;
    prod[2 * t] = alo * blo;
    prod[2 * t + 1] = __umul64hi(alo, blo) + alo * bhi + ahi * blo;
}
