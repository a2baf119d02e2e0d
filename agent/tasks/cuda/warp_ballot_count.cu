extern "C" __global__ void warp_ballot_count(const int* a, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    bool positive = i < n && a[i] > 0;
    unsigned int mask = __ballot_sync(0xffffffffu, positive);
    if ((threadIdx.x & 31) == 0) out[i / 32] = __popc(mask);
}
