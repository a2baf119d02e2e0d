// Double reductions in a fixed order: a shared-memory tree sum (__dadd_rn), a warp butterfly sum of doubles with __shfl_xor_sync, max/min, and a per-thread fma dot product.
extern "C" __global__ void f64_reduce(const double* in, const double* w, double* out, double* dots, int len)
{
    __shared__ double sum[64], mx[64], mn[64];
    int tid = threadIdx.x;
    int g = blockIdx.x * blockDim.x + tid;
    double x = in[g];
    sum[tid] = x;
    mx[tid] = x;
    mn[tid] = x;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sum[tid] = __dadd_rn(sum[tid], sum[tid + s]);
            mx[tid] = fmax(mx[tid], mx[tid + s]);
            mn[tid] = fmin(mn[tid], mn[tid + s]);
        }
        __syncthreads();
    }
    double b = x;
    for (int m = 16; m > 0; m >>= 1)
        b = __dadd_rn(b, __shfl_xor_sync(0xffffffffu, b, m));
    double dot = 0.0;
    for (int i = 0; i < len; i++)
        dot = fma(in[(g + i) % 128], w[i], dot);
    if (tid == 0) {
        out[3 * blockIdx.x] = sum[0];
        out[3 * blockIdx.x + 1] = mx[0];
        out[3 * blockIdx.x + 2] = mn[0];
    }
    out[6 + g] = b;
    dots[g] = dot;
}
