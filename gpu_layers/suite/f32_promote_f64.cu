// Float code with double literals, as language models write it: x * 0.1, x / 3.0, x * 0.5 + 0.25 and sqrt(x + 2.0) promote to f64 and round back to float; (double)i * 0.25.
extern "C" __global__ void f32_promote_f64(const float* x, float* out, double* wide, int n)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    float v = x[t];
    float* o = out + 6 * t;
    o[0] = v * 0.1;
    o[1] = v / 3.0;
    o[2] = v * 0.5 + 0.25;
    o[3] = sqrt(v * v + 2.0);
    o[4] = v * 0.5;
    o[5] = (v > 0.3) ? v - 0.3 : v + 1e-9;
    wide[2 * t] = v * 0.1;
    wide[2 * t + 1] = (double)t * 0.25 + v;
}
