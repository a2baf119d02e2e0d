// Decimal digits: reverse (needs 64 bits), digit sum and digit count of unsigned values.
extern "C" __global__ void digit_reverse(int n, const unsigned* in, unsigned long long* rev, int* info)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    unsigned v = in[t];
    unsigned long long r = 0ull;
    int sum = 0, count = 0;
    do {
        unsigned d = v % 10u;
        r = r * 10ull + d;
        sum += (int)d;
        ++count;
        v /= 10u;
    } while (v != 0u);
    rev[t] = r;
    info[t] = sum * 100 + count;
}
