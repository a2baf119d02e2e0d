// Nested divergent branches on lane bits and data across two warps, reconverging for a final step.
extern "C" __global__ void lane_divergence(const int* in, int* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[t];
    int r;
    if (t & 1) {
        if (v > 0) {
            r = v * 3;
            if (t & 4)
                r -= 7;
            else
                r ^= 0x55;
        } else {
            r = -v + (t >> 3);
        }
    } else if (t & 2) {
        r = 0;
        for (int k = 0; k < (v & 7); ++k)
            r += k * t;
    } else {
        r = (v % 5 == 0) ? 500 : v / 5;
    }
    if (t & 8)
        r += 10000;
    out[t] = r * 2 + (v & 1);
}
