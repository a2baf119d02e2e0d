// Division and remainder by constants (nvcc turns these into multiply-high and shift sequences).
extern "C" __global__ void div_by_consts(const int* in, int* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int x = in[t];
    unsigned u = (unsigned)x;
    int* o = out + 8 * t;
    o[0] = x / 7;
    o[1] = x % 7;
    o[2] = x / -3;
    o[3] = x / 10 + x % 10;
    o[4] = x / 16 - x % 8;
    o[5] = (int)(u / 1000u);
    o[6] = (int)(u % 1000u);
    o[7] = (int)(u / 3u + u % 6u);
}
