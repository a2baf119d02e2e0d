// Binary search (lower bound) in a sorted array, with early returns for out-of-range keys.
extern "C" __global__ void lower_bound_search(const int* sorted, int n, const int* keys, int* pos, int* probes)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int key = keys[t];
    probes[t] = 0;
    if (key < sorted[0]) {
        pos[t] = -1;
        return;
    }
    if (key > sorted[n - 1]) {
        pos[t] = n;
        return;
    }
    int lo = 0, hi = n, p = 0;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        ++p;
        if (sorted[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    pos[t] = (sorted[lo] == key) ? lo : lo + 1000;
    probes[t] = p;
}
