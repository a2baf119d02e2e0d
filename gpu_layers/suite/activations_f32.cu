// Activation functions: relu, leaky relu, softsign, hard tanh, lerp, negation.
extern "C" __global__ void activations_f32(const float* x, float* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[t];
    float* o = out + 6 * t;
    o[0] = fmaxf(v, 0.0f);
    o[1] = v > 0.0f ? v : __fmul_rn(v, 0.125f);
    o[2] = __fdiv_rn(v, __fadd_rn(1.0f, fabsf(v)));
    o[3] = fminf(fmaxf(v, -1.0f), 1.0f);
    o[4] = __fmaf_rn(0.25f, __fsub_rn(3.0f, v), v);
    o[5] = -v;
}
