// __shfl_sync with widths 4, 8, 16 and 32 and data-driven (also negative / out of range) source lanes.
extern "C" __global__ void shfl_width_bcast(const int* in, const int* src, int* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[t], s = src[t];
    out[4 * t + 0] = __shfl_sync(0xffffffffu, v, s, 4);
    out[4 * t + 1] = __shfl_sync(0xffffffffu, v, s, 8);
    out[4 * t + 2] = __shfl_sync(0xffffffffu, v, s, 16);
    out[4 * t + 3] = __shfl_sync(0xffffffffu, v, s);
}
