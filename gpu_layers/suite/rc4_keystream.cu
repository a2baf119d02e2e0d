// RC4 key schedule and keystream per thread with a 256-byte local state array (byte loads/stores).
extern "C" __global__ void rc4_keystream(const unsigned char* keys, const int* lens, int nwords, unsigned* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned char S[256];
    const unsigned char* key = keys + 16 * t;
    int keylen = lens[t];
    for (int i = 0; i < 256; ++i)
        S[i] = (unsigned char)i;
    unsigned j = 0u;
    for (int i = 0; i < 256; ++i) {
        j = (j + S[i] + key[i % keylen]) & 255u;
        unsigned char tmp = S[i];
        S[i] = S[j];
        S[j] = tmp;
    }
    unsigned i = 0u;
    j = 0u;
    for (int w = 0; w < nwords; ++w) {
        unsigned word = 0u;
        for (int b = 0; b < 4; ++b) {
            i = (i + 1u) & 255u;
            j = (j + S[i]) & 255u;
            unsigned char tmp = S[i];
            S[i] = S[j];
            S[j] = tmp;
            word |= (unsigned)S[(S[i] + S[j]) & 255u] << (8 * b);
        }
        out[t * nwords + w] = word;
    }
}
