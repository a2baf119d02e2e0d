// Stable rank sort: each thread counts the elements that precede its own and scatters it.
extern "C" __global__ void rank_sort(int n, const int* in, int* out, int* rank)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    int v = in[t], r = 0;
    for (int i = 0; i < n; ++i) {
        int w = in[i];
        r += (w < v) || (w == v && i < t);
    }
    out[r] = v;
    rank[t] = r;
}
