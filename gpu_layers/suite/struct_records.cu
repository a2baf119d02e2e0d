// An array of 16-byte structs with mixed field widths (int, short, uchar, schar, u64).
struct Rec {
    int id;
    short dx;
    unsigned char kind;
    signed char bias;
    unsigned long long tag;
};
extern "C" __global__ void struct_records(const Rec* recs, int n, long long* out, int* small)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    Rec r = recs[t];
    long long v = (long long)r.id * r.kind + r.dx * r.bias;
    out[t] = v ^ (long long)(r.tag >> (r.kind & 63));
    small[t] = r.dx + r.bias * 65536;
}
