// Float-to-integral rounding (rintf, truncf, floorf, ceilf), __saturatef, __frcp_rn, classification
// (isnan, isinf, isfinite) and a __threadfence between the writes.
extern "C" __global__ void float_rounding_fns(const float* in, const float* cls_in, float* out, int* cls)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float f = in[t];
    float* o = out + 6 * t;
    o[0] = rintf(f);
    o[1] = truncf(f);
    o[2] = floorf(f);
    o[3] = ceilf(f);
    o[4] = __saturatef(f);
    o[5] = __frcp_rn(f);
    __threadfence();
    f = cls_in[t];
    cls[t] = (isnan(f) ? 1 : 0) | (isinf(f) ? 2 : 0) | (isfinite(f) ? 4 : 0) | (signbit(f) ? 8 : 0);
}
