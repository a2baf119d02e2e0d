// Integer square root (digit-by-digit method) and remainder of unsigned 32-bit values.
extern "C" __global__ void isqrt_u32(const unsigned* in, unsigned* root, unsigned* rem)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned x = in[t], r = 0u, bit = 1u << 30;
    while (bit > x)
        bit >>= 2;
    while (bit != 0u) {
        if (x >= r + bit) {
            x -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
        bit >>= 2;
    }
    root[t] = r;
    rem[t] = x;
}
