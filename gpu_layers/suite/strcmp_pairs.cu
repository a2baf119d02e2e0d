// strcmp of NUL-terminated string pairs inside one byte buffer: sign and common prefix length.
extern "C" __global__ void strcmp_pairs(const unsigned char* text, const int* a_off, const int* b_off,
                                        int* cmp, int* prefix)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned char* p = text + a_off[t];
    const unsigned char* q = text + b_off[t];
    int i = 0;
    while (p[i] != 0 && p[i] == q[i])
        ++i;
    cmp[t] = (p[i] > q[i]) - (p[i] < q[i]);
    prefix[t] = i;
}
