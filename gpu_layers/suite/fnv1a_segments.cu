// FNV-1a, 32- and 64-bit, of variable-length byte segments [offsets[s], offsets[s+1]).
extern "C" __global__ void fnv1a_segments(const unsigned char* text, const int* offsets, int nseg,
                                          unsigned* h32, unsigned long long* h64)
{
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= nseg)
        return;
    unsigned a = 2166136261u;
    unsigned long long b = 14695981039346656037ull;
    for (int k = offsets[s]; k < offsets[s + 1]; ++k) {
        unsigned c = text[k];
        a = (a ^ c) * 16777619u;
        b = (b ^ c) * 1099511628211ull;
    }
    h32[s] = a;
    h64[s] = b;
}
