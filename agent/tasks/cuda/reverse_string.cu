extern "C" __global__ void reverse_string(const unsigned char* text, unsigned char* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = text[n - 1 - i];
}
