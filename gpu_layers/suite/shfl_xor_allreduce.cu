// Butterfly all-reduce with __shfl_xor_sync: max within 8-lane segments, int and 64-bit sums over
// the warp, a float sum (rounded per step), and a lane mask that crosses segments.
extern "C" __global__ void shfl_xor_allreduce(const int* in, const float* fin, int* out, long long* out64, float* fout)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[t];
    int mx = v;
    for (int m = 4; m >= 1; m >>= 1)
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, m, 8));
    int sm = v;
    long long w = (long long)v * 1000003ll;
    float f = fin[t];
    for (int m = 16; m >= 1; m >>= 1) {
        sm += __shfl_xor_sync(0xffffffffu, sm, m);
        w += __shfl_xor_sync(0xffffffffu, w, m);
        f = __fadd_rn(f, __shfl_xor_sync(0xffffffffu, f, m));
    }
    out[3 * t + 0] = mx;
    out[3 * t + 1] = sm;
    out[3 * t + 2] = __shfl_xor_sync(0xffffffffu, v, 9, 8);
    out64[t] = w;
    fout[t] = f;
}
