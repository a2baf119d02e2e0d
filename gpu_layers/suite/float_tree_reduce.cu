// Tree reductions in shared memory: float sum (fixed order, __fadd_rn), max and min per block.
extern "C" __global__ void float_tree_reduce(const float* in, float* out)
{
    __shared__ float s[64], hi[64], lo[64];
    int t = threadIdx.x;
    float v = in[blockIdx.x * blockDim.x + t];
    s[t] = v;
    hi[t] = v;
    lo[t] = v;
    __syncthreads();
    for (int off = blockDim.x >> 1; off > 0; off >>= 1) {
        if (t < off) {
            s[t] = __fadd_rn(s[t], s[t + off]);
            hi[t] = fmaxf(hi[t], hi[t + off]);
            lo[t] = fminf(lo[t], lo[t + off]);
        }
        __syncthreads();
    }
    if (t == 0) {
        out[3 * blockIdx.x + 0] = s[0];
        out[3 * blockIdx.x + 1] = hi[0];
        out[3 * blockIdx.x + 2] = lo[0];
    }
}
