extern "C" __global__ void binary_search(const int* sorted, int n, const int* queries, int* pos, int q) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= q) return;
    int key = queries[j];
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (sorted[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    pos[j] = lo;
}
