extern "C" __global__ void to_upper(const unsigned char* text, unsigned char* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned char c = text[i];
    if (c >= 'a' && c <= 'z') c = c - 'a' + 'A';
    out[i] = c;
}
