// 4x4 matrix times homogeneous points (float4 loads and stores), fma chains with single rounding.
extern "C" __global__ void mat4_transform(const float* m, const float4* pts, float4* out, int n)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    float4 p = pts[t];
    float r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        r[i] = __fmaf_rn(m[4 * i + 0], p.x,
                         __fmaf_rn(m[4 * i + 1], p.y, __fmaf_rn(m[4 * i + 2], p.z, __fmul_rn(m[4 * i + 3], p.w))));
    out[t] = make_float4(r[0], r[1], r[2], r[3]);
}
