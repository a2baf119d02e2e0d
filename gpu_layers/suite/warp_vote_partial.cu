// Votes in a partial warp (block of 48) and in a divergent half-warp with a sub-mask; __activemask at entry.
extern "C" __global__ void warp_vote_partial(const int* in, unsigned* masks, int* flags)
{
    int t = threadIdx.x;
    int lane = t & 31;
    int v = in[t];
    unsigned act = __activemask();
    unsigned pos = __ballot_sync(act, v > 0);
    unsigned half = 0u;
    int any_h = -1, all_h = -1;
    if (lane < 16) {
        half = __ballot_sync(0x0000ffffu, v & 1);
        any_h = __any_sync(0x0000ffffu, v == 7);
        all_h = __all_sync(0x0000ffffu, v != 0);
    }
    masks[3 * t + 0] = act;
    masks[3 * t + 1] = pos;
    masks[3 * t + 2] = half;
    flags[t] = any_h * 10 + all_h + 100 * __all_sync(act, v > -50) + 1000 * __any_sync(act, v > 90);
}
