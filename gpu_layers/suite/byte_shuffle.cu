// __byte_perm with data-driven selectors, an endian swap and a byte rotation.
extern "C" __global__ void byte_shuffle(const unsigned* x, const unsigned* y, const unsigned* sel,
                                        unsigned* perm, unsigned* swapped, unsigned* rot)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned a = x[t], b = y[t];
    perm[t] = __byte_perm(a, b, sel[t]);
    swapped[t] = __byte_perm(a, 0u, 0x0123u);
    rot[t] = __byte_perm(a, a, (unsigned)(t & 3) * 0x1111u + 0x3210u);
}
