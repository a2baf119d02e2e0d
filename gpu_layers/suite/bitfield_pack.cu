// Bit fields: unsigned and sign-extended extraction at data-driven (pos, len), and insertion.
extern "C" __global__ void bitfield_pack(const unsigned* words, const int* pos, const int* len,
                                         const unsigned* vals, unsigned* ufield, int* sfield, unsigned* inserted)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned w = words[t];
    int p = pos[t], l = len[t];            // 1 <= l <= 31, p + l <= 32
    unsigned mask = (1u << l) - 1u;
    ufield[t] = (w >> p) & mask;
    sfield[t] = (int)(w << (32 - p - l)) >> (32 - l);
    inserted[t] = (w & ~(mask << p)) | ((vals[t] & mask) << p);
}
