extern "C" __global__ void max_atomic(const int* a, int* result, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicMax(result, a[i]);
}
