// Polynomial rolling hash (h = h * 31 + byte, mod 2^32) of every window of w bytes of a text.
extern "C" __global__ void rolling_hash(const unsigned char* text, int n, int w, unsigned* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i + w > n)
        return;
    unsigned h = 0u;
    for (int k = 0; k < w; ++k)
        h = h * 31u + text[i + k];
    out[i] = h;
}
