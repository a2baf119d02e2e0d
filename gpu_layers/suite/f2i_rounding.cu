// Float to integer conversions with every rounding mode and saturation (PTX cvt semantics).
extern "C" __global__ void f2i_rounding(const float* in, int* si, unsigned* ui, long long* sl)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float f = in[t];
    si[4 * t + 0] = __float2int_rn(f);
    si[4 * t + 1] = __float2int_rz(f);
    si[4 * t + 2] = __float2int_rd(f);
    si[4 * t + 3] = __float2int_ru(f);
    ui[4 * t + 0] = __float2uint_rn(f);
    ui[4 * t + 1] = __float2uint_rz(f);
    ui[4 * t + 2] = __float2uint_rd(f);
    ui[4 * t + 3] = __float2uint_ru(f);
    sl[2 * t + 0] = __float2ll_rn(f);
    sl[2 * t + 1] = __float2ll_rz(f);
}
