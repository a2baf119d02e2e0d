extern "C" __global__ void histogram(const unsigned char* data, int* bins, int n) {
    __shared__ int local[16];
    int t = threadIdx.x;
    if (t < 16) local[t] = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + t;
    if (i < n) atomicAdd(&local[data[i] >> 4], 1);
    __syncthreads();
    if (t < 16 && local[t] != 0) atomicAdd(&bins[t], local[t]);
}
