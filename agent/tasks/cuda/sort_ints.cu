extern "C" __global__ void sort_ints(int* a, int n) {
    __shared__ int s[128];
    int t = threadIdx.x;
    if (t < n) s[t] = a[t];
    __syncthreads();
    for (int phase = 0; phase < n; phase++) {
        int i = 2 * t + (phase & 1);
        if (i + 1 < n && s[i] > s[i + 1]) {
            int tmp = s[i];
            s[i] = s[i + 1];
            s[i + 1] = tmp;
        }
        __syncthreads();
    }
    if (t < n) a[t] = s[t];
}
