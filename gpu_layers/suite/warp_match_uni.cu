// Warp matching and uniformity: __match_any_sync (32- and 64-bit, also under a sub-mask),
// __match_all_sync, __uni_sync, with __syncwarp and block/system memory fences between steps.
extern "C" __global__ void warp_match_uni(const int* keys, const long long* keys64, unsigned* any_mask,
                                          unsigned* all_mask, int* flags)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int k = keys[t];
    any_mask[3 * t + 0] = __match_any_sync(0xffffffffu, k);
    any_mask[3 * t + 1] = __match_any_sync(0xffffffffu, keys64[t]);
    unsigned sub = 0u;
    if (lane < 20)
        sub = __match_any_sync(0x000fffffu, k % 3);
    any_mask[3 * t + 2] = sub;
    __syncwarp();
    __threadfence_block();
    int pred = -1;
    all_mask[t] = __match_all_sync(0xffffffffu, k, &pred);
    int uni = __uni_sync(0xffffffffu, k > 0);
    __threadfence_system();
    flags[t] = pred | (uni << 1);
}
