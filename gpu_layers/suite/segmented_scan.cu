// Segmented inclusive warp scan: head flags via ballot, segment start via __clz, shfl_up steps.
extern "C" __global__ void segmented_scan(const int* in, const int* head, int* out, int* seg_start)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int v = in[t];
    unsigned heads = __ballot_sync(0xffffffffu, head[t] != 0) | 1u;
    unsigned upto = heads & (0xffffffffu >> (31 - lane));
    int start = 31 - __clz((int)upto);
    int s = v;
    for (int off = 1; off < 32; off <<= 1) {
        int u = __shfl_up_sync(0xffffffffu, s, off);
        if (lane - off >= start)
            s += u;
    }
    out[t] = s;
    seg_start[t] = start;
}
