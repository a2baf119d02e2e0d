// PTX forms that nvcc does not emit from plain CUDA, through inline asm: bfe (32/64-bit, signed and
// unsigned), mul24/mad24, mad.hi, lop3, cnot, slct, testp, bfind.s32, red (no result) and exit.
extern "C" __global__ void inline_ptx_ops(const unsigned* a, const unsigned* b, const unsigned* pos,
                                          const unsigned* len, const float* f, const float* g,
                                          unsigned* out, unsigned* red_acc, int* after)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned x = a[t], y = b[t], p = pos[t], l = len[t], r;
    unsigned* o = out + 16 * t;
    asm("bfe.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(p), "r"(l));
    o[0] = r;
    asm("bfe.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(p), "r"(l));
    o[1] = r;
    unsigned long long w = ((unsigned long long)y << 32) | x, rw;
    asm("bfe.s64 %0, %1, %2, %3;" : "=l"(rw) : "l"(w), "r"(p + l), "r"(l));
    o[2] = (unsigned)rw;
    o[3] = (unsigned)(rw >> 32);
    unsigned x24 = x & 0xffffffu, y24 = y & 0xffffffu;
    int sx24 = (int)(x << 8) >> 8, sy24 = (int)(y << 8) >> 8;
    asm("mul24.lo.s32 %0, %1, %2;" : "=r"(r) : "r"(sx24), "r"(sy24));
    o[4] = r;
    asm("mul24.hi.s32 %0, %1, %2;" : "=r"(r) : "r"(sx24), "r"(sy24));
    o[5] = r;
    asm("mul24.hi.u32 %0, %1, %2;" : "=r"(r) : "r"(x24), "r"(y24));
    o[6] = r;
    asm("mad24.lo.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x24), "r"(y24), "r"(x ^ y));
    o[7] = r;
    asm("mad.hi.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(p * 0x01010101u));
    o[8] = r;
    asm("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(r) : "r"(x), "r"(y), "r"(p * 0x9E3779B9u));
    o[9] = r;
    asm("lop3.b32 %0, %1, %2, %3, 0xE8;" : "=r"(r) : "r"(x), "r"(y), "r"(l * 0x85EBCA6Bu));
    o[10] = r;
    asm("cnot.b32 %0, %1;" : "=r"(r) : "r"(x & y & 0xfu));
    o[11] = r;
    asm("slct.b32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(x ^ y));
    o[12] = r;
    asm("slct.b32.f32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "f"(g[t]));
    o[13] = r;
    asm("{\n\t.reg .pred q;\n\t.reg .u32 v;\n\t"
        "testp.finite.f32 q, %1;\n\tselp.u32 %0, 1, 0, q;\n\t"
        "testp.infinite.f32 q, %1;\n\tselp.u32 v, 2, 0, q;\n\tor.b32 %0, %0, v;\n\t"
        "testp.number.f32 q, %1;\n\tselp.u32 v, 4, 0, q;\n\tor.b32 %0, %0, v;\n\t"
        "testp.notanumber.f32 q, %1;\n\tselp.u32 v, 8, 0, q;\n\tor.b32 %0, %0, v;\n\t"
        "testp.normal.f32 q, %1;\n\tselp.u32 v, 16, 0, q;\n\tor.b32 %0, %0, v;\n\t"
        "testp.subnormal.f32 q, %1;\n\tselp.u32 v, 32, 0, q;\n\tor.b32 %0, %0, v;\n\t}"
        : "=r"(r) : "f"(f[t]));
    o[14] = r;
    asm("bfind.s32 %0, %1;" : "=r"(r) : "r"(x));
    o[15] = r;
    asm volatile("red.add.u32 [%0], %1;" :: "l"(red_acc + (t & 3)), "r"(x & 0xffffu) : "memory");
    if (t % 5 == 4)
        asm volatile("exit;");
    after[t] = t * 3;
}
