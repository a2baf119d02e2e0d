// Two-sum search with nested loops, continue, inner break and an outer break through a flag.
extern "C" __global__ void pair_search(const int* a, int na, const int* b, int nb, const int* target, int* found)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int want = target[t];
    int fi = -1, fj = -1, tried = 0;
    for (int i = 0; i < na; ++i) {
        if (a[i] < 0)
            continue;
        for (int j = 0; j < nb; ++j) {
            ++tried;
            int s = a[i] + b[j];
            if (s == want) {
                fi = i;
                fj = j;
                break;
            }
            if (s > want + 100)
                break;
        }
        if (fi >= 0)
            break;
    }
    found[t] = fi * 1000000 + fj * 1000 + tried;
}
