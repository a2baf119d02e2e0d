// Reverse each block's slice through static shared memory; also difference with the mirror element.
extern "C" __global__ void shared_reverse(const int* in, int* rev, int* diff)
{
    __shared__ int tile[32];
    int t = threadIdx.x;
    int base = blockIdx.x * blockDim.x;
    tile[t] = in[base + t];
    __syncthreads();
    int mirror = tile[blockDim.x - 1 - t];
    rev[base + t] = mirror;
    diff[base + t] = mirror - tile[t];
}
