extern "C" __global__ void mulmod(const unsigned int* a, const unsigned int* b, unsigned int* out,
                                  unsigned int m, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (unsigned int)(((unsigned long long)a[i] * b[i]) % m);
}
