// Morton (Z-order) codes of a 2D grid of points with 2D blocks, and their decoding.
__device__ unsigned spread16(unsigned v)
{
    v &= 0xffffu;
    v = (v | (v << 8)) & 0x00ff00ffu;
    v = (v | (v << 4)) & 0x0f0f0f0fu;
    v = (v | (v << 2)) & 0x33333333u;
    v = (v | (v << 1)) & 0x55555555u;
    return v;
}
__device__ unsigned compact16(unsigned v)
{
    v &= 0x55555555u;
    v = (v | (v >> 1)) & 0x33333333u;
    v = (v | (v >> 2)) & 0x0f0f0f0fu;
    v = (v | (v >> 4)) & 0x00ff00ffu;
    v = (v | (v >> 8)) & 0x0000ffffu;
    return v;
}
extern "C" __global__ void morton2d(unsigned ox, unsigned oy, unsigned* codes, unsigned* back)
{
    unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
    unsigned width = gridDim.x * blockDim.x;
    unsigned idx = y * width + x;
    unsigned c = spread16(x + ox) | (spread16(y + oy) << 1);
    codes[idx] = c;
    back[idx] = (compact16(c >> 1) << 16) | compact16(c);
}
