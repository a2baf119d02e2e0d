// Signed/unsigned/64-bit min and max, abs, llabs, absolute differences and clamping with selects.
extern "C" __global__ void minmax_clamp(const int* a, const int* b, const int* c, int* out, long long* out64)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int x = a[t], y = b[t], z = c[t];
    unsigned ux = (unsigned)x, uy = (unsigned)y;
    int* o = out + 8 * t;
    o[0] = min(x, y);
    o[1] = max(x, y);
    o[2] = (int)min(ux, uy);
    o[3] = (int)max(ux, uy);
    o[4] = abs(x);                              // x != INT_MIN
    o[5] = (int)((x > y ? ux - uy : uy - ux) + ((unsigned)z & 0xffffu));
    o[6] = (int)((ux > uy ? ux - uy : uy - ux) + 7u);
    o[7] = x < -1000 ? -1000 : (x > 1000 ? 1000 : x);
    long long X = (long long)x * 3000000ll, Y = (long long)y * -5000000ll;
    out64[2 * t + 0] = min(X, Y) + llabs(X - Y);
    out64[2 * t + 1] = (long long)max((unsigned long long)X, (unsigned long long)Y);
}
