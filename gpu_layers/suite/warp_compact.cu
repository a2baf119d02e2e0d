// Stream compaction per warp: ballot, then popc of the lower lanes' bits gives each survivor's slot.
extern "C" __global__ void warp_compact(const int* in, int* out, int* counts)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int warp = t >> 5;
    int v = in[t];
    bool keep = (v % 3) != 0;
    unsigned b = __ballot_sync(0xffffffffu, keep);
    if (keep)
        out[warp * 32 + __popc(b & ((1u << lane) - 1u))] = v;
    if (lane == 0)
        counts[warp] = __popc(b);
}
