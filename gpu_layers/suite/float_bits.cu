// Float bit manipulation: exponent/mantissa fields, next float up in magnitude, scaled mantissa, sign flip.
extern "C" __global__ void float_bits(const float* in, int* info, float* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float f = in[t];
    unsigned u = __float_as_uint(f);
    int e = (int)((u >> 23) & 0xffu);
    info[3 * t + 0] = e - 127;
    info[3 * t + 1] = (int)(u & 0x7fffffu);
    info[3 * t + 2] = (e == 0) ? ((u & 0x7fffffu) ? 1 : 0) : (e == 255 ? 3 : 2);  // zero/sub/normal/special
    out[3 * t + 0] = __uint_as_float(u + 1u);
    out[3 * t + 1] = __uint_as_float((u & 0x807fffffu) | (127u << 23));
    out[3 * t + 2] = __int_as_float(__float_as_int(f) ^ (int)0x80000000u);
}
