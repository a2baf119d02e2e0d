// 64-bit bit intrinsics: __popcll, __clzll, __brevll, __ffsll, plus __popc of the folded halves.
extern "C" __global__ void bit_counts64(const unsigned long long* in, int* counts, unsigned long long* rev)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long x = in[t];
    unsigned fold = (unsigned)x ^ (unsigned)(x >> 32);
    counts[4 * t + 0] = __popcll(x);
    counts[4 * t + 1] = __clzll((long long)x);
    counts[4 * t + 2] = __ffsll((long long)x);
    counts[4 * t + 3] = __popc(fold);
    rev[t] = __brevll(x);
}
