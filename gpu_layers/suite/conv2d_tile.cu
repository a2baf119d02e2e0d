// 3x3 integer convolution with a shared tile plus halo (clamped borders), 2D blocks and a 2D grid.
#define TW 8
#define TH 4
extern "C" __global__ void conv2d_tile(const int* img, int w, int h, const int* k3, int* out)
{
    __shared__ int tile[TH + 2][TW + 2];
    int tx = threadIdx.x, ty = threadIdx.y;
    int x0 = blockIdx.x * TW, y0 = blockIdx.y * TH;
    for (int i = ty * TW + tx; i < (TH + 2) * (TW + 2); i += TW * TH) {
        int yy = min(max(y0 + i / (TW + 2) - 1, 0), h - 1);
        int xx = min(max(x0 + i % (TW + 2) - 1, 0), w - 1);
        tile[i / (TW + 2)][i % (TW + 2)] = img[yy * w + xx];
    }
    __syncthreads();
    int acc = 0;
    for (int dy = 0; dy < 3; ++dy)
        for (int dx = 0; dx < 3; ++dx)
            acc += k3[dy * 3 + dx] * tile[ty + dy][tx + dx];
    out[(y0 + ty) * w + x0 + tx] = acc;
}
