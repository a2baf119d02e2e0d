// Matrix-vector product y = A x + b, one row per thread; nvcc contracts acc + a * x into fma.rn.f32.
extern "C" __global__ void matvec_f32(int rows, int cols, const float* A, const float* x, const float* b, float* y)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    float acc = b[r];
    for (int c = 0; c < cols; ++c)
        acc = A[r * cols + c] * x[c] + acc;
    y[r] = acc;
}
