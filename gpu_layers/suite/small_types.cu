// 8- and 16-bit loads (sign- and zero-extending) and stores of truncated results.
extern "C" __global__ void small_types(const signed char* s8, const unsigned char* u8, const short* s16,
                                       const unsigned short* u16, short* out16, unsigned char* out8, int* sums)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int a = s8[t], b = u8[t], c = s16[t], d = u16[t];
    sums[2 * t + 0] = a * 1000 + b;
    sums[2 * t + 1] = c * 3 + d;
    out16[t] = (short)(c * 2 - d);
    out8[t] = (unsigned char)(a + b);
}
