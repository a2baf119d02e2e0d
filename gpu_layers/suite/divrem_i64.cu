// 64-bit signed and unsigned division and remainder.
extern "C" __global__ void divrem_i64(int n, const long long* a, const long long* b, long long* q, long long* r,
                                      unsigned long long* uq, unsigned long long* ur)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    long long x = a[t], y = b[t];
    q[t] = x / y;
    r[t] = x % y;
    unsigned long long ux = (unsigned long long)x, uy = (unsigned long long)y;
    uq[t] = ux / uy;
    ur[t] = ux % uy;
}
