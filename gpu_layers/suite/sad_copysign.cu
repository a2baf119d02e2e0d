// Sum of absolute differences (__sad/__usad -> sad.s32/sad.u32) and copysignf (copysign.f32).
extern "C" __global__ void sad_copysign(const int* a, const int* b, const float* x, const float* y,
                                        unsigned* sad, float* cs)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    sad[2 * t + 0] = __sad(a[t], b[t], 1000u);
    sad[2 * t + 1] = __usad((unsigned)a[t], (unsigned)b[t], (unsigned)t);
    cs[t] = copysignf(x[t], y[t]);
}
