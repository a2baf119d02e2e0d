// Dynamic shared memory (extern __shared__): rotate a block's slice by k and add squared neighbours.
extern "C" __global__ void dyn_shared_rotate(const int* in, int k, int* out)
{
    extern __shared__ int buf[];
    int t = threadIdx.x, n = blockDim.x;
    int base = blockIdx.x * n;
    int v = in[base + t];
    buf[t] = v;
    buf[n + t] = v * v;
    __syncthreads();
    out[base + t] = buf[(t + k) % n] + buf[n + (t + n - 1) % n];
}
