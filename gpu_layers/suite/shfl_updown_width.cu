// __shfl_up_sync / __shfl_down_sync with widths and per-lane deltas; lanes past a segment keep their value.
extern "C" __global__ void shfl_updown_width(const int* in, const int* delta, int* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[t];
    unsigned d = (unsigned)delta[t] & 31u;
    out[4 * t + 0] = __shfl_up_sync(0xffffffffu, v, 3, 8);
    out[4 * t + 1] = __shfl_down_sync(0xffffffffu, v, 5, 16);
    out[4 * t + 2] = __shfl_up_sync(0xffffffffu, v, d);
    out[4 * t + 3] = __shfl_down_sync(0xffffffffu, v, d, 4);
}
