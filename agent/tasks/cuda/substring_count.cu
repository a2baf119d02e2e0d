extern "C" __global__ void substring_count(const unsigned char* text, int n, const unsigned char* pat, int m,
                                           int* count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > n - m) return;
    for (int j = 0; j < m; j++)
        if (text[i + j] != pat[j]) return;
    atomicAdd(count, 1);
}
