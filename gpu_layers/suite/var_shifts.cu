// Variable shifts: arithmetic vs logical right shifts, left shifts, 64-bit shifts and a rotate.
extern "C" __global__ void var_shifts(const int* in, const int* amount, int* out32, long long* out64)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int x = in[t];
    int s = amount[t] & 31;
    int s64 = amount[t] & 63;
    unsigned u = (unsigned)x;
    out32[4 * t + 0] = x >> s;
    out32[4 * t + 1] = (int)(u >> s);
    out32[4 * t + 2] = (int)(u << s);
    out32[4 * t + 3] = (int)((u << s) | (u >> ((32 - s) & 31)));
    long long w = (long long)x * 0x10001ll;
    unsigned long long uw = (unsigned long long)w;
    out64[3 * t + 0] = w >> s64;
    out64[3 * t + 1] = (long long)(uw >> s64);
    out64[3 * t + 2] = (long long)(uw << s64);
}
