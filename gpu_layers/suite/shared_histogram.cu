// Histogram of high nibbles of bytes: shared-memory atomicAdd, grid-stride loop, global merge.
extern "C" __global__ void shared_histogram(const unsigned char* text, int n, unsigned* hist)
{
    __shared__ unsigned h[16];
    int t = threadIdx.x;
    if (t < 16)
        h[t] = 0u;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&h[text[i] >> 4], 1u);
    __syncthreads();
    if (t < 16 && h[t] != 0u)
        atomicAdd(&hist[t], h[t]);
}
