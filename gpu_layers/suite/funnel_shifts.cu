// Funnel shifts: wrapping (__funnelshift_l/_r) and clamping (_lc/_rc) shift amounts; 64-bit rotate.
extern "C" __global__ void funnel_shifts(const unsigned* lo, const unsigned* hi, const unsigned* sh, unsigned* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned l = lo[t], h = hi[t], s = sh[t];
    unsigned* o = out + 6 * t;
    o[0] = __funnelshift_l(l, h, s);
    o[1] = __funnelshift_r(l, h, s);
    o[2] = __funnelshift_lc(l, h, s);
    o[3] = __funnelshift_rc(l, h, s);
    unsigned long long v = ((unsigned long long)h << 32) | l;
    unsigned r = s & 63u;
    unsigned long long rotl = r ? (v << r) | (v >> (64u - r)) : v;
    o[4] = (unsigned)rotl;
    o[5] = (unsigned)(rotl >> 32);
}
