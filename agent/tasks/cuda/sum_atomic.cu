extern "C" __global__ void sum_atomic(const int* a, int* total, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(total, a[i]);
}
