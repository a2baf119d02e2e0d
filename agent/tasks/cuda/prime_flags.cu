extern "C" __global__ void prime_flags(const unsigned int* x, int* flag, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int v = x[i];
    int prime = v >= 2;
    for (unsigned int d = 2; d * d <= v; d++) {
        if (v % d == 0) { prime = 0; break; }
    }
    flag[i] = prime;
}
