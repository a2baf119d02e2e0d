extern "C" __global__ void count_equal(const int* a, int key, int* count, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && a[i] == key) atomicAdd(count, 1);
}
