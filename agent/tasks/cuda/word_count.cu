__device__ __forceinline__ bool is_space(unsigned char c) {
    return c == ' ' || c == '\n' || c == '\t';
}

extern "C" __global__ void word_count(const unsigned char* text, int n, int* count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (!is_space(text[i]) && (i == 0 || is_space(text[i - 1]))) atomicAdd(count, 1);
}
