// atomicExch: per-thread slot swaps (old values returned) and a per-block claim that one thread wins.
extern "C" __global__ void exch_claim(int* slots, const int* vals, int* old, int* lock, int* winners)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    old[t] = atomicExch(&slots[t], vals[t]);
    int prev = atomicExch(&lock[blockIdx.x], 1);
    if (prev == 0)
        atomicAdd(winners, 1);
}
