// Inclusive and exclusive 64-bit prefix sums per block (Hillis-Steele, double-buffered shared memory).
extern "C" __global__ void scan_i64(const long long* in, long long* incl, long long* excl)
{
    __shared__ long long buf[2][32];
    int t = threadIdx.x, n = blockDim.x;
    int base = blockIdx.x * n;
    int cur = 0;
    buf[0][t] = in[base + t];
    __syncthreads();
    for (int off = 1; off < n; off <<= 1) {
        long long v = buf[cur][t];
        if (t >= off)
            v += buf[cur][t - off];
        buf[cur ^ 1][t] = v;
        cur ^= 1;
        __syncthreads();
    }
    incl[base + t] = buf[cur][t];
    excl[base + t] = t ? buf[cur][t - 1] : 0ll;
}
