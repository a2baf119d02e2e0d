extern "C" __global__ void count_descents(const int* a, int* bad, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && i < n && a[i - 1] > a[i]) atomicAdd(bad, 1);
}
