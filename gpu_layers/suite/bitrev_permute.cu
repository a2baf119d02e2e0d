// Bit-reversal permutation (FFT order) of 2^logn elements: out[brev(i)] = in[i] (a scatter).
extern "C" __global__ void bitrev_permute(int logn, const int* in, int* out)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned j = __brev(i) >> (32 - logn);
    out[j] = in[i] * 2 + (int)(j & 1u);
}
