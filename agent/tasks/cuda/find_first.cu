extern "C" __global__ void find_first(const int* a, int key, int* first, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && a[i] == key) atomicMin(first, i);
}
