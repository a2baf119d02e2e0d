"""One-instruction f32 kernels and operand sets that check the soft-float lowering
(gpu_layers/machine/softfloat.py) against the reference interpreter: scripts/check_softfloat.py
runs every form on many operands, tests/test_softfloat.py a sample.

    want, got, steps = compare(form, *operands(n, rng))   # result bits, original vs lowered
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
CVT_FF = [f"cvt.{m}.f32.f32" for m in ("rni", "rzi", "rmi", "rpi")] + ["cvt.sat.f32.f32"]
FORMS = BINARY + DIV + UNARY + FMA + MINMAX + SETP + CVT_IN + CVT_OUT + CVT_FF

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


def kernel_for(form: str) -> str:
    if form.startswith("setp"):
        extra = ""
        if ".and." in form or ".or." in form:
            extra = "\tsetp.ne.s32 \t%p3, %r3, 5;\n"
            body = extra + f"\t{form} \t%p1|%p2, %f1, %f2, %p3;\n"
        else:
            body = f"\t{form} \t%p1, %f1, %f2;\n\tnot.pred \t%p2, %p1;\n"
        body += ("\tselp.u32 \t%r5, 1, 0, %p1;\n\tselp.u32 \t%r6, 2, 0, %p2;\n"
                 "\tor.b32 \t%r7, %r5, %r6;\n\tst.global.u32 \t[%rd9], %r7;\n")
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
        ops = {"fma": "%f1, %f2, %f3", "mad": "%f1, %f2, %f3", "sqrt": "%f1", "rcp": "%f1",
               "cvt": "%f1"}.get(form.split(".")[0], "%f1, %f2")
        body = f"\t{form} \t%f4, {ops};\n\tst.global.f32 \t[%rd9], %f4;\n"
    params = [("pa", "u64"), ("pb", "u64"), ("pc", "u64"), ("out", "u64")]
    return kernel_ptx(LOAD + body + "\tret;\n", params=params)


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


def _run(ptx_kernel, A, B, C):
    n = A.size
    block = 64          # = 1 << 6 in LOAD
    grid = (n + block - 1) // block
    pad = grid * block - n
    args = [np.concatenate([x, np.zeros(pad, np.uint32)]).view(np.float32) for x in (A, B, C)]
    out = np.zeros(grid * block, np.uint32)
    res = launch(ptx_kernel, grid, block, args + [out], step_budget=10 ** 9)
    return np.concatenate([res.buffers[3].view(np.uint32)[:n], res.buffers[2].view(np.uint32)[:n]]), \
        res.lane_issues


def compare(form: str, A, B, C):
    """(the interpreter's result bits for `form`, those of its lowering, the machine instructions
    one thread executes for the form: every thread runs the same path, in full groups)."""
    k = parse_ptx(kernel_for(form)).kernel()
    want, base = _run(k, A, B, C)
    got, steps = _run(lower(k), A, B, C)
    return want, got, (steps - base) * 4 / A.size + 1
