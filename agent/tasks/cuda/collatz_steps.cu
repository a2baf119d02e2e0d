extern "C" __global__ void collatz_steps(const unsigned int* start, int* steps, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long v = start[i];
    int count = 0;
    while (v != 1) {
        v = (v & 1) ? 3 * v + 1 : v / 2;
        count++;
    }
    steps[i] = count;
}
