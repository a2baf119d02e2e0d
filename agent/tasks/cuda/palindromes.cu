extern "C" __global__ void palindromes(const unsigned char* text, const int* offsets, int words, int* flag) {
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= words) return;
    int lo = offsets[w], hi = offsets[w + 1] - 1;
    int ok = 1;
    while (lo < hi) {
        if (text[lo] != text[hi]) { ok = 0; break; }
        lo++;
        hi--;
    }
    flag[w] = ok;
}
