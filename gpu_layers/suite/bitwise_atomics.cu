// atomicAnd/Or/Xor in shared memory per block, then merged into global memory with atomics.
extern "C" __global__ void bitwise_atomics(const unsigned* in, unsigned* per_block, unsigned* global_acc)
{
    __shared__ unsigned acc[3];
    int t = threadIdx.x;
    if (t == 0) {
        acc[0] = 0xffffffffu;
        acc[1] = 0u;
        acc[2] = 0u;
    }
    __syncthreads();
    unsigned v = in[blockIdx.x * blockDim.x + t];
    atomicAnd(&acc[0], v);
    atomicOr(&acc[1], v);
    atomicXor(&acc[2], v);
    __syncthreads();
    if (t < 3)
        per_block[3 * blockIdx.x + t] = acc[t];
    if (t == 0) {
        atomicAnd(&global_acc[0], acc[0]);
        atomicOr(&global_acc[1], acc[1]);
        atomicXor(&global_acc[2], acc[2]);
    }
}
