#define TILE 16

extern "C" __global__ void transpose(const float* in, float* out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x;   // column in `in`
    int y = blockIdx.y * TILE + threadIdx.y;   // row in `in`
    if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
    __syncthreads();
    int ox = blockIdx.y * TILE + threadIdx.x;  // column in `out` (a row of `in`)
    int oy = blockIdx.x * TILE + threadIdx.y;  // row in `out` (a column of `in`)
    if (ox < rows && oy < cols) out[oy * rows + ox] = tile[threadIdx.x][threadIdx.y];
}
