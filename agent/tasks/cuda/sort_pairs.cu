extern "C" __global__ void sort_pairs(const int* keys, const int* vals, int* out_keys, int* out_vals, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int k = keys[i];
    int rank = 0;
    for (int j = 0; j < n; j++) {
        int kj = keys[j];
        if (kj < k || (kj == k && j < i)) rank++;
    }
    out_keys[rank] = k;
    out_vals[rank] = vals[i];
}
