// Spin locks, a ticket lock and flag hand-offs: threads of one warp wait for each other (independent
// thread scheduling); every thread takes the lock, then updates plain (volatile) state inside it.
extern "C" __global__ void spin_lock_cas(int* lock, int* total, int* seen, int n) {
    int t = threadIdx.x;
    bool done = false;
    while (!done) {
        if (atomicCAS(lock, 0, 1) == 0) {
            volatile int* vt = total;
            int c = vt[1];
            seen[c] = 1;
            vt[0] = vt[0] + t * 3 + 1;
            vt[1] = c + 1;
            __threadfence();
            atomicExch(lock, 0);
            done = true;
        }
    }
}
extern "C" __global__ void spin_lock_outside(int* lock, int* total, int* seen, int n) {
    int t = threadIdx.x;
    while (atomicCAS(lock, 0, 1) != 0) { }
    volatile int* vt = total;
    int c = vt[1];
    seen[c] = 1;
    vt[0] = vt[0] + t * 3 + 1;
    vt[1] = c + 1;
    __threadfence();
    atomicExch(lock, 0);
}
extern "C" __global__ void ticket_lock(unsigned* tickets, int* total, int* seen, int n) {
    int t = threadIdx.x;
    unsigned my = atomicAdd(&tickets[0], 1u);
    while (atomicAdd(&tickets[1], 0u) != my) { }
    volatile int* vt = total;
    int c = vt[1];
    seen[c] = (int)my + 1;
    vt[0] = vt[0] + t * 5 + 2;
    vt[1] = c + 1;
    __threadfence();
    atomicAdd(&tickets[1], 1u);
}
// A chain of flag hand-offs between the warps of a block: warp w waits for warp w-1's flag.
extern "C" __global__ void flag_chain(int* data, int* out) {
    __shared__ volatile int flag[4];
    __shared__ volatile int val[4];
    int t = threadIdx.x, w = t / 32, lane = t % 32;
    if (t < 4) { flag[t] = 0; val[t] = 0; }
    __syncthreads();
    if (lane == 0) {
        int prev = 0;
        if (w > 0) { while (flag[w - 1] == 0) { } prev = val[w - 1]; }
        val[w] = prev * 3 + data[w];
        __threadfence_block();
        flag[w] = 1;
    }
    __syncthreads();
    out[t] = val[w] + lane;
}
