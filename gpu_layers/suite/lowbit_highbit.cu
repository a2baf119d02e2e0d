// Lowest and highest set bit, floor/ceil log2, next power of two, power-of-two test.
extern "C" __global__ void lowbit_highbit(const unsigned* in, unsigned* low, int* info, unsigned* next_pow2)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned x = in[t];
    low[t] = x & (0u - x);
    int first = __ffs((int)x);                 // 1-based, 0 when x == 0
    int high = x ? 31 - __clz((int)x) : -1;    // floor(log2 x)
    int ceil_log = (x > 1u) ? 32 - __clz((int)(x - 1u)) : 0;
    int pow2 = (x != 0u) && ((x & (x - 1u)) == 0u);
    info[t] = (first << 24) | ((high & 0xff) << 16) | (ceil_log << 8) | pow2;
    next_pow2[t] = (ceil_log < 32) ? (1u << ceil_log) : 0u;
}
