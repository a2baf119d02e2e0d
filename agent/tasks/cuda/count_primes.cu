__device__ __forceinline__ int is_prime(int v) {
    if (v < 2) return 0;
    for (int d = 2; d * d <= v; d++)
        if (v % d == 0) return 0;
    return 1;
}

extern "C" __global__ void count_primes(int n, int* count) {
    int local = 0;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n; p += gridDim.x * blockDim.x)
        local += is_prime(p);
    if (local) atomicAdd(count, local);
}
