extern "C" __global__ void argmax(const int* a, int* out, int n) {
    __shared__ int sv[128];
    __shared__ int si[128];
    int t = threadIdx.x;
    int bv = 0, bi = -1;
    for (int j = t; j < n; j += 128) {
        int v = a[j];
        if (bi < 0 || v > bv) { bv = v; bi = j; }
    }
    sv[t] = bv;
    si[t] = bi;
    __syncthreads();
    for (int s = 64; s > 0; s >>= 1) {
        if (t < s) {
            int ov = sv[t + s], oi = si[t + s];
            if (oi >= 0 && (si[t] < 0 || ov > sv[t] || (ov == sv[t] && oi < si[t]))) {
                sv[t] = ov;
                si[t] = oi;
            }
        }
        __syncthreads();
    }
    if (t == 0) out[0] = si[0];
}
