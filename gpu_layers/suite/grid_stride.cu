// Grid-stride loop: fewer threads than elements; each thread handles i, i + stride, ...
extern "C" __global__ void grid_stride(int n, const int* in, int* out, int* visits)
{
    int stride = gridDim.x * blockDim.x;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int count = 0;
    for (int i = t; i < n; i += stride) {
        out[i] = in[i] * (i & 3) - (int)(blockIdx.x * 7u + threadIdx.x);
        ++count;
    }
    visits[t] = count;
}
