"""One-instruction f32 and f64 kernels and operand sets that check the soft-float lowering
(gpu_layers/machine/softfloat.py) against the reference interpreter: scripts/check_softfloat.py
runs every form on many operands, tests/test_softfloat.py a sample.

    want, got, steps = compare(form, *operands(n, rng))       # f32 forms: uint32 operands
    want, got, steps = compare(form, *operands64(n, rng))     # f64 forms (FORMS64): uint64

An f32 form's results are the out word, then the word written over c (a 64-bit integer's high
half); an f64 form (one whose types include f64) reads 64-bit a, b, c and stores one 64-bit word
per thread: the result's bits zero-extended (a predicate pair as 1 | 2, an f32 or a narrow
integer in the low bits). Its conversions take their source from a's bits (the low 32 bits for
an f32 source, the low bits of a for an integer).
"""
from __future__ import annotations

import numpy as np

from gpu_layers.interp import launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.ptx.parser import parse_ptx

from .lower import lower

SPECIAL = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FFFFFFF, 0xFFC00001,
           0x7F800001, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000,
           0x3F800000, 0xBF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800001, 0x3FFFFFFF, 0x33800000,
           0x34000000, 0x00400000, 0x1F800000, 0x5F800000, 0x3F000000, 0x4B000000, 0xCB000001]

BINARY = [f"{op}{m}.f32" for op in ("add", "sub", "mul") for m in ("", ".rn", ".rz", ".rm", ".rp")]
DIV = [f"div.{m}.f32" for m in ("rn", "rz", "rm", "rp")]
UNARY = ["sqrt.rn.f32", "rcp.rn.f32"]
FMA = [f"fma.{m}.f32" for m in ("rn", "rz", "rm", "rp")] + ["mad.rn.f32"]
MINMAX = ["min.f32", "max.f32"]
SETP = [f"setp.{c}.f32" for c in ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu",
                                    "gtu", "geu", "num", "nan")] + ["setp.lt.and.f32", "setp.ge.or.f32"]
CVT_IN = [f"cvt.{m}.f32.{t}" for t in ("s32", "u32", "s64", "u64", "s16", "u8") for m in ("rn", "rz", "rm", "rp")]
CVT_OUT = [f"cvt.{m}.{t}.f32" for t in ("s32", "u32", "s64", "u64") for m in ("rni", "rzi", "rmi", "rpi")]
CVT_OUT += ["cvt.rni.s8.f32", "cvt.rzi.u8.f32", "cvt.rmi.s16.f32", "cvt.rpi.u16.f32"]  # in 32-bit registers
CVT_FF = [f"cvt.{m}.f32.f32" for m in ("rni", "rzi", "rmi", "rpi")] + ["cvt.sat.f32.f32"]
FORMS = BINARY + DIV + UNARY + FMA + MINMAX + SETP + CVT_IN + CVT_OUT + CVT_FF

_RND, _IRND = ("rn", "rz", "rm", "rp"), ("rni", "rzi", "rmi", "rpi")
_INTS = ("s32", "u32", "s64", "u64", "s16", "u16", "s8", "u8")
# binary64: the forms computed by the shared subroutine, and those expanded inline
ROUTINE64 = ([f"{op}{m}.f64" for op in ("add", "sub", "mul") for m in ("", ".rn", ".rz", ".rm", ".rp")]
             + [f"{op}.{m}.f64" for op in ("fma", "div", "rcp", "sqrt") for m in _RND])
INLINE64 = (["min.f64", "max.f64"] + [f.replace(".f32", ".f64") for f in SETP] + ["setp.neu.xor.f64"]
            + [f"cvt.{m}.f64.{t}" for t in _INTS for m in _RND]
            + [f"cvt.{m}.{t}.f64" for t in _INTS for m in _IRND] + ["cvt.rni.sat.s32.f64"]
            + [f"cvt.{m}.f64.f64" for m in _IRND] + ["cvt.sat.f64.f64"]
            + ["cvt.f64.f32"] + [f"cvt.{m}.f32.f64" for m in _RND])
FORMS64 = ROUTINE64 + INLINE64

# binary64 special values: zeros, infinities, NaNs (quiet and signalling, payloads, both signs),
# subnormal and normal limits, one, near integers and halves, f32's range limits
SPECIAL64 = [0x0000000000000000, 0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
             0x7FF8000000000000, 0xFFF8000000000001, 0x7FF0000000000001, 0xFFF4000000DEAD00,
             0x7FF7FFFFFFFFFFFF, 0x0000000000000001, 0x800FFFFFFFFFFFFF, 0x0010000000000000,
             0x8010000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, 0x3FF0000000000000,
             0xBFF0000000000000, 0x3FF0000000000001, 0x3FE0000000000000, 0xBFF8000000000000,
             0x4004000000000000, 0x3FDFFFFFFFFFFFFF, 0x4330000000000001, 0x43E0000000000000,
             0xC3E0000000000000, 0x41DFFFFFFFC00000, 0x47EFFFFFF0000000, 0x47F0000000000000,
             0x36A0000000000000, 0xB690000000000000, 0x380FFFFFF0000000, 0x3810000000000000]

LOAD = """\tld.param.u64 \t%rd1, [pa];
\tld.param.u64 \t%rd2, [pb];
\tld.param.u64 \t%rd3, [pc];
\tld.param.u64 \t%rd4, [out];
\tmov.u32 \t%r1, %ctaid.x;
\tmov.u32 \t%r3, %tid.x;
\tshl.b32 \t%r2, %r1, 6;
\tadd.s32 \t%r4, %r2, %r3;
\tmul.wide.u32 \t%rd5, %r4, 4;
\tadd.s64 \t%rd6, %rd1, %rd5;
\tadd.s64 \t%rd7, %rd2, %rd5;
\tadd.s64 \t%rd8, %rd3, %rd5;
\tadd.s64 \t%rd9, %rd4, %rd5;
\tld.global.f32 \t%f1, [%rd6];
\tld.global.f32 \t%f2, [%rd7];
\tld.global.f32 \t%f3, [%rd8];
"""
LOAD64 = LOAD.replace("%r4, 4;", "%r4, 8;").replace("ld.global.f32 \t%f", "ld.global.f64 \t%fd")


def is64(form: str) -> bool:
    """Whether `form` is a binary64 form (FORMS64: its operands and results are 64-bit words)."""
    return "f64" in form.split(".")


def _source64(st):
    """(code, register): a's bits as the source operand of type st, in an f64 kernel."""
    w = int(st[1:])
    if st == "f64":
        return "", "%fd1"
    code = "\tmov.b64 \t%rd20, %fd1;\n"
    if st == "f32":
        return code + "\tcvt.u32.u64 \t%r10, %rd20;\n\tmov.b32 \t%f1, %r10;\n", "%f1"
    if w == 64:
        return code, "%rd20"
    if w == 32:
        return code + "\tcvt.u32.u64 \t%r10, %rd20;\n", "%r10"
    return code + "\tcvt.u16.u64 \t%rs1, %rd20;\n", "%rs1"


def _result64(dt):
    """(register, code): a destination of type dt, stored zero-extended as out's 64-bit word (an
    8-bit integer in a 32-bit register, a 16-bit one in a 16-bit register)."""
    w = int(dt[1:])
    if dt == "f64":
        return "%fd4", "\tst.global.f64 \t[%rd9], %fd4;\n"
    if w == 64:
        return "%rd31", "\tst.global.u64 \t[%rd9], %rd31;\n"
    store = "\tst.global.u64 \t[%rd9], %rd30;\n"
    if dt == "f32":
        return "%f4", "\tmov.b32 \t%r11, %f4;\n\tcvt.u64.u32 \t%rd30, %r11;\n" + store
    if w == 16:
        return "%rs2", "\tcvt.u64.u16 \t%rd30, %rs2;\n" + store
    return "%r11", "\tcvt.u64.u32 \t%rd30, %r11;\n" + store


def kernel_for(form: str) -> str:
    wide = is64(form)
    f = "%fd" if wide else "%f"
    if form.startswith("setp"):
        extra = ""
        if any(f".{b}." in form for b in ("and", "or", "xor")):
            extra = "\tsetp.ne.s32 \t%p3, %r3, 5;\n"
            body = extra + f"\t{form} \t%p1|%p2, {f}1, {f}2, %p3;\n"
        else:
            body = f"\t{form} \t%p1, {f}1, {f}2;\n\tnot.pred \t%p2, %p1;\n"
        body += ("\tselp.u32 \t%r5, 1, 0, %p1;\n\tselp.u32 \t%r6, 2, 0, %p2;\n"
                 "\tor.b32 \t%r7, %r5, %r6;\n")
        body += ("\tcvt.u64.u32 \t%rd30, %r7;\n\tst.global.u64 \t[%rd9], %rd30;\n" if wide
                 else "\tst.global.u32 \t[%rd9], %r7;\n")
    elif wide and form.startswith("cvt"):
        dt, st = form.split(".")[-2:]
        code, src = _source64(st)
        dst, store = _result64(dt)
        body = f"{code}\t{form} \t{dst}, {src};\n{store}"
    elif form in CVT_IN:            # the integer: a's bits (64-bit: b's bits above them)
        st = form.split(".")[-1]
        w = int(st[1:])
        body = "\tmov.b32 \t%r10, %f1;\n\tmov.b32 \t%r11, %f2;\n"
        if w == 64:
            body += ("\tcvt.u64.u32 \t%rd20, %r10;\n\tcvt.u64.u32 \t%rd21, %r11;\n"
                     "\tshl.b64 \t%rd21, %rd21, 32;\n\tor.b64 \t%rd22, %rd20, %rd21;\n"
                     f"\t{form} \t%f4, %rd22;\n")
        elif w == 32:
            body += f"\t{form} \t%f4, %r10;\n"
        else:
            body += f"\tcvt.{st[0]}16.{st[0]}32 \t%rs1, %r10;\n\t{form} \t%f4, %rs1;\n"
        body += "\tst.global.f32 \t[%rd9], %f4;\n"
    elif form in CVT_OUT:           # 64-bit results: low word to out, high word over c
        if form.endswith("64.f32"):
            body = (f"\t{form} \t%rd20, %f1;\n\tcvt.u32.u64 \t%r10, %rd20;\n\tshr.u64 \t%rd21, %rd20, 32;\n"
                    "\tcvt.u32.u64 \t%r11, %rd21;\n\tst.global.u32 \t[%rd9], %r10;\n"
                    "\tst.global.u32 \t[%rd8], %r11;\n")
        else:
            body = f"\t{form} \t%r10, %f1;\n\tst.global.u32 \t[%rd9], %r10;\n"
    else:
        n = {"fma": 3, "mad": 3, "sqrt": 1, "rcp": 1, "cvt": 1}.get(form.split(".")[0], 2)
        ops = ", ".join(f"{f}{i}" for i in range(1, n + 1))
        t = "f64" if wide else "f32"
        body = f"\t{form} \t{f}4, {ops};\n\tst.global.{t} \t[%rd9], {f}4;\n"
    params = [("pa", "u64"), ("pb", "u64"), ("pc", "u64"), ("out", "u64")]
    return kernel_ptx((LOAD64 if wide else LOAD) + body + "\tret;\n", params=params,
                      decls="\t.reg .f64 \t%fd<8>;\n" if wide else "")


def operands(n: int, rng) -> tuple:
    """n triples: every pair of special values first, then random bit patterns and operands
    chosen to cancel (close exponents, opposite signs) and to land near the subnormal range."""
    sp = np.array(SPECIAL, np.uint32)
    ia, ib = np.meshgrid(np.arange(len(sp)), np.arange(len(sp)))
    a, b = sp[ia.ravel()], sp[ib.ravel()]
    c = sp[rng.integers(0, len(sp), a.size)]
    k = max(0, n - a.size)
    ra = rng.integers(0, 1 << 32, k, dtype=np.uint64).astype(np.uint32)
    rb = rng.integers(0, 1 << 32, k, dtype=np.uint64).astype(np.uint32)
    rc = rng.integers(0, 1 << 32, k, dtype=np.uint64).astype(np.uint32)
    third = k // 3
    # cancellation: c close to -(a * b) / a - b in magnitude
    with np.errstate(all="ignore"):
        fa = ra[:third].view(np.float32).astype(np.float64)
        fb = rb[:third].view(np.float32).astype(np.float64)
        near = (-(fa * fb) * (1 + rng.normal(0, 1e-6, third))).astype(np.float32).view(np.uint32)
    rc[:third] = near
    rb[third:2 * third] = (ra[third:2 * third] ^ 0x80000000) + rng.integers(-3, 4, third).astype(np.uint32)
    small = rng.integers(0, 0x0C000000, k - 2 * third, dtype=np.uint64).astype(np.uint32)
    ra[2 * third:] = small | (ra[2 * third:] & 0x80000000)
    # near integers and halves, up to 2^66 (conversions: ties, saturation)
    m = (k - 2 * third) // 2
    whole = np.floor(2.0 ** rng.uniform(-1, 66, m))
    near = (whole + rng.integers(0, 4, m) / 4) * rng.choice([-1.0, 1.0], m)
    ra[2 * third:2 * third + m] = near.astype(np.float32).view(np.uint32)
    A, B, C = (np.concatenate([x, y])[:max(n, a.size)] for x, y in ((a, ra), (b, rb), (c, rc)))
    return A, B, C


def operands64(n: int, rng) -> tuple:
    """n triples of binary64 bit patterns (uint64): every pair of SPECIAL64 values first, then in
    equal parts random bit patterns (a's low word sometimes an f32 special value), cancelling
    operands (b close to -a, c close to -(a * b)), operands near and in the subnormal range, near
    integers and halves up to 2^66, values around f32's overflow and subnormal limits (half of
    them exact ties where an f32 result rounds), and integers of every bit length (ties at 54 to
    64 bits, half of them negative)."""
    sp = np.array(SPECIAL64, np.uint64)
    ia, ib = np.meshgrid(np.arange(len(sp)), np.arange(len(sp)))
    a, b = sp[ia.ravel()], sp[ib.ravel()]
    c = sp[rng.integers(0, len(sp), a.size)]
    k = max(0, n - a.size)

    ra, rb, rc = (rng.integers(0, 1 << 64, k, dtype=np.uint64) for _ in range(3))
    S, FRAC = np.uint64(1 << 63), np.uint64((1 << 52) - 1)
    part = [k * i // 6 for i in range(7)]
    sl = [slice(part[i], part[i + 1]) for i in range(6)]
    m = [x.stop - x.start for x in sl]
    # 0: random patterns; a's low word an f32 special value in half of them
    low = np.array(SPECIAL, np.uint64)[rng.integers(0, len(SPECIAL), m[0])]
    keep = rng.integers(0, 2, m[0]).astype(bool)
    ra[sl[0]] = np.where(keep, ra[sl[0]], (ra[sl[0]] & ~np.uint64(0xFFFFFFFF)) | low)
    # 1: cancellation
    rb[sl[1]] = (ra[sl[1]] ^ S) + rng.integers(-3, 4, m[1]).astype(np.uint64)
    with np.errstate(all="ignore"):
        fa, fb = ra[sl[1]].view(np.float64), rb[sl[1]].view(np.float64)
        rc[sl[1]] = (-(fa * fb) * (1 + rng.normal(0, 1e-13, m[1]))).view(np.uint64)
    # 2: near and in the subnormal range
    ra[sl[2]] = (ra[sl[2]] & (S | FRAC)) | (rng.integers(0, 0xC0, m[2]).astype(np.uint64) << np.uint64(52))
    # 3: near integers and halves
    whole = np.floor(2.0 ** rng.uniform(-1, 66, m[3]))
    ra[sl[3]] = ((whole + rng.integers(0, 4, m[3]) / 4) * rng.choice([-1.0, 1.0], m[3])).view(np.uint64)
    # 4: f32's limits: exponents near 2^128 and 2^-126..2^-150, half of them exact ties
    e = np.where(rng.integers(0, 2, m[4]).astype(bool), rng.integers(1023 + 120, 1023 + 130, m[4]),
                 rng.integers(1023 - 152, 1023 - 123, m[4]))
    pos = (28 + np.maximum(0, (1023 - 126) - e)).astype(np.uint64)         # f32's rounding bit
    f = ra[sl[4]] & FRAC
    tie = ((f >> (pos + np.uint64(1))) << (pos + np.uint64(1))) | (np.uint64(1) << pos)
    f = np.where(rng.integers(0, 2, m[4]).astype(bool) & (pos < 52), tie & FRAC, f)
    ra[sl[4]] = (ra[sl[4]] & S) | (e.astype(np.uint64) << np.uint64(52)) | f
    # 5: integers of every bit length, ties at 54..64 bits, half negated
    v = ra[sl[5]] >> rng.integers(0, 64, m[5]).astype(np.uint64)
    s = rng.integers(1, 12, m[5]).astype(np.uint64)
    t = (rng.integers(1 << 52, 1 << 53, m[5]).astype(np.uint64) << s) | (np.uint64(1) << (s - np.uint64(1)))
    v = np.where(rng.integers(0, 3, m[5]) == 0, t, v)
    ra[sl[5]] = np.where(rng.integers(0, 2, m[5]).astype(bool), ~v + np.uint64(1), v)
    A, B, C = (np.concatenate([x, y])[:max(n, a.size)] for x, y in ((a, ra), (b, rb), (c, rc)))
    return A, B, C


def normal_operands(n: int, rng, f64: bool = False) -> tuple:
    """n triples of normal numbers (the fast entries' domain, gpu_layers/machine/fast_paths.py),
    in equal parts: random exponents; b near -a (cancellation, down to exact zeros) and c near
    -(a * b); exponents whose sums reach the overflow and subnormal limits of a product; and
    fractions with a few low bits (exact ties), a small exponent gap between a and b; one operand
    in 16 a signed zero (the fast fma's and add's zero terms)."""
    w, mb, bias = (64, 52, 1023) if f64 else (32, 23, 127)
    dt = np.uint64 if f64 else np.uint32
    top = 2 * bias                                  # the largest normal biased exponent

    def pack(sign, e, f):
        return ((sign.astype(np.uint64) << np.uint64(w - 1)) | (e.astype(np.uint64) << np.uint64(mb))
                | (f & np.uint64((1 << mb) - 1))).astype(dt)

    def frac(k):
        return rng.integers(0, 1 << 62, k, dtype=np.uint64) >> np.uint64(62 - mb)

    def sign(k):
        return rng.integers(0, 2, k)

    q = [n * i // 4 for i in range(5)]
    m = [q[i + 1] - q[i] for i in range(4)]
    E = [rng.integers(1, top + 1, n), rng.integers(1, top + 1, n), rng.integers(1, top + 1, n)]
    F_ = [frac(n), frac(n), frac(n)]
    S_ = [sign(n), sign(n), sign(n)]
    # 1: b's exponent within 2 of a's, c's near a + b - bias (cancellations)
    s1 = slice(q[1], q[2])
    E[1][s1] = np.clip(E[0][s1] + rng.integers(-2, 3, m[1]), 1, top)
    E[2][s1] = np.clip(E[0][s1] + E[1][s1] - bias + rng.integers(-1, 2, m[1]), 1, top)
    S_[1][s1] = 1 - S_[0][s1]
    near = rng.integers(0, 2, m[1]).astype(bool)
    F_[1][s1] = np.where(near, F_[0][s1] ^ (rng.integers(0, 8, m[1]).astype(np.uint64)), F_[1][s1])
    # 2: a's and b's exponents summing near the product's limits (subnormal or overflowing)
    s2 = slice(q[2], q[3])
    lim = np.where(rng.integers(0, 2, m[2]).astype(bool), bias + 1, 3 * bias + 1)
    E[0][s2] = rng.integers(1, top + 1, m[2])
    E[1][s2] = np.clip(lim - E[0][s2] + rng.integers(-2, 3, m[2]), 1, top)
    # 3: few low fraction bits (ties), a small exponent gap
    s3 = slice(q[3], q[4])
    for i in range(3):
        F_[i][s3] &= ~np.uint64((1 << int(rng.integers(1, mb))) - 1)
    E[1][s3] = np.clip(E[0][s3] + rng.integers(-mb - 3, mb + 4, m[3]), 1, top)
    out = [pack(S_[i], E[i], F_[i]) for i in range(3)]
    for x in out:                                   # and signed zeros, one operand in 16
        zero = rng.integers(0, 16, n) == 0
        x[zero] &= dt(1 << (w - 1))
    return tuple(out)


def _run(ptx_kernel, A, B, C):
    n = A.size
    block = 64          # = 1 << 6 in LOAD
    grid = (n + block - 1) // block
    pad = grid * block - n
    args = [np.concatenate([x, np.zeros(pad, A.dtype)]) for x in (A, B, C)]
    out = np.zeros(grid * block, A.dtype)
    res = launch(ptx_kernel, grid, block, args + [out], step_budget=10 ** 9)
    if A.dtype == np.uint64:
        return res.buffers[3].view(np.uint64)[:n], res.lane_issues
    return np.concatenate([res.buffers[3].view(np.uint32)[:n], res.buffers[2].view(np.uint32)[:n]]), \
        res.lane_issues


def compare(form: str, A, B, C, cvt_routines: bool = False, inline_floats: bool = False,
            guarded: bool = False):
    """(the interpreter's result bits for `form`, those of its lowering, the machine instructions
    one thread executes for the form: every thread runs the same path, in full groups). A, B, C:
    uint32 for an f32 form (`operands`), uint64 for an f64 form (`operands64`). cvt_routines: a
    conversion through gpu_layers.machine.cvt_routines' routine (lower(cvt_routines=True));
    inline_floats: lower(inline_floats=True, straight_steps=True), the core's first lowering;
    guarded: an arithmetic form runs in three lanes of four only (a forward branch skips it and
    its store where tid % 4 == 0: the site is in a divergent region)."""
    assert A.dtype == (np.uint64 if is64(form) else np.uint32), (form, A.dtype)
    text = kernel_for(form)
    if guarded:
        op = next(line for line in text.splitlines() if line.startswith(f"\t{form} "))
        text = text.replace(op, "\tand.b32 \t%r20, %r3, 3;\n\tsetp.eq.u32 \t%p9, %r20, 0;\n"
                            "\t@%p9 bra \t$L_skip;\n" + op).replace("\tret;", "$L_skip:\n\tret;")
    k = parse_ptx(text).kernel()
    want, base = _run(k, A, B, C)
    opts = {"inline_floats": True, "straight_steps": True} if inline_floats else {}
    got, steps = _run(lower(k, cvt_routines=cvt_routines, **opts), A, B, C)
    return want, got, (steps - base) * 4 / A.size + 1
