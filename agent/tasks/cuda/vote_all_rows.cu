extern "C" __global__ void vote_all_rows(const int* m, int* all_pos, int* any_zero, int rows) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    int v = m[r * 32 + lane];
    int all = __all_sync(0xffffffffu, v > 0);
    int any = __any_sync(0xffffffffu, v == 0);
    if (lane == 0) {
        all_pos[r] = all;
        any_zero[r] = any;
    }
}
