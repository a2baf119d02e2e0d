// Bitwise CRC-32 (reflected polynomial 0xEDB88320) of byte segments: nested loops, mask-select.
extern "C" __global__ void crc32_bytes(const unsigned char* data, const int* offsets, int nseg, unsigned* crc)
{
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= nseg)
        return;
    unsigned c = 0xffffffffu;
    for (int k = offsets[s]; k < offsets[s + 1]; ++k) {
        c ^= data[k];
        for (int b = 0; b < 8; ++b)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    crc[s] = ~c;
}
