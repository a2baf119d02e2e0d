// Mandelbrot escape iterations on a 2D grid of points (data-dependent float loop, explicit rounding).
extern "C" __global__ void mandelbrot(float x0, float y0, float dx, float dy, int max_iter, int* iters, float* mag)
{
    int px = blockIdx.x * blockDim.x + threadIdx.x;
    int py = blockIdx.y * blockDim.y + threadIdx.y;
    int w = gridDim.x * blockDim.x;
    float cx = __fmaf_rn((float)px, dx, x0);
    float cy = __fmaf_rn((float)py, dy, y0);
    float zx = 0.0f, zy = 0.0f, m = 0.0f;
    int k = 0;
    while (k < max_iter) {
        float xx = __fmul_rn(zx, zx), yy = __fmul_rn(zy, zy);
        m = __fadd_rn(xx, yy);
        if (m > 4.0f)
            break;
        float xy = __fmul_rn(zx, zy);
        zy = __fadd_rn(__fadd_rn(xy, xy), cy);
        zx = __fadd_rn(__fsub_rn(xx, yy), cx);
        ++k;
    }
    iters[py * w + px] = k;
    mag[py * w + px] = m;
}
