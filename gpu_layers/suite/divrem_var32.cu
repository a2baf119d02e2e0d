// Signed (truncating) and unsigned 32-bit division and remainder by data-dependent divisors.
extern "C" __global__ void divrem_var32(const int* a, const int* b, int* q, int* r, unsigned* uq, unsigned* ur)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int x = a[t], y = b[t];  // y != 0 and never INT_MIN / -1
    q[t] = x / y;
    r[t] = x % y;
    unsigned ux = (unsigned)x, uy = (unsigned)y;
    uq[t] = ux / uy;
    ur[t] = ux % uy;
}
