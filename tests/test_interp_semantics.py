"""The tricky semantics of the reference interpreter, one by one."""
import math
import random
import struct
from fractions import Fraction

import numpy as np
import pytest

from gpu_layers.errors import ExecutionError, UninitializedRead
from gpu_layers.interp import fp
from gpu_layers.interp.decode import bfe_fn, bfi_fn, bfind_fn, prmt, shf_fn
from gpu_layers.interp.snippets import kernel_ptx, run_ptx

OUT = """\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r100, %tid.x;
\tmul.wide.u32 \t%rd2, %r100, 4;
\tadd.s64 \t%rd9, %rd1, %rd2;
"""


def run_body(body, n=32, dtype=np.uint32, **kw):
    out = np.zeros(n, dtype)
    res = run_ptx(kernel_ptx(OUT + body + "\tret;\n"), 1, n, [out], **kw)
    return res.buffers[0], res


def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def value(b: int) -> float:
    """binary32 bits -> its exact value (struct: independent of the module under test)."""
    return struct.unpack("<f", struct.pack("<I", b))[0]


def np_bits(v) -> int:
    """A numpy float32 -> its bits; NaN as the GPU's canonical NaN 0x7FFFFFFF."""
    v = np.float32(v)
    return 0x7FFFFFFF if np.isnan(v) else int(v.view(np.uint32))


# ------------------------------------------------------------------------------------ float


def f32_of_fraction(q: Fraction) -> int:
    """Independent reference: round an exact rational to binary32 bits, nearest even."""
    if q == 0:
        return 0
    sign = 0x80000000 if q < 0 else 0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    e = max(e, -126)
    quantum = Fraction(2) ** (e - 23)
    m = q / quantum
    n = m.numerator // m.denominator
    rem = m - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n & 1):
        n += 1
    if n == 1 << 24:
        n >>= 1
        e += 1
    if e > 127:
        return sign | 0x7F800000
    if n < 1 << 23:
        return sign | n
    return sign | ((e + 127) << 23) | (n - (1 << 23))


def exact(b):
    return Fraction(value(b))


def _rand_f32(rng):
    k = rng.random()
    if k < 0.1:
        return rng.getrandbits(23) | (rng.choice([0, 1]) << 31)      # subnormal
    e = rng.randint(60, 190)
    return (rng.getrandbits(1) << 31) | (e << 23) | rng.getrandbits(23)


def test_fma_is_exactly_rounded_once():
    rng = random.Random(1)
    cases = [(0x3F800001, 0x3F800001, bits(-(1 + 2**-22)))]   # fused: 2^-46, unfused: 0
    for _ in range(3000):
        a, b = _rand_f32(rng), _rand_f32(rng)
        if rng.random() < 0.5:
            with np.errstate(all="ignore"):            # near-cancellation
                c = np_bits(-(np.float32(value(a)) * np.float32(value(b))))
            c ^= rng.getrandbits(3)
        else:
            c = _rand_f32(rng)
        cases.append((a, b, c))
    for a, b, c in cases:
        want = f32_of_fraction(exact(a) * exact(b) + exact(c))
        got = fp.fma(a, b, c)
        if want == 0 and got in (0, 0x80000000):
            continue
        assert got == want, (hex(a), hex(b), hex(c), hex(got), hex(want))
    assert fp.fma(*cases[0]) == 0x28800000
    assert fp.add(fp.mul(cases[0][0], cases[0][1]), cases[0][2]) == 0


def test_basic_ops_match_ieee_float32():
    rng = random.Random(2)
    with np.errstate(all="ignore"):
        for _ in range(2000):
            a, b = _rand_f32(rng), _rand_f32(rng)
            x, y = np.uint32(a).view(np.float32), np.uint32(b).view(np.float32)
            for f, ref in ((fp.add, x + y), (fp.sub, x - y), (fp.mul, x * y), (fp.div, x / y)):
                r = int(np.float32(ref).view(np.uint32))
                assert f(a, b) == r, (f.__name__, hex(a), hex(b))
            s = np.sqrt(x)
            want = 0x7FFFFFFF if np.isnan(s) else int(s.view(np.uint32))
            assert fp.sqrt(a) == want


def test_float_special_values():
    inf, ninf, nan = 0x7F800000, 0xFF800000, 0x7FC00000
    assert fp.add(inf, ninf) == 0x7FFFFFFF
    assert fp.div(bits(1.0), 0) == inf and fp.div(bits(-1.0), 0) == ninf
    assert fp.div(0, 0) == 0x7FFFFFFF
    assert fp.div(bits(1.0), 0x80000000) == ninf
    assert fp.sqrt(0x80000000) == 0x80000000 and fp.sqrt(bits(-1.0)) == 0x7FFFFFFF
    assert fp.mul(bits(3e38), bits(10.0)) == inf
    assert fp.fmin(nan, bits(2.0)) == bits(2.0) and fp.fmax(bits(2.0), nan) == bits(2.0)
    assert fp.fmin(nan, nan) == 0x7FFFFFFF
    assert fp.fmin(0, 0x80000000) == 0x80000000 and fp.fmax(0x80000000, 0) == 0
    assert fp.rcp(bits(4.0)) == bits(0.25)


TESTP_VALUES = {          # bits: (finite, infinite, number, notanumber, normal, subnormal)
    0x00000000: (1, 0, 1, 0, 1, 0),     # +0: "positive and negative zero are considered normal"
    0x80000000: (1, 0, 1, 0, 1, 0),     # -0
    0x00000001: (1, 0, 1, 0, 0, 1),     # smallest subnormal
    0x807FFFFF: (1, 0, 1, 0, 0, 1),     # largest negative subnormal
    0x00800000: (1, 0, 1, 0, 1, 0),     # smallest normal
    0x3F800000: (1, 0, 1, 0, 1, 0),     # 1.0
    0xFF7FFFFF: (1, 0, 1, 0, 1, 0),     # -FLT_MAX
    0x7F800000: (0, 1, 1, 0, 0, 0),     # +inf
    0xFF800000: (0, 1, 1, 0, 0, 0),     # -inf
    0x7FC00000: (0, 0, 0, 1, 0, 0),     # quiet NaN
    0x7F800001: (0, 0, 0, 1, 0, 0),     # signalling NaN payload
    0xFFFFFFFF: (0, 0, 0, 1, 0, 0),     # negative NaN
}


def test_testp_classes_follow_the_ptx_isa():
    # PTX ISA, testp: "As a special case, positive and negative zero are considered normal
    # numbers." The expectations above are written out by hand from that text and IEEE 754.
    modes = ("finite", "infinite", "number", "notanumber", "normal", "subnormal")
    body = """\tld.param.u64 \t%rd3, [inp];
\tcvta.to.global.u64 \t%rd3, %rd3;
\tadd.s64 \t%rd4, %rd3, %rd2;
\tld.global.f32 \t%f1, [%rd4];
\tmov.u32 \t%r1, 0;
"""
    for i, m in enumerate(modes):
        body += (f"\ttestp.{m}.f32 \t%p1, %f1;\n\tselp.u32 \t%r2, {1 << i}, 0, %p1;\n"
                 "\tor.b32 \t%r1, %r1, %r2;\n")
    body += "\tst.global.u32 \t[%rd9], %r1;\n\tret;\n"
    vals = list(TESTP_VALUES)
    inp = np.array(vals, np.uint32).view(np.float32)
    out = np.zeros(len(vals), np.uint32)
    res = run_ptx(kernel_ptx(OUT + body, params=(("out", "u64"), ("inp", "u64"))), 1, len(vals), [out, inp])
    for b, got in zip(vals, res.buffers[0]):
        want = sum(bit << i for i, bit in enumerate(TESTP_VALUES[b]))
        assert int(got) == want, f"{b:#010x}: got {int(got):06b}, want {want:06b} (bit i = {modes})"


def test_float_ops_in_a_kernel():
    body = """\tcvt.rn.f32.u32 \t%f1, %r100;
\tmov.f32 \t%f2, 0f3DCCCCCD;
\tfma.rn.f32 \t%f3, %f1, %f2, %f2;
\tdiv.rn.f32 \t%f4, %f3, %f2;
\tsqrt.rn.f32 \t%f5, %f4;
\tmax.f32 \t%f6, %f5, 0f40000000;
\tneg.f32 \t%f7, %f6;
\tabs.f32 \t%f8, %f7;
\tsetp.ltu.f32 \t%p1, %f8, 0f40400000;
\tselp.f32 \t%f9, %f8, 0f7FC00000, %p1;
\tst.global.f32 \t[%rd9], %f9;
"""
    out, _ = run_body(body, dtype=np.float32)
    o = out.view(np.uint32)
    tenth = 0x3DCCCCCD
    for t in range(32):
        # independent reference: the fma rounded once from the exact rational, the rest in
        # numpy float32 (each operation correctly rounded)
        f3 = np.float32(value(f32_of_fraction(t * exact(tenth) + exact(tenth))))
        f6 = max(np.sqrt(np.float32(f3 / np.float32(value(tenth)))), np.float32(2.0))
        want = np_bits(f6) if f6 < 3.0 else 0x7FC00000
        assert o[t] == want


# ------------------------------------------------------------------------------ conversions


@pytest.mark.parametrize("x, mode, lo, hi, want", [
    (3e9, "rzi", -2**31, 2**31 - 1, 2**31 - 1),
    (-3e9, "rzi", -2**31, 2**31 - 1, -2**31),
    (float("nan"), "rzi", -2**31, 2**31 - 1, 0),
    (float("inf"), "rni", 0, 2**32 - 1, 2**32 - 1),
    (-1.5, "rzi", 0, 2**32 - 1, 0),
    (2.5, "rni", -2**31, 2**31 - 1, 2),
    (3.5, "rni", -2**31, 2**31 - 1, 4),
    (-2.5, "rni", -2**31, 2**31 - 1, -2),
    (-2.5, "rmi", -2**31, 2**31 - 1, -3),
    (-2.5, "rpi", -2**31, 2**31 - 1, -2),
    (-2.5, "rzi", -2**31, 2**31 - 1, -2),
    (300.7, "rzi", -128, 127, 127),
])
def test_float_to_int_rounds_and_saturates(x, mode, lo, hi, want):
    xb = 0x7FC00000 if x != x else bits(x)
    assert fp.f32_to_int(xb, mode, lo, hi) == want


@pytest.mark.parametrize("v, mode, want", [
    (16777217, "rn", 16777216.0), (16777219, "rn", 16777220.0), (16777217, "rz", 16777216.0),
    (16777217, "rp", 16777218.0), (-16777217, "rm", -16777218.0), (-16777217, "rz", -16777216.0),
    (2**64 - 1, "rn", 2.0**64), (2**64 - 1, "rz", 18446742974197923840.0), (0, "rn", 0.0),
    (-(2**31), "rn", -2.0**31),
])
def test_int_to_float_rounding_modes(v, mode, want):
    assert fp.int_to_f32(v, mode) == bits(want)


def test_cvt_in_a_kernel_with_saturation_and_widths():
    body = """\tsub.s32 \t%r1, %r100, 16;
\tmul.lo.s32 \t%r2, %r1, 20;
\tcvt.sat.s8.s32 \t%r3, %r2;
\tcvt.u16.u32 \t%rs1, %r2;
\tcvt.s32.s16 \t%r4, %rs1;
\tcvt.rn.f32.s32 \t%f1, %r2;
\tmul.rn.f32 \t%f2, %f1, 0f3E800000;
\tcvt.rni.s32.f32 \t%r5, %f2;
\tcvt.rmi.f32.f32 \t%f3, %f2;
\tcvt.rzi.u32.f32 \t%r6, %f3;
\tadd.s32 \t%r7, %r3, %r4;
\tadd.s32 \t%r7, %r7, %r5;
\tmad.lo.s32 \t%r7, %r6, 1000, %r7;
\tst.global.u32 \t[%rd9], %r7;
"""
    out, _ = run_body(body, dtype=np.int32)
    for t in range(32):
        v = (t - 16) * 20
        sat = max(-128, min(127, v))
        s16 = ((v & 0xFFFF) ^ 0x8000) - 0x8000
        q = v / 4
        rni = round(q)
        rmi = math.floor(q)
        u = max(rmi, 0)
        assert out[t] == np.int32(sat + s16 + rni + 1000 * u)


# -------------------------------------------------------------------------------- integers


def test_integer_division_and_remainder_truncate():
    body = """\tsub.s32 \t%r1, %r100, 16;
\tdiv.s32 \t%r2, %r1, -3;
\trem.s32 \t%r3, %r1, -3;
\tdiv.u32 \t%r4, %r100, 7;
\trem.u32 \t%r5, %r100, 7;
\tmad.lo.s32 \t%r6, %r2, 1000, %r3;
\tmad.lo.s32 \t%r6, %r4, 100000, %r6;
\tmad.lo.s32 \t%r6, %r5, 10000000, %r6;
\tst.global.u32 \t[%rd9], %r6;
"""
    out, _ = run_body(body, dtype=np.int32)
    for t in range(32):
        a = t - 16
        q = int(a / -3)
        r = a - q * -3
        assert out[t] == q * 1000 + r + (t // 7) * 100000 + (t % 7) * 10000000


def test_division_by_zero_is_undefined_and_an_error_once_stored():
    # the quotient is poison (PTX: unspecified); discarding it is fine, storing it is an error
    out, _ = run_body("\tdiv.u32 \t%r1, 5, %r100;\n\tst.global.u32 \t[%rd9], 1;\n")
    assert list(out) == [1] * 32
    with pytest.raises(UninitializedRead, match="division by zero") as ei:
        run_body("\tdiv.u32 \t%r1, 5, %r100;\n\tst.global.u32 \t[%rd9], %r1;\n")
    msg = str(ei.value)
    assert "%r1" in msg and "thread (0,0,0)" in msg and "line" in msg


def test_shifts_clamp_and_wide_multiplies():
    body = """\tmov.u32 \t%r1, -8;
\tshl.b32 \t%r2, %r1, %r100;
\tshr.s32 \t%r3, %r1, 40;
\tshr.u32 \t%r4, %r1, 33;
\tmul.hi.s32 \t%r5, %r1, 1073741824;
\tmul.wide.s32 \t%rd3, %r1, %r1;
\tcvt.u32.u64 \t%r6, %rd3;
\tadd.s32 \t%r7, %r3, %r4;
\tadd.s32 \t%r7, %r7, %r5;
\tadd.s32 \t%r7, %r7, %r6;
\txor.b32 \t%r7, %r7, %r2;
\tst.global.u32 \t[%rd9], %r7;
"""
    out, _ = run_body(body)
    for t in range(32):
        shl = ((-8) << t) & 0xFFFFFFFF
        s = (-1 + 0 + ((-8 * 2**30) >> 32) + 64) & 0xFFFFFFFF
        assert out[t] == s ^ shl


def test_bit_intrinsics_tables():
    bfind_u = bfind_fn("u32", False)
    bfind_s = bfind_fn("s32", False)
    bfind_sa = bfind_fn("u32", True)
    assert bfind_u(0) == 0xFFFFFFFF and bfind_u(1) == 0 and bfind_u(0x80000000) == 31
    assert bfind_s(0xFFFFFFFF) == 0xFFFFFFFF and bfind_s(0xFFFFFFFE) == 0 and bfind_s(0x7FFFFFFF) == 30
    assert bfind_sa(1) == 31 and bfind_sa(0x80000000) == 0 and bfind_sa(0) == 0xFFFFFFFF
    a, b = 0x33221100, 0x77665544
    assert prmt(a, b, 0x3210) == a and prmt(a, b, 0x7654) == b
    assert prmt(a, b, 0x0123) == 0x00112233
    assert prmt(0x00007F80, 0, 0x9898) == 0x00FF00FF     # bit 3 of a selector: sign-replicate
    assert prmt(0x00007F80, 0, 0x1010) == 0x7F807F80
    shl, shr = shf_fn("l", "wrap"), shf_fn("r", "wrap")
    shlc, shrc = shf_fn("l", "clamp"), shf_fn("r", "clamp")
    x = 0x12345678
    assert shl(x, x, 8) == 0x34567812 and shr(x, x, 8) == 0x78123456      # rotations
    assert shl(0xAAAAAAAA, 0x11111111, 36) == shl(0xAAAAAAAA, 0x11111111, 4)
    assert shlc(0xAAAAAAAA, 0x11111111, 40) == 0xAAAAAAAA and shrc(0xAAAAAAAA, 0x11111111, 40) == 0x11111111
    assert shl(0xF0000000, 0x0000000F, 4) == 0x000000FF
    bfe_u, bfe_s = bfe_fn("u32"), bfe_fn("s32")
    assert bfe_u(0xABCD1234, 8, 8) == 0x12 and bfe_s(0xABCD1234, 24, 8) == 0xFFFFFFAB
    assert bfe_s(0xABCD1234, 0, 0) == 0 and bfe_u(0xABCD1234, 28, 8) == 0xA
    assert bfe_s(0x80000000, 28, 8) == 0xFFFFFFF8
    bfi = bfi_fn("b32")
    assert bfi(0xF, 0x12345678, 8, 4) == 0x12345F78 and bfi(0xFF, 0, 28, 8) == 0xF0000000
    assert bfi(0xFF, 0x1234, 0, 0) == 0x1234


# ------------------------------------------------------------------------------ warp-level


def _shfl_ref(mode, lane, b, c, vals):
    seg = (c >> 8) & 31
    cval = c & 31
    maxl = (lane & seg) | (cval & ~seg & 31)
    minl = lane & seg
    j = {"up": lane - b, "down": lane + b, "bfly": lane ^ b, "idx": minl | (b & ~seg & 31)}[mode]
    ok = j >= maxl if mode == "up" else j <= maxl
    return (vals[j] if ok else vals[lane]), int(ok)


@pytest.mark.parametrize("mode, b, c", [
    ("bfly", 9, 0x181F), ("bfly", 16, 0x1F), ("up", 1, 0x1800), ("up", 3, 0), ("down", 1, 0x181F),
    ("down", 5, 0x1F), ("idx", 3, 0x181F), ("idx", 35, 0x1F), ("bfly", 2, 0x1C03),
])
def test_shfl_clamp_and_segments(mode, b, c):
    body = f"""\tmul.lo.s32 \t%r1, %r100, 10;
\tshfl.sync.{mode}.b32 \t%r2|%p1, %r1, {b}, {c}, -1;
\tselp.u32 \t%r3, 1, 0, %p1;
\tmad.lo.s32 \t%r4, %r2, 2, %r3;
\tst.global.u32 \t[%rd9], %r4;
"""
    out, _ = run_body(body)
    vals = [10 * t for t in range(32)]
    for t in range(32):
        v, p = _shfl_ref(mode, t, b, c, vals)
        assert out[t] == 2 * v + p, t
    if (mode, b, c) == ("bfly", 9, 0x181F):
        assert out[0] == 0 and out[8] == 2 * 10 + 1 and out[9] == 1


def test_vote_and_ballot():
    body = """\tand.b32 \t%r1, %r100, 3;
\tsetp.eq.u32 \t%p1, %r1, 0;
\tvote.sync.ballot.b32 \t%r2, %p1, -1;
\tvote.sync.any.pred \t%p2, %p1, -1;
\tvote.sync.all.pred \t%p3, %p1, -1;
\tvote.sync.uni.pred \t%p4, %p2, -1;
\tselp.u32 \t%r3, 1, 0, %p2;
\tselp.u32 \t%r4, 2, 0, %p3;
\tselp.u32 \t%r5, 4, 0, %p4;
\tor.b32 \t%r3, %r3, %r4;
\tor.b32 \t%r3, %r3, %r5;
\txor.b32 \t%r2, %r2, %r3;
\tactivemask.b32 \t%r6;
\txor.b32 \t%r2, %r2, %r6;
\tst.global.u32 \t[%rd9], %r2;
"""
    out, _ = run_body(body)
    assert all(out == (0x11111111 ^ 5 ^ 0xFFFFFFFF))


def test_shfl_waits_for_named_threads_until_they_exit():
    # lanes 0-15 exit; the full-mask shuffle of lanes 16-31 waits for them, then runs without them
    body = """\tsetp.lt.u32 \t%p1, %r100, 16;
\t@%p1 bra \tL_skip;
\tshfl.sync.bfly.b32 \t%r2, %r100, 1, 31, -1;
\tst.global.u32 \t[%rd9], %r2;
L_skip:
"""
    out, _ = run_body(body)
    assert list(out[:16]) == [0] * 16 and list(out[16:]) == [t ^ 1 for t in range(16, 32)]
    # reading the value of a lane that has exited is undefined: an error naming the lane
    with pytest.raises(ExecutionError, match="reads lane 1, which has exited"):
        run_body(body.replace("bfly.b32 \t%r2, %r100, 1,", "bfly.b32 \t%r2, %r100, 17,"))


def test_executing_thread_outside_its_own_membermask_is_an_error():
    body = "\tshfl.sync.bfly.b32 \t%r2, %r100, 1, 31, 65535;\n"
    with pytest.raises(ExecutionError, match="not in its membermask"):
        run_body(body)


def test_shfl_with_partial_membermask_in_divergent_code_is_fine():
    body = """\tsetp.lt.u32 \t%p1, %r100, 16;
\tmov.u32 \t%r2, 7;
\t@%p1 bra \tL_skip;
\tshfl.sync.bfly.b32 \t%r2, %r100, 1, 31, -65536;
L_skip:
\tst.global.u32 \t[%rd9], %r2;
"""
    out, _ = run_body(body)
    assert list(out[:16]) == [7] * 16 and list(out[16:]) == [t ^ 1 for t in range(16, 32)]


# ---------------------------------------------------------------------- control and memory


def test_if_else_runs_both_sides_in_order_and_rejoins():
    body = """\tand.b32 \t%r1, %r100, 1;
\tsetp.eq.u32 \t%p1, %r1, 0;
\t@%p1 bra \tL_even;
\tmov.u32 \t%r3, 100;
\tbra.uni \tL_join;
L_even:
\tmov.u32 \t%r3, 200;
L_join:
\tst.global.u32 \t[%rd9], %r3;
"""
    out, res = run_body(body, trace=True)
    assert list(out) == [200 if t % 2 == 0 else 100 for t in range(32)]
    full = 0xFFFFFFFF
    odd = 0xAAAAAAAA
    even = 0x55555555
    pcs = [(pc, m) for _, _, pc, m in res.trace]
    # 5 setup + and, setp, bra (pc 0..7), odd side 8, 9, even side 10, join 11, ret 12
    assert pcs == [(i, full) for i in range(8)] + [(8, odd), (9, odd), (10, even), (11, full), (12, full)]
    assert res.steps == 13


def test_divergent_loop_runs_ahead_then_reconverges_at_syncwarp():
    # thread t loops t times. By the cursor rule each thread leaving the loop runs ahead alone
    # (its activemask is itself); __syncwarp (bar.warp.sync) makes the warp whole again.
    body = """\tmov.u32 \t%r1, 0;
\tmov.u32 \t%r2, 0;
L_loop:
\tsetp.ge.u32 \t%p1, %r1, %r100;
\t@%p1 bra \tL_done;
\tadd.s32 \t%r2, %r2, %r1;
\tadd.s32 \t%r1, %r1, 1;
\tbra.uni \tL_loop;
L_done:
\tactivemask.b32 \t%r3;
\tbar.warp.sync \t-1;
\tactivemask.b32 \t%r4;
\tst.global.u32 \t[%rd9], %r3;
\tst.global.u32 \t[%rd9+128], %r4;
\tst.global.u32 \t[%rd9+256], %r2;
"""
    res = run_ptx(kernel_ptx(OUT + body + "\tret;\n"), 1, 32, [np.zeros(96, np.uint32)], trace=True)
    out = res.buffers[0]
    assert list(out[:32]) == [1 << t for t in range(32)]
    assert list(out[32:64]) == [0xFFFFFFFF] * 32
    assert list(out[64:]) == [t * (t - 1) // 2 for t in range(32)]
    code = res.trace
    sync_pc = _pc_of(body, "bar.warp.sync")
    after = [m for _, _, pc, m in code if pc > sync_pc]
    assert after and all(m == 0xFFFFFFFF for m in after)      # one step each, whole warp


def _pc_of(body, opcode):
    """Index of the first instruction starting with `opcode` in OUT + body."""
    lines = [ln.strip() for ln in (OUT + body).splitlines() if ln.strip() and not ln.strip().endswith(":")]
    return next(i for i, ln in enumerate(lines) if ln.startswith(opcode))


def test_barrier_orders_shared_memory_between_warps():
    decls = "\t.shared .align 4 .b8 s[256];\n"
    body = """\tmov.u32 \t%r1, s;
\tshl.b32 \t%r2, %r100, 2;
\tadd.s32 \t%r3, %r1, %r2;
\tsetp.lt.u32 \t%p1, %r100, 32;
\t@%p1 bra \tL_store;
\tmov.u32 \t%r5, 0;
L_spin:
\tadd.s32 \t%r5, %r5, 1;
\tsetp.lt.u32 \t%p2, %r5, 20;
\t@%p2 bra \tL_spin;
L_store:
\tst.shared.u32 \t[%r3], %r100;
\tBARRIER
\tsub.s32 \t%r6, 252, %r2;
\tadd.s32 \t%r7, %r1, %r6;
\tld.shared.u32 \t%r8, [%r7];
\tst.global.u32 \t[%rd9], %r8;
\tret;
"""
    out = np.zeros(64, np.uint32)
    ptx = kernel_ptx(OUT + body.replace("BARRIER", "bar.sync \t0;"), decls=decls)
    res = run_ptx(ptx, 1, 64, [out])
    assert list(res.buffers[0]) == list(range(63, -1, -1))
    # without the barrier warp 0 reads what warp 1 has not written yet
    ptx = kernel_ptx(OUT + body.replace("BARRIER", ""), decls=decls)
    with pytest.raises(UninitializedRead, match="shared"):
        run_ptx(ptx, 1, 64, [out])


def test_barrier_counts_only_threads_that_have_not_exited():
    body = """\tsetp.ge.u32 \t%p1, %r100, 40;
\t@%p1 bra \tL_out;
\tbar.sync \t0;
\tst.global.u32 \t[%rd9], 1;
L_out:
"""
    out = np.zeros(64, np.uint32)
    res = run_ptx(kernel_ptx(OUT + body + "\tret;\n"), 1, 64, [out])
    assert list(res.buffers[0]) == [1] * 40 + [0] * 24


def test_atomics_are_ordered_by_lane():
    body = """\tld.param.u64 \t%rd3, [out];
\tcvta.to.global.u64 \t%rd3, %rd3;
\tatom.global.add.u32 \t%r1, [%rd3+128], 1;
\tatom.global.max.s32 \t%r2, [%rd3+132], %r100;
\tatom.global.cas.b32 \t%r3, [%rd3+136], %r100, 99;
\tatom.global.exch.b32 \t%r4, [%rd3+140], %r100;
\tst.global.u32 \t[%rd9], %r1;
"""
    out = np.zeros(36, np.uint32)
    res = run_ptx(kernel_ptx(OUT + body + "\tret;\n"), 1, 32, [out])
    r = res.buffers[0]
    assert list(r[:32]) == list(range(32))
    assert r[32] == 32 and r[33] == 31 and r[34] == 99 and r[35] == 31


def test_atomic_float_add_in_lane_order():
    body = """\tld.param.u64 \t%rd3, [out];
\tcvta.to.global.u64 \t%rd3, %rd3;
\tmov.u32 \t%r100, %tid.x;
\tcvt.rn.f32.u32 \t%f1, %r100;
\tmul.rn.f32 \t%f1, %f1, 0f3DCCCCCD;
\tatom.global.add.f32 \t%f2, [%rd3], %f1;
"""
    out = np.zeros(1, np.float32)
    res = run_ptx(kernel_ptx(body + "\tret;\n"), 1, 32, [out])
    acc = np.float32(0)
    for t in range(32):
        acc = np.float32(acc + np.float32(np.float32(t) * np.float32(0.1)))
    assert res.buffers[0][0].view(np.uint32) == acc.view(np.uint32)


def test_local_memory_and_generic_addressing():
    decls = "\t.local .align 8 .b8 \t__local_depot0[16];\n"
    body = """\tmov.u64 \t%SPL, __local_depot0;
\tcvta.local.u64 \t%SP, %SPL;
\tst.local.u32 \t[%SPL+4], %r100;
\tld.u32 \t%r1, [%SP+4];
\tadd.s32 \t%r1, %r1, 1;
\tst.u32 \t[%SP+8], %r1;
\tld.local.u32 \t%r2, [%SPL+8];
\tcvta.global.u64 \t%rd4, %rd9;
\tst.u32 \t[%rd4], %r2;
"""
    out = np.zeros(32, np.uint32)
    decls += "\t.reg .b64 \t%SP;\n\t.reg .b64 \t%SPL;\n"
    res = run_ptx(kernel_ptx(OUT + body + "\tret;\n", decls=decls), 1, 32, [out])
    assert list(res.buffers[0]) == list(range(1, 33))


def test_dynamic_shared_memory():
    mdecl = ".extern .shared .align 16 .b8 dyn[];\n"
    decls = "\t.shared .align 4 .b8 fixed[4];\n"
    body = """\tmov.u32 \t%r1, dyn;
\tshl.b32 \t%r2, %r100, 2;
\tadd.s32 \t%r3, %r1, %r2;
\tst.shared.u32 \t[%r3], %r100;
\tmov.u32 \t%r4, fixed;
\tst.shared.u32 \t[%r4], %r1;
\tld.shared.u32 \t%r5, [fixed];
\tst.global.u32 \t[%rd9], %r5;
"""
    ptx = kernel_ptx(OUT + body + "\tret;\n", decls=decls, module_decls=mdecl)
    res = run_ptx(ptx, 1, 8, [np.zeros(8, np.uint32)], dynamic_shared_bytes=32)
    assert list(res.buffers[0]) == [16] * 8          # dyn starts after `fixed`, aligned to 16
    from gpu_layers.errors import OutOfBounds
    with pytest.raises(OutOfBounds, match="shared"):
        run_ptx(ptx, 1, 8, [np.zeros(8, np.uint32)], dynamic_shared_bytes=16)


def test_params_of_every_scalar_kind():
    params = [("out", "u64"), ("a", "u32"), ("b", "f32"), ("c", "u64"), ("d", "s32")]
    body = """\tld.param.u32 \t%r1, [a];
\tld.param.f32 \t%f1, [b];
\tld.param.u64 \t%rd5, [c];
\tld.param.s32 \t%r2, [d];
\tcvt.rzi.u32.f32 \t%r3, %f1;
\tcvt.u32.u64 \t%r4, %rd5;
\tadd.s32 \t%r5, %r1, %r3;
\tadd.s32 \t%r5, %r5, %r4;
\tadd.s32 \t%r5, %r5, %r2;
\tst.global.u32 \t[%rd9], %r5;
"""
    from gpu_layers.interp import Scalar
    out = np.zeros(4, np.int32)
    res = run_ptx(kernel_ptx(OUT + body + "\tret;\n", params=params), 1, 4,
                  [out, 1, Scalar("f32", 2.5), Scalar("u64", 2**40 + 7), Scalar("i32", -100)])
    assert list(res.buffers[0]) == [1 + 2 + 7 - 100] * 4


def test_fingerprint_is_stable_and_sensitive():
    out1, r1 = run_body("\tst.global.u32 \t[%rd9], %r100;\n")
    out2, r2 = run_body("\tst.global.u32 \t[%rd9], %r100;\n")
    out3, r3 = run_body("\tst.global.u32 \t[%rd9], %r100;\n", n=31)
    assert r1.fingerprint == r2.fingerprint != r3.fingerprint
    assert r1.trace is None


def test_lop3_slct_copysign_and_saturating_add():
    body = """\tmov.u32 \t%r1, 0xF0F0F0F0;
\tmov.u32 \t%r2, 0xCCCCCCCC;
\tmov.u32 \t%r3, 0xAAAAAAAA;
\tlop3.b32 \t%r4, %r1, %r2, %r3, 0x96;
\tlop3.b32 \t%r5, %r1, %r2, %r3, 0xE8;
\tsub.s32 \t%r6, %r100, 16;
\tslct.u32.s32 \t%r7, 1, 2, %r6;
\tmov.f32 \t%f1, 0f80000000;
\tslct.u32.f32 \t%r8, 4, 8, %f1;
\tmov.f32 \t%f2, 0fFFC00000;
\tslct.u32.f32 \t%r9, 16, 32, %f2;
\tcopysign.f32 \t%f3, %f1, 0f3F800000;
\tmov.b32 \t%r10, %f3;
\tadd.sat.s32 \t%r11, 2147483000, %r100;
\tsub.sat.s32 \t%r12, -2147483000, %r100;
\tst.global.u32 \t[%rd9], %r4;
"""
    from gpu_layers.interp.decode import lop3_fn
    assert lop3_fn(0x96)(0xF0F0F0F0, 0xCCCCCCCC, 0xAAAAAAAA) == 0xF0F0F0F0 ^ 0xCCCCCCCC ^ 0xAAAAAAAA
    assert lop3_fn(0xE8)(0xF0F0F0F0, 0xCCCCCCCC, 0xAAAAAAAA) == 0xE8E8E8E8   # majority
    for reg, want in [("%r4", lambda t: 0x96969696), ("%r5", lambda t: 0xE8E8E8E8),
                      ("%r7", lambda t: 1 if t >= 16 else 2), ("%r8", lambda t: 4),
                      ("%r9", lambda t: 32), ("%r10", lambda t: 0xBF800000),
                      ("%r11", lambda t: min(2147483000 + t, 2**31 - 1)),
                      ("%r12", lambda t: max(-2147483000 - t, -2**31) & 0xFFFFFFFF)]:
        out, _ = run_body(body.replace("[%rd9], %r4", f"[%rd9], {reg}"))
        assert [int(v) for v in out] == [want(t) & 0xFFFFFFFF for t in range(32)], reg


def test_warp_sync_requires_the_named_threads():
    ok = "\tbar.warp.sync \t-1;\n\tst.global.u32 \t[%rd9], 1;\n"
    out, _ = run_body(ok)
    assert list(out) == [1] * 32
    # lanes 0-2 leave early and exit: the others' __syncwarp does not wait for exited threads
    early = "\tsetp.lt.u32 \t%p1, %r100, 3;\n\t@%p1 bra \tL_x;\n\tbar.warp.sync \t-1;\n" \
            "\tst.global.u32 \t[%rd9], 1;\nL_x:\n"
    out, _ = run_body(early)
    assert list(out) == [0] * 3 + [1] * 29
    # lanes 0-2 wait at a block barrier the others never reach: a deadlock, not a hang
    bad = "\tsetp.lt.u32 \t%p1, %r100, 3;\n\t@%p1 bra \tL_x;\n\tbar.warp.sync \t-1;\n" \
          "\tbra.uni \tL_y;\nL_x:\n\tbar.sync \t0;\nL_y:\n"
    with pytest.raises(ExecutionError, match=r"deadlocked.*bar.warp.sync.*\[0, 1, 2\].*barrier"):
        run_body(bad)


def _next_up(b):
    """The next binary32 above b (finite, by bits)."""
    if b == 0x80000000:
        return 1
    return b - 1 if b & 0x80000000 else b + 1


def test_directed_rounding_brackets_the_exact_result():
    rng = random.Random(3)
    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b}
    for _ in range(400):
        a, b = _rand_f32(rng), _rand_f32(rng)
        if (b & 0x7FFFFFFF) == 0:
            continue
        for op, f in ops.items():
            q = f(exact(a), exact(b))
            rn, rz, rm, rp = (fp.directed(op, m)(a, b) for m in ("rn", "rz", "rm", "rp"))
            with np.errstate(all="ignore"):
                x, y = np.float32(value(a)), np.float32(value(b))
                want = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y}[op]
            assert rn == np_bits(want), (op, hex(a), hex(b))
            if (rm & 0x7FFFFFFF) >= 0x7F800000 or (rp & 0x7FFFFFFF) >= 0x7F800000:
                continue
            lo, hi = exact(rm), exact(rp)
            assert lo <= q <= hi
            if lo == q:
                assert rm == rp or q == 0
            else:
                assert _next_up(rm) == rp, (op, hex(a), hex(b))
            assert rz == (rm if q > 0 else rp)
        c = _rand_f32(rng)
        q = exact(a) * exact(b) + exact(c)
        rm, rp = fp.directed("fma", "rm")(a, b, c), fp.directed("fma", "rp")(a, b, c)
        if max(rm & 0x7FFFFFFF, rp & 0x7FFFFFFF) < 0x7F800000:
            assert exact(rm) <= q <= exact(rp)
            assert fp.directed("fma", "rn")(a, b, c) == f32_of_fraction(q) or q == 0


def test_directed_rounding_special_cases():
    one, third = bits(1.0), bits(3.0)
    assert fp.directed("div", "rz")(one, third) == 0x3EAAAAAA
    assert fp.directed("div", "rp")(one, third) == 0x3EAAAAAB
    assert fp.directed("add", "rm")(one, one ^ 0x80000000) == 0x80000000    # exact zero, rm: -0
    assert fp.directed("add", "rz")(one, one ^ 0x80000000) == 0
    big = 0x7F7FFFFF
    assert fp.directed("mul", "rz")(big, bits(2.0)) == big
    assert fp.directed("mul", "rp")(big, bits(2.0)) == 0x7F800000
    assert fp.directed("mul", "rm")(big ^ 0x80000000, bits(2.0)) == 0xFF800000
    assert fp.directed("mul", "rp")(1, bits(0.5)) == 1                      # tiny: up to min subnormal
    assert fp.directed("mul", "rz")(1, bits(0.5)) == 0


def test_sad():
    out, _ = run_body("\tsad.s32 \t%r1, %r100, 10, 1000;\n\tst.global.u32 \t[%rd9], %r1;\n")
    assert list(out) == [1000 + abs(t - 10) for t in range(32)]


def test_fingerprint_is_the_sha256_of_the_packed_trace():
    import hashlib

    body = "\tsetp.lt.u32 \t%p1, %r100, 5;\n\t@%p1 bra \tL_a;\n\tst.global.u32 \t[%rd9], 1;\nL_a:\n"
    _, res = run_body(body, n=40, trace=True)
    h = hashlib.sha256(b"".join(struct.pack("<IIII", *t) for t in res.trace)).hexdigest()
    assert res.fingerprint == h
    assert res.steps == len(res.trace)
    assert {w for _, w, _, _ in res.trace} == {0, 1}


def test_match_any_and_all():
    body = """\tand.b32 \t%r1, %r100, 3;
\tmatch.any.sync.b32 \t%r2, %r1, -1;
\tmatch.all.sync.b32 \t%r3|%p1, %r1, -1;
\tmatch.all.sync.b32 \t%r4|%p2, 9, -1;
\tselp.u32 \t%r5, 1, 0, %p2;
\tadd.s32 \t%r6, %r3, %r5;
\txor.b32 \t%r6, %r6, %r4;
\txor.b32 \t%r6, %r6, %r2;
\tst.global.u32 \t[%rd9], %r6;
"""
    out, _ = run_body(body)
    for t in range(32):
        any_mask = sum(1 << j for j in range(32) if j % 4 == t % 4)
        assert out[t] == (0 + 1) ^ 0xFFFFFFFF ^ any_mask


def test_atomics_with_a_scope():
    body = """\tld.param.u64 \t%rd3, [out];
\tcvta.to.global.u64 \t%rd3, %rd3;
\tatom.global.cta.add.u32 \t%r1, [%rd3], 1;
\tred.global.sys.add.u32 \t[%rd3+4], 2;
"""
    out = np.zeros(2, np.uint32)
    res = run_ptx(kernel_ptx(body + "\tret;\n"), 1, 32, [out])
    assert list(res.buffers[0]) == [32, 64]


# ------------------------------------------------------------------------------------ f64

F64_DECLS = "\t.reg .f64 \t%fd<32>;\n\t.shared .align 8 .b8 sh64[64];\n"


def d2b(v):
    return struct.unpack("<Q", struct.pack("<d", v))[0]


def test_f64_ops_in_a_kernel():
    """Decoding of the f64 forms: parameters, 0d literals, every rounding mode, vectors, bit moves,
    conversions, setp/selp/testp and atomics, each lane against interp/fp64.py directly."""
    from gpu_layers.interp import Scalar
    from gpu_layers.interp import fp64 as F

    body = r"""	ld.param.f64 	%fd1, [s];
	ld.param.u64 	%rd20, [inp];
	cvta.to.global.u64 	%rd20, %rd20;
	mul.wide.u32 	%rd21, %r100, 16;
	add.s64 	%rd22, %rd20, %rd21;
	ld.global.v2.f64 	{%fd2, %fd3}, [%rd22];
	mul.wide.u32 	%rd23, %r100, 128;
	ld.param.u64 	%rd24, [res];
	cvta.to.global.u64 	%rd24, %rd24;
	add.s64 	%rd25, %rd24, %rd23;
	add.rn.f64 	%fd4, %fd2, %fd3;
	sub.rz.f64 	%fd5, %fd2, %fd1;
	mul.rp.f64 	%fd6, %fd2, 0d3FB999999999999A;
	fma.rm.f64 	%fd7, %fd2, %fd3, %fd1;
	st.global.v2.f64 	[%rd25], {%fd4, %fd5};
	st.global.v2.f64 	[%rd25+16], {%fd6, %fd7};
	div.rp.f64 	%fd8, %fd2, %fd3;
	sqrt.rz.f64 	%fd9, %fd2;
	rcp.rm.f64 	%fd10, %fd3;
	max.f64 	%fd11, %fd2, %fd3;
	st.global.f64 	[%rd25+32], %fd8;
	st.global.f64 	[%rd25+40], %fd9;
	st.global.f64 	[%rd25+48], %fd10;
	st.global.f64 	[%rd25+56], %fd11;
	cvt.rn.f32.f64 	%f1, %fd2;
	cvt.f64.f32 	%fd12, %f1;
	cvt.rzi.s32.f64 	%r1, %fd2;
	cvt.rm.f64.s32 	%fd13, %r100;
	mov.b64 	{%r2, %r3}, %fd2;
	mov.b64 	%fd14, {%r3, %r2};
	st.global.f64 	[%rd25+64], %fd12;
	st.global.u32 	[%rd25+72], %r1;
	st.global.f64 	[%rd25+80], %fd13;
	st.global.f64 	[%rd25+88], %fd14;
	setp.ltu.and.f64 	%p1, %fd2, %fd3, %p0;
	selp.f64 	%fd15, %fd2, 0dBFF0000000000000, %p1;
	testp.notanumber.f64 	%p2, %fd2;
	selp.u32 	%r4, 1, 0, %p2;
	neg.f64 	%fd16, %fd2;
	abs.f64 	%fd17, %fd16;
	st.global.f64 	[%rd25+96], %fd15;
	st.global.u32 	[%rd25+104], %r4;
	st.global.f64 	[%rd25+112], %fd17;
	mov.u64 	%rd26, sh64;
	st.shared.f64 	[sh64], 0d0000000000000000;
	bar.sync 	0;
	atom.shared.add.f64 	%fd18, [sh64], %fd2;
	bar.sync 	0;
	ld.shared.f64 	%fd19, [sh64];
	st.global.f64 	[%rd25+120], %fd19;
"""
    body = "\tsetp.eq.u32 \t%p0, 1, 1;\n" + body
    params = [("out", "u64"), ("s", "f64"), ("inp", "u64"), ("res", "u64")]
    rng = random.Random(3)
    n = 8
    xs = [2.5, -1e-310, 7.0, float("nan"), 1e308, -0.0, 3.0, 0.1]
    ys = [rng.uniform(-5, 5) for _ in range(n)]
    ys[2] = 0.0
    inp = np.array([v for p in zip(xs, ys) for v in p], np.float64)
    res = np.zeros(16 * n, np.float64)
    s = 1.25
    out = run_ptx(kernel_ptx(OUT + body + "\tret;\n", params=params, decls=F64_DECLS), 1, n,
                  [np.zeros(n, np.uint32), Scalar("f64", s), inp, res]).buffers[3]
    got = out.view(np.uint64).reshape(n, 16)
    S = d2b(s)
    acc = 0
    for x in map(d2b, xs):
        acc = F.add(acc, x)
    for t in range(n):
        x, y = d2b(xs[t]), d2b(ys[t])
        g = [int(v) for v in got[t]]
        assert g[0] == F.add(x, y) and g[1] == F.sub(x, S, "rz") and g[2] == F.mul(x, 0x3FB999999999999A, "rp")
        assert g[3] == F.fma(x, y, S, "rm") and g[4] == F.div(x, y, "rp") and g[5] == F.sqrt(x, "rz")
        assert g[6] == F.rcp(y, "rm") and g[7] == F.fmax(x, y)
        assert g[8] == F.from_f32(F.to_f32(x, "rn"))
        assert g[9] & 0xFFFFFFFF == F.to_int(x, "rzi", -(2**31), 2**31 - 1) & 0xFFFFFFFF
        assert g[10] == F.from_int(t, "rm") and g[11] == ((x & 0xFFFFFFFF) << 32) | (x >> 32)
        lt = F.cmp_fn("ltu")(x, y)
        assert g[12] == (x if lt else d2b(-1.0)) and g[13] & 0xFFFFFFFF == int(F.is_nan(x))
        assert g[14] == F.fabs(F.neg(x))
        assert g[15] == acc                                        # lane-order atomic sum
    assert got[3][8] == 0x7FF8000000000000                         # the NaN's payload survives both ways


def test_f64_nan_and_conversion_rules():
    from gpu_layers.interp import fp64 as F

    # f32 -> 64-bit integer of a NaN: 1 << 63 (PTX ISA cvt); to 32 bits: 0
    assert fp.f32_to_int(fp.CANON_NAN, "rzi", -(2**63), 2**63 - 1) & (2**64 - 1) == 1 << 63
    assert fp.f32_to_int(fp.CANON_NAN, "rni", 0, 2**64 - 1) == 1 << 63
    assert fp.f32_to_int(fp.CANON_NAN, "rni", -(2**31), 2**31 - 1) == 0
    assert F.to_int(F.DEFAULT_NAN, "rzi", -(2**31), 2**31 - 1) == -(2**31)
    assert F.to_int(F.DEFAULT_NAN, "rzi", 0, 2**32 - 1) == 1 << 31


def test_f64_validation():
    from gpu_layers.errors import UnsupportedPTX
    from gpu_layers.ptx import parse_ptx
    from gpu_layers.ptx.validator import fusion_warnings, validate

    for ins in ("rcp.approx.ftz.f64 \t%fd1, %fd2", "rsqrt.approx.f64 \t%fd1, %fd2",
                "ld.global.v4.f64 \t{%fd1, %fd2, %fd3, %fd4}, [%rd1]", "mov.f64 \t%fd1, 0f3F800000"):
        with pytest.raises(UnsupportedPTX):
            text = kernel_ptx(f"\t{ins};\n\tret;\n", decls=F64_DECLS)
            validate(parse_ptx(text))
            run_ptx(text, 1, 1, [np.zeros(1, np.uint32)])
    text = kernel_ptx("\tmul.f64 \t%fd1, %fd2, %fd3;\n\tadd.f64 \t%fd4, %fd1, %fd5;\n"
                      "\tmul.rn.f64 \t%fd6, %fd2, %fd3;\n\tadd.f64 \t%fd7, %fd6, %fd5;\n\tret;\n", decls=F64_DECLS)
    w = fusion_warnings(parse_ptx(text).kernel())
    assert len(w) == 1 and "mul.f64" in w[0] and "__dmul_rn" in w[0]


def test_the_machines_warp_barrier_waits_for_its_warp_only():
    """Machine code's warp barrier (bar.warp.sync -1 at an index in Kernel.warp_barriers): lanes
    that arrive wait until every lane of their warp that has not exited waits (lane 5 loops longer
    and then exits: that releases the others), while the other warp runs on. The index must hold
    an unguarded bar.warp.sync."""
    from dataclasses import replace

    from gpu_layers.interp import launch
    from gpu_layers.ptx.parser import parse_ptx

    body = """\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r1, %tid.x;
\tmul.wide.u32 \t%rd2, %r1, 4;
\tadd.s64 \t%rd3, %rd1, %rd2;
\tand.b32 \t%r2, %r1, 7;
\tsetp.eq.u32 \t%p2, %r1, 5;
\tselp.u32 \t%r9, 20, 0, %p2;
\tadd.u32 \t%r2, %r2, %r9;
$L1:
\tsetp.ne.u32 \t%p1, %r2, 0;
\tsub.u32 \t%r2, %r2, 1;
\t@%p1 bra $L1;
\t@%p2 ret;
\tbar.warp.sync \t-1;
\tst.global.u32 \t[%rd3], %r1;
\tret;
"""
    k = parse_ptx(kernel_ptx(body)).kernel()
    wb = next(i for i, ins in enumerate(k.instructions) if ins.opcode == "bar")
    mk = replace(k, warp_barriers=frozenset({wb}))
    res = launch(mk, 1, 40, [np.zeros(40, np.uint32)], trace=True)
    assert res.buffers[0].tolist() == [0 if t == 5 else t for t in range(40)]
    steps = res.trace
    arrive = [i for i, (_, w, pc, _) in enumerate(steps) if w == 0 and pc == wb]
    store = min(i for i, (_, w, pc, _) in enumerate(steps) if w == 0 and pc == wb + 1)
    exit5 = max(i for i, (_, w, pc, m) in enumerate(steps) if w == 0 and pc == wb - 1 and m >> 5 & 1)
    assert len(arrive) > 1 and store > exit5 > arrive[-1]              # released by lane 5's exit
    assert any(w == 1 and pc == wb + 1 for _, w, pc, _ in steps[:store])   # warp 1 did not wait
    with pytest.raises(ValueError, match="not an unguarded bar.warp.sync"):
        launch(replace(k, warp_barriers=frozenset({wb - 1})), 1, 40, [np.zeros(40, np.uint32)])
