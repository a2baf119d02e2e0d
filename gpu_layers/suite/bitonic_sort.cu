// Bitonic sort of 64 ints per block in shared memory (one element per thread).
extern "C" __global__ void bitonic_sort(const int* in, int* out)
{
    __shared__ int s[64];
    unsigned t = threadIdx.x;
    unsigned base = blockIdx.x * 64u;
    s[t] = in[base + t];
    __syncthreads();
    for (unsigned k = 2u; k <= 64u; k <<= 1) {
        for (unsigned j = k >> 1; j > 0u; j >>= 1) {
            unsigned p = t ^ j;
            if (p > t) {
                int a = s[t], b = s[p];
                bool ascending = (t & k) == 0u;
                if ((a > b) == ascending) {
                    s[t] = b;
                    s[p] = a;
                }
            }
            __syncthreads();
        }
    }
    out[base + t] = s[t];
}
