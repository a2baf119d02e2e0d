// xorshift32 and xorshift64* generators, each thread advancing its own stream steps[t] times.
extern "C" __global__ void xorshift_streams(const unsigned* seed32, const unsigned long long* seed64,
                                            const int* steps, unsigned* out32, unsigned long long* out64)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned x = seed32[t];
    unsigned long long y = seed64[t];
    int n = steps[t];
    for (int k = 0; k < n; ++k) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        y ^= y >> 12;
        y ^= y << 25;
        y ^= y >> 27;
    }
    out32[t] = x;
    out64[t] = y * 2685821657736338717ull;
}
