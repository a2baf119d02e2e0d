extern "C" __global__ void gcd_pairs(const unsigned int* a, const unsigned int* b, unsigned int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int x = a[i], y = b[i];
    while (y != 0) {
        unsigned int t = x % y;
        x = y;
        y = t;
    }
    out[i] = x;
}
