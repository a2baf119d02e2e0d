extern "C" __global__ void reverse_blocks(const int* in, int* out) {
    __shared__ int tile[64];
    int t = threadIdx.x;
    int base = blockIdx.x * 64;
    tile[t] = in[base + t];
    __syncthreads();
    out[base + t] = tile[63 - t];
}
