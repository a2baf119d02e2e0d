extern "C" __global__ void matmul(const int* A, const int* B, int* C, int m, int k, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n) return;
    int acc = 0;
    for (int t = 0; t < k; t++)
        acc += A[row * k + t] * B[t * n + col];
    C[row * n + col] = acc;
}
