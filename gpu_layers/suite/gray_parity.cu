// Gray code encode/decode (prefix xor by doubling shifts) and bit parity three ways.
extern "C" __global__ void gray_parity(const unsigned* in, unsigned* gray, unsigned* decoded, int* parity)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned x = in[t];
    unsigned g = x ^ (x >> 1);
    unsigned d = g;
    for (int s = 1; s < 32; s <<= 1)
        d ^= d >> s;
    unsigned f = x ^ (x >> 16);
    f ^= f >> 8;
    f ^= f >> 4;
    int p_fold = (int)((0x6996u >> (f & 0xfu)) & 1u);
    int p_loop = 0;
    for (unsigned v = x; v != 0u; v &= v - 1u)
        p_loop ^= 1;
    gray[t] = g;
    decoded[t] = d;
    parity[t] = (__popc(x) & 1) | (p_fold << 1) | (p_loop << 2);
}
