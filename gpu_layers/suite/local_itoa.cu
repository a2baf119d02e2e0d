// Decimal digits of each thread's value written into a local char buffer (byte stores), a digit
// histogram in a local array of 16-bit counters, the digits read back in reverse (byte loads) and
// packed into a local word array; bytes nothing wrote are never read.
extern "C" __global__ void local_itoa(const unsigned* in, unsigned* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned v = in[t];
    char buf[12];
    unsigned short count[10];
    for (int d = 0; d < 10; ++d)
        count[d] = 0;
    int n = 0;
    do {
        unsigned d = v % 10u;
        buf[n++] = (char)('0' + d);
        count[d] += 1;
        v /= 10u;
    } while (v);
    unsigned w[3] = {0u, 0u, 0u};
    for (int i = 0; i < n; ++i)
        w[i >> 2] |= (unsigned)(unsigned char)buf[n - 1 - i] << (8 * (i & 3));
    unsigned hist = 0u;
    for (int d = 0; d < 10; ++d)
        hist = hist * 3u + count[d];
    out[5 * t] = w[0];
    out[5 * t + 1] = w[1];
    out[5 * t + 2] = w[2];
    out[5 * t + 3] = (unsigned)n;
    out[5 * t + 4] = hist;
}
