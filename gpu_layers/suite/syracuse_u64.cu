// 3n+1 trajectories in 64 bits: steps to reach 1 (capped) and the peak value.
extern "C" __global__ void syracuse_u64(const unsigned long long* start, int cap, int* steps,
                                        unsigned long long* peak)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long n = start[t], p = n;
    int k = 0;
    while (n != 1ull && k < cap) {
        n = (n & 1ull) ? 3ull * n + 1ull : n >> 1;
        if (n > p)
            p = n;
        ++k;
    }
    steps[t] = k;
    peak[t] = p;
}
