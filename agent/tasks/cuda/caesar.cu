extern "C" __global__ void caesar(const unsigned char* text, unsigned char* out, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned char c = text[i];
    if (c >= 'a' && c <= 'z') c = 'a' + (c - 'a' + k) % 26;
    else if (c >= 'A' && c <= 'Z') c = 'A' + (c - 'A' + k) % 26;
    out[i] = c;
}
