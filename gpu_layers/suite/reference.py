"""Independent CPU references for the kernel suite (gpu_layers/suite/cases.json).

REFERENCES maps case name -> fn(case) -> {output buffer name: numpy array}. `case` is the case's
JSON object (a dict) or a `gpu_layers.cases.Case`. Each array has the buffer's full length
(elements the kernel does not write keep their initial contents) and the buffer's dtype.

These are written from the kernels' *meaning*, not from their PTX: integer results use Python
integers with explicit 32/64-bit wrap-around, C truncating division and arithmetic right shifts;
where a closed form exists it is used instead of re-running the loop (zlib.crc32, math.isqrt,
pow(b, e, m), sorted(), bisect, 128-bit Python integers). Floats are computed one operation at a
time in float32: add/sub/mul/div/fma are computed exactly with fractions and rounded once, in the
operation's rounding mode (nearest-even, toward zero, toward +inf, toward -inf), with IEEE
overflow and signed-zero rules; float -> int conversions follow PTX cvt (round, then saturate;
NaN -> 0, or 1 << 63 for a 64-bit destination). Doubles: numpy float64 for round-to-nearest
operations, and exact rationals rounded by CPython's correctly rounded int/int division plus one
nextafter step for fma and the directed modes; NaN results follow the rules written out at
`NaN rules` below (bit patterns, not numpy's NaNs).
"""
from __future__ import annotations

import bisect
import math
import struct
import zlib
from fractions import Fraction

import numpy as np

DTYPES = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64, "f32": np.float32,
          "f64": np.float64}
M32 = (1 << 32) - 1
M64 = (1 << 64) - 1
F32 = np.float32
F64 = np.float64
FLT_MAX = Fraction(2**128 - 2**104)


# ---------------------------------------------------------------------------------------------
# integer helpers
# ---------------------------------------------------------------------------------------------
def s32(x):
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def u32(x):
    return x & M32


def s64(x):
    x &= M64
    return x - (1 << 64) if x >> 63 else x


def u64(x):
    return x & M64


def s8(x):
    x &= 0xFF
    return x - 256 if x >> 7 else x


def s16(x):
    x &= 0xFFFF
    return x - 65536 if x >> 15 else x


def cdiv(a, b):
    """C division: truncates toward zero."""
    assert b != 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def crem(a, b):
    return a - b * cdiv(a, b)


def popc(x):
    return bin(x).count("1")


def clz(x, bits):
    return bits - x.bit_length()


def ffs(x):
    """1-based index of the least significant set bit; 0 for 0."""
    return (x & -x).bit_length()


def brev(x, bits):
    return int(format(x, f"0{bits}b")[::-1], 2)


def unpack_bytes(words):
    return b"".join(struct.pack("<I", w & M32) for w in words)


def pack_bytes(bs):
    bs = bytes(bs) + b"\0" * (-len(bs) % 4)
    return list(struct.unpack(f"<{len(bs) // 4}I", bs))


# ---------------------------------------------------------------------------------------------
# float32 helpers: exact value -> float32 with a rounding mode
# ---------------------------------------------------------------------------------------------
def f32(x):
    return F32(x)


def fr(x):
    """Exact rational value of a finite float32."""
    x = F32(x)
    assert np.isfinite(x), x
    return Fraction(float(x))


def _overflow(sign, mode):
    if mode == "rn" or (mode == "ru" and sign > 0) or (mode == "rd" and sign < 0):
        return F32(sign * math.inf)
    return F32(sign * float(FLT_MAX))


def round_f32(x, mode="rn", zero_sign=1):
    """Round an exact rational to float32 (modes rn, rz, ru, rd). zero_sign: sign of an exact 0."""
    x = Fraction(x)
    if x == 0:
        return F32(0.0) if zero_sign > 0 else F32(-0.0)
    sign = -1 if x < 0 else 1
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    if e >= 128:
        return _overflow(sign, mode)
    q = max(e, -126) - 23          # quantum (ulp) exponent; subnormals share 2^-149
    scaled = a / Fraction(2) ** q
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem:
        if mode == "rn":
            if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
                n += 1
        elif mode == "rz":
            pass
        elif mode == "ru":
            n += 1 if sign > 0 else 0
        elif mode == "rd":
            n += 1 if sign < 0 else 0
        else:
            raise ValueError(mode)
    if n == 0:
        return F32(0.0) if sign > 0 else F32(-0.0)
    v = Fraction(n) * Fraction(2) ** q
    if v > FLT_MAX:
        return _overflow(sign, mode)
    return F32(sign * float(v))


def _zero_sum_sign(terms_zero_signs, mode):
    """IEEE sign of an exact zero sum: same-signed zeros keep the sign, else +0 (-0 in rd)."""
    if terms_zero_signs and all(s < 0 for s in terms_zero_signs):
        return -1
    return -1 if mode == "rd" else 1


def _sign(x):
    return -1 if math.copysign(1.0, float(x)) < 0 else 1


def fadd(a, b, mode="rn"):
    a, b = F32(a), F32(b)
    if not (np.isfinite(a) and np.isfinite(b)):
        with np.errstate(all="ignore"):
            return F32(a + b)
    s = fr(a) + fr(b)
    zs = _zero_sum_sign([_sign(a), _sign(b)] if a == 0 and b == 0 else [], mode)
    return round_f32(s, mode, zs)


def fsub(a, b, mode="rn"):
    return fadd(a, -F32(b), mode)


def fmul(a, b, mode="rn"):
    a, b = F32(a), F32(b)
    if not (np.isfinite(a) and np.isfinite(b)):
        with np.errstate(all="ignore"):
            return F32(a * b)
    return round_f32(fr(a) * fr(b), mode, _sign(a) * _sign(b))


def fdiv(a, b, mode="rn"):
    a, b = F32(a), F32(b)
    assert b != 0 and np.isfinite(a) and np.isfinite(b)
    return round_f32(fr(a) / fr(b), mode, _sign(a) * _sign(b))


def fma(a, b, c, mode="rn"):
    """a * b + c computed exactly and rounded once."""
    a, b, c = F32(a), F32(b), F32(c)
    assert np.isfinite(a) and np.isfinite(b) and np.isfinite(c)
    p = fr(a) * fr(b)
    s = p + fr(c)
    if s == 0:
        zs = _zero_sum_sign([_sign(a) * _sign(b), _sign(c)] if (p == 0 and c == 0) else [], mode)
        return round_f32(0, mode, zs)
    return round_f32(s, mode)


def fsqrt(a):
    a = F32(a)
    assert a >= 0
    r = np.sqrt(a)  # IEEE sqrt, correctly rounded in float32
    # double-check against the exact square: r must be the float32 nearest to sqrt(a)
    x = fr(a)
    lo, hi = np.nextafter(r, F32(0)), np.nextafter(r, F32(np.inf))
    assert abs(fr(r) ** 2 - x) <= min(abs(fr(lo) ** 2 - x), abs(fr(hi) ** 2 - x))
    return F32(r)


def fmin(a, b):
    a, b = F32(a), F32(b)
    if np.isnan(a):
        return b
    if np.isnan(b):
        return a
    assert not (a == 0 and b == 0 and _sign(a) != _sign(b)), "min(-0, +0) avoided"
    return a if a < b else b


def fmax(a, b):
    a, b = F32(a), F32(b)
    if np.isnan(a):
        return b
    if np.isnan(b):
        return a
    assert not (a == 0 and b == 0 and _sign(a) != _sign(b)), "max(-0, +0) avoided"
    return a if a > b else b


def f2i(f, mode, lo, hi):
    """PTX cvt.{rni,rzi,rmi,rpi}.{s,u}NN.f32: round to an integer, then saturate; NaN -> 0, but
    1 << 63 for a 64-bit destination (PTX ISA cvt: MININT for .s64)."""
    f = F32(f)
    if np.isnan(f):
        return (lo if lo < 0 else (hi + 1) // 2) if hi > M32 else 0
    if np.isinf(f):
        return hi if f > 0 else lo
    x = fr(f)
    r = {"rn": round(x), "rz": math.trunc(x), "rd": math.floor(x), "ru": math.ceil(x)}[mode]
    return min(max(r, lo), hi)


def i2f(k, mode="rn"):
    return round_f32(Fraction(k), mode)


# ---------------------------------------------------------------------------------------------
# float64 helpers
# ---------------------------------------------------------------------------------------------
DBL_MAX = float(np.finfo(np.float64).max)


def fr64(x):
    """Exact rational value of a finite float64."""
    x = float(x)
    assert math.isfinite(x), x
    return Fraction(x)


def round_f64(x, mode="rn", zero_sign=1):
    """Round an exact rational to float64 (modes rn, rz, ru, rd): CPython's int/int division is
    correctly rounded to nearest even (subnormals and overflow included); the directed modes step
    once with nextafter when that went the wrong way. zero_sign: the sign of an exact 0."""
    x = Fraction(x)
    if x == 0:
        return F64(0.0) if zero_sign > 0 else F64(-0.0)
    try:
        r = x.numerator / x.denominator
    except OverflowError:
        r = math.inf if x > 0 else -math.inf
    if mode != "rn":
        if math.isinf(r):
            if mode == "rz" or (mode == "ru" and x < 0) or (mode == "rd" and x > 0):
                r = math.copysign(DBL_MAX, r)
        elif Fraction(r) != x:
            if mode == "rz" and abs(Fraction(r)) > abs(x):
                r = math.nextafter(r, 0.0)
            elif mode == "ru" and Fraction(r) < x:
                r = math.nextafter(r, math.inf)
            elif mode == "rd" and Fraction(r) > x:
                r = math.nextafter(r, -math.inf)
    if r == 0.0:
        r = -0.0 if x < 0 else 0.0
    return F64(r)


def _sign64(x):
    return -1 if math.copysign(1.0, float(x)) < 0 else 1


def dadd(a, b, mode="rn"):
    a, b = F64(a), F64(b)
    if not (np.isfinite(a) and np.isfinite(b)):
        with np.errstate(all="ignore"):
            r = a + b
        assert not np.isnan(r), "NaN results are checked as bits (nan_results)"
        return r
    s = fr64(a) + fr64(b)
    zs = _zero_sum_sign([_sign64(a), _sign64(b)] if a == 0 and b == 0 else [], mode)
    return round_f64(s, mode, zs)


def dsub(a, b, mode="rn"):
    return dadd(a, -F64(b), mode)


def dmul(a, b, mode="rn"):
    a, b = F64(a), F64(b)
    if not (np.isfinite(a) and np.isfinite(b)):
        r = a * b
        assert not np.isnan(r)
        return r
    return round_f64(fr64(a) * fr64(b), mode, _sign64(a) * _sign64(b))


def ddiv(a, b, mode="rn"):
    a, b = F64(a), F64(b)
    if b == 0 or not (np.isfinite(a) and np.isfinite(b)):
        assert not (a == 0 and b == 0) and not (np.isinf(a) and np.isinf(b)), "NaN results: nan_results"
        assert not (np.isnan(a) or np.isnan(b))
        with np.errstate(all="ignore"):
            return a / b                                # IEEE: x / 0 = inf, 0 / inf = 0, inf / x = inf
    return round_f64(fr64(a) / fr64(b), mode, _sign64(a) * _sign64(b))


def dfma(a, b, c, mode="rn"):
    """a * b + c computed exactly and rounded once."""
    a, b, c = F64(a), F64(b), F64(c)
    if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c)):
        assert np.isfinite(a) and np.isfinite(b), "infinite products are not used"
        return c
    p = fr64(a) * fr64(b)
    s = p + fr64(c)
    if s == 0:
        zs = _zero_sum_sign([_sign64(a) * _sign64(b), _sign64(c)] if (p == 0 and c == 0) else [], mode)
        return round_f64(0, mode, zs)
    return round_f64(s, mode)


def dsqrt(a, mode="rn"):
    """Square root of a float64 >= 0, correctly rounded (math.sqrt), directed by one exact check."""
    a = F64(a)
    assert a >= 0
    if a == 0 or np.isinf(a):
        return a
    r = math.sqrt(float(a))
    x = fr64(a)
    rr = Fraction(r) ** 2
    if mode != "rn" and rr != x:
        if mode in ("rz", "rd") and rr > x:
            r = math.nextafter(r, 0.0)
        elif mode == "ru" and rr < x:
            r = math.nextafter(r, math.inf)
    return F64(r)


def dmin(a, b):
    a, b = F64(a), F64(b)
    if a == b:
        return a if _sign64(a) < 0 else b          # PTX min: -0.0 < +0.0
    return a if a < b else b


def dmax(a, b):
    a, b = F64(a), F64(b)
    if a == b:
        return b if _sign64(a) < 0 else a
    return a if a > b else b


def d2i(x, mode, lo, hi):
    """PTX cvt.{rni,rzi,rmi,rpi}.{s,u}NN.f64: round to an integer, then saturate;
    NaN -> 1 << (NN - 1) (MININT for signed types)."""
    x = F64(x)
    if np.isnan(x):
        return lo if lo < 0 else (hi + 1) // 2
    if np.isinf(x):
        return hi if x > 0 else lo
    q = fr64(x)
    r = {"rn": round(q), "rz": math.trunc(q), "rd": math.floor(q), "ru": math.ceil(q)}[mode]
    return min(max(r, lo), hi)


def i2d(k, mode="rn"):
    return round_f64(Fraction(k), mode)


def d2f(x, mode="rn"):
    """float64 -> float32 rounded once (rn rz ru rd)."""
    x = F64(x)
    if np.isinf(x):
        return F32(x)
    if x == 0:
        return F32(0.0) if _sign64(x) > 0 else F32(-0.0)
    return round_f32(fr64(x), mode)


def dround_integral(x, mode):
    """rint / trunc / floor / ceil: an integral float64 with the sign of x kept on zero."""
    x = F64(x)
    if not np.isfinite(x):
        return x
    q = fr64(x)
    r = {"rn": round(q), "rz": math.trunc(q), "rd": math.floor(q), "ru": math.ceil(q)}[mode]
    if r == 0:
        return F64(math.copysign(0.0, float(x)))
    return F64(float(r))


def dbits(d):
    return int(np.array([d], dtype=np.float64).view(np.uint64)[0])


def bits_d(u):
    return np.array([u & M64], dtype=np.uint64).view(np.float64)[0]


def fbits(f):
    return int(np.array([f], dtype=np.float32).view(np.uint32)[0])


def bits_f(u):
    return np.array([u & M32], dtype=np.uint32).view(np.float32)[0]


# ---------------------------------------------------------------------------------------------
# case plumbing
# ---------------------------------------------------------------------------------------------
class Launch:
    """The case's arguments as Python values, its output buffers and its launch geometry."""

    def __init__(self, case):
        if isinstance(case, dict):
            args = [(a["name"], a["type"], a.get("data"), a.get("value"), bool(a.get("output")))
                    for a in case["args"]]
            self.grid = tuple(list(case["grid"]) + [1] * (3 - len(case["grid"])))
            self.block = tuple(list(case["block"]) + [1] * (3 - len(case["block"])))
        else:  # gpu_layers.cases.Case
            args = [(a.name, a.type, None if a.data is None else a.data.tolist(), a.value, a.output)
                    for a in case.args]
            self.grid, self.block = tuple(case.grid), tuple(case.block)
        self.a = {}
        self.types = {}
        self.outputs = []
        for name, t, data, value, out in args:
            self.types[name] = t
            if t.endswith("*"):
                if t == "f32*":
                    self.a[name] = [F32(v) for v in data]
                elif t == "f64*":
                    self.a[name] = [F64(v) for v in data]
                else:
                    self.a[name] = [int(v) for v in data]
                if out:
                    self.outputs.append(name)
            else:
                self.a[name] = F32(value) if t == "f32" else F64(value) if t == "f64" else int(value)
        self.o = {n: list(self.a[n]) for n in self.outputs}

    def __getitem__(self, k):
        return self.a[k]

    @property
    def nblocks(self):
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def bsize(self):
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def nthreads(self):
        return self.nblocks * self.bsize

    def result(self):
        res = {}
        for n in self.outputs:
            t = self.types[n][:-1]
            vals = self.o[n]
            if t == "f32":
                res[n] = np.array([F32(v) for v in vals], dtype=np.float32)
            elif t == "f64":
                res[n] = np.array([float(v) for v in vals], dtype=np.float64)
            else:
                wrap = {"i32": s32, "u32": u32, "i64": s64, "u64": u64}[t]
                res[n] = np.array([wrap(int(v)) for v in vals], dtype=DTYPES[t])
            assert len(res[n]) == len(self.a[n])
        return res


def _segments(L, key="offsets", n_key="nseg"):
    offs = L[key]
    return [(offs[s], offs[s + 1]) for s in range(L[n_key])]


REFERENCES = {}


def ref(*names):
    def deco(fn):
        for n in names:
            REFERENCES[n] = fn
        return fn
    return deco


# ---------------------------------------------------------------------------------------------
# integer arithmetic
# ---------------------------------------------------------------------------------------------
@ref("rolling_hash", "rolling_hash_high_bytes")
def ref_rolling_hash(case):
    L = Launch(case)
    text, n, w = unpack_bytes(L["text"]), L["n"], L["w"]
    for i in range(L.nthreads):
        if i + w <= n:
            h = 0
            for k in range(w):
                h = (h * 31 + text[i + k]) & M32
            L.o["out"][i] = h
    return L.result()


@ref("fnv1a_segments")
def ref_fnv1a(case):
    L = Launch(case)
    text = unpack_bytes(L["text"])
    for s, (b, e) in enumerate(_segments(L)):
        a, h = 2166136261, 14695981039346656037
        for c in text[b:e]:
            a = ((a ^ c) * 16777619) & M32
            h = ((h ^ c) * 1099511628211) & M64
        L.o["h32"][s], L.o["h64"][s] = a, h
    return L.result()


@ref("xorshift_streams")
def ref_xorshift(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, y = L["seed32"][t], L["seed64"][t]
        for _ in range(L["steps"][t]):
            x ^= (x << 13) & M32
            x ^= x >> 17
            x ^= (x << 5) & M32
            y ^= y >> 12
            y ^= (y << 25) & M64
            y ^= y >> 27
        L.o["out32"][t] = x
        L.o["out64"][t] = (y * 2685821657736338717) & M64
    return L.result()


@ref("lcg_jump")
def ref_lcg_jump(case):
    L = Launch(case)
    a, c = 6364136223846793005, 1442695040888963407
    for t in range(L.nthreads):
        s = L["state"][t]
        for _ in range(L["k"][t]):  # naive stepping: independent of the kernel's jump-ahead
            s = (a * s + c) & M64
        L.o["out"][t] = s
    return L.result()


def _sx24(x):
    x &= 0xFFFFFF
    return x - (1 << 24) if x >> 23 else x


@ref("wide_products")
def ref_wide_products(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, y = L["a"][t], L["b"][t]
        ux, uy = u32(x), u32(y)
        p = x * y
        L.o["hi_s"][t] = p >> 32
        L.o["hi_u"][t] = (ux * uy) >> 32
        L.o["wide_s"][t] = p
        L.o["wide_u"][t] = ux * uy
        L.o["m24"][t] = s32(_sx24(x) * _sx24(y)) ^ s32((ux & 0xFFFFFF) * (uy & 0xFFFFFF))
        hi_s = (p * (y * 1048576)) >> 64                  # signed 128-bit product, high half
        hi_u = (u64(p) * 0x9E3779B97F4A7C15) >> 64
        L.o["hi64"][t] = u64(hi_s + hi_u)
    return L.result()


@ref("divrem_var32")
def ref_divrem_var32(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, y = L["a"][t], L["b"][t]
        assert y != 0 and not (x == -(2**31) and y == -1)
        L.o["q"][t], L.o["r"][t] = cdiv(x, y), crem(x, y)
        L.o["uq"][t], L.o["ur"][t] = u32(x) // u32(y), u32(x) % u32(y)
    return L.result()


@ref("divrem_i64")
def ref_divrem_i64(case):
    L = Launch(case)
    for t in range(min(L["n"], L.nthreads)):
        x, y = L["a"][t], L["b"][t]
        assert y != 0 and not (x == -(2**63) and y == -1)
        L.o["q"][t], L.o["r"][t] = cdiv(x, y), crem(x, y)
        L.o["uq"][t], L.o["ur"][t] = u64(x) // u64(y), u64(x) % u64(y)
    return L.result()


@ref("div_by_consts")
def ref_div_by_consts(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x = L["in"][t]
        u = u32(x)
        L.o["out"][8 * t: 8 * t + 8] = [cdiv(x, 7), crem(x, 7), cdiv(x, -3), cdiv(x, 10) + crem(x, 10),
                                        cdiv(x, 16) - crem(x, 8), u // 1000, u % 1000, u // 3 + u % 6]
    return L.result()


@ref("digit_reverse")
def ref_digit_reverse(case):
    L = Launch(case)
    for t in range(min(L["n"], L.nthreads)):
        digits = str(L["in"][t])
        L.o["rev"][t] = int(digits[::-1])
        L.o["info"][t] = sum(int(d) for d in digits) * 100 + len(digits)
    return L.result()


@ref("local_itoa")
def ref_local_itoa(case):
    L = Launch(case)
    for t in range(L.nthreads):
        digits = str(L["in"][t])
        packed = digits.encode().ljust(12, b"\0")
        words = [int.from_bytes(packed[4 * k:4 * k + 4], "little") for k in range(3)]
        hist = 0
        for d in range(10):
            hist = (hist * 3 + digits.count(str(d))) % 2 ** 32
        L.o["out"][5 * t:5 * t + 5] = words + [len(digits), hist]
    return L.result()


@ref("isqrt_u32")
def ref_isqrt(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x = L["in"][t]
        r = math.isqrt(x)
        L.o["root"][t], L.o["rem"][t] = r, x - r * r
    return L.result()


@ref("modpow_u32")
def ref_modpow(case):
    L = Launch(case)
    for t in range(L.nthreads):
        L.o["out"][t] = pow(L["base"][t], L["exps"][t], L["mods"][t])
    return L.result()


@ref("mod_inverse")
def ref_mod_inverse(case):
    L = Launch(case)
    for t in range(min(L["n"], L.nthreads)):
        a, m = L["a"][t], L["m"][t]
        old_r, r, old_s, s = a, m, 1, 0
        while r != 0:
            q = cdiv(old_r, r)
            assert abs(q * s) < 2**31 and abs(old_s - q * s) < 2**31   # no signed overflow in the kernel
            old_r, r = r, old_r - q * r
            old_s, s = s, old_s - q * s
        L.o["gcd"][t] = old_r
        if old_r == 1:
            inv = crem(crem(old_s, m) + m, m)
            assert (a * inv - 1) % m == 0
            L.o["inv"][t] = inv
        else:
            L.o["inv"][t] = -1
    return L.result()


@ref("syracuse_u64")
def ref_syracuse(case):
    L = Launch(case)
    for t in range(L.nthreads):
        n = L["start"][t]
        peak, k = n, 0
        while n != 1 and k < L["cap"]:
            n = u64(3 * n + 1) if n & 1 else n >> 1
            peak = max(peak, n)
            k += 1
        L.o["steps"][t], L.o["peak"][t] = k, peak
    return L.result()


@ref("prime_trial")
def ref_prime_trial(case):
    L = Launch(case)
    for t in range(L.nthreads):
        n = L["in"][t]
        if n < 2:
            f, p = n, 0
        else:
            f = next((d for d in range(2, math.isqrt(n) + 1) if n % d == 0), n)
            p = int(f == n)
        L.o["factor"][t], L.o["is_prime"][t] = f, p
    return L.result()


# ---------------------------------------------------------------------------------------------
# bit operations
# ---------------------------------------------------------------------------------------------
@ref("bit_counts64")
def ref_bit_counts64(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x = L["in"][t]
        L.o["counts"][4 * t: 4 * t + 4] = [popc(x), clz(x, 64), ffs(x), popc((x ^ (x >> 32)) & M32)]
        L.o["rev"][t] = brev(x, 64)
    return L.result()


@ref("lowbit_highbit")
def ref_lowbit_highbit(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x = L["in"][t]
        first = ffs(x)
        high = x.bit_length() - 1                  # -1 for 0
        ceil_log = (x - 1).bit_length() if x > 1 else 0
        pow2 = int(x != 0 and popc(x) == 1)
        L.o["low"][t] = x & -x
        L.o["info"][t] = (first << 24) | ((high & 0xFF) << 16) | (ceil_log << 8) | pow2
        L.o["next_pow2"][t] = (1 << ceil_log) if ceil_log < 32 else 0
    return L.result()


def byte_perm(x, y, s):
    """CUDA __byte_perm: result byte i = byte (s >> 4i) & 7 of the 8 bytes y:x (x is bytes 0-3)."""
    src = struct.pack("<II", x & M32, y & M32)
    return sum(src[(s >> (4 * i)) & 7] << (8 * i) for i in range(4))


@ref("byte_shuffle")
def ref_byte_shuffle(case):
    L = Launch(case)
    for t in range(L.nthreads):
        a, b = L["x"][t], L["y"][t]
        L.o["perm"][t] = byte_perm(a, b, L["sel"][t])
        L.o["swapped"][t] = int.from_bytes(struct.pack("<I", a), "big")
        r = t & 3
        L.o["rot"][t] = ((a >> (8 * r)) | (a << (32 - 8 * r))) & M32 if r else a
    return L.result()


@ref("funnel_shifts")
def ref_funnel_shifts(case):
    L = Launch(case)
    for t in range(L.nthreads):
        lo, hi, s = L["lo"][t], L["hi"][t], L["sh"][t]
        v = (hi << 32) | lo
        w, c = s & 31, min(s, 32)
        r = s & 63
        rot = ((v << r) | (v >> (64 - r))) & M64 if r else v
        L.o["out"][6 * t: 6 * t + 6] = [((v << w) >> 32) & M32, (v >> w) & M32, ((v << c) >> 32) & M32,
                                        (v >> c) & M32, rot & M32, rot >> 32]
    return L.result()


@ref("bitfield_pack")
def ref_bitfield_pack(case):
    L = Launch(case)
    for t in range(L.nthreads):
        w, p, l, v = L["words"][t], L["pos"][t], L["len"][t], L["vals"][t]
        assert 1 <= l <= 31 and 0 <= p and p + l <= 32
        field = (w >> p) & ((1 << l) - 1)
        L.o["ufield"][t] = field
        L.o["sfield"][t] = field - (1 << l) if field >> (l - 1) else field
        mask = ((1 << l) - 1) << p
        L.o["inserted"][t] = (w & ~mask & M32) | ((v << p) & mask)
    return L.result()


@ref("gray_parity")
def ref_gray_parity(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x = L["in"][t]
        g = x ^ (x >> 1)
        d, k = 0, g
        while k:               # inverse Gray code: xor of all right shifts
            d ^= k
            k >>= 1
        assert d == x
        L.o["gray"][t], L.o["decoded"][t] = g, d
        L.o["parity"][t] = 7 * (popc(x) & 1)
    return L.result()


def _interleave(x, y):
    return sum((((x >> i) & 1) << (2 * i)) | (((y >> i) & 1) << (2 * i + 1)) for i in range(16))


@ref("morton2d")
def ref_morton2d(case):
    L = Launch(case)
    width = L.grid[0] * L.block[0]
    for y in range(L.grid[1] * L.block[1]):
        for x in range(width):
            X, Y = (x + L["ox"]) & 0xFFFF, (y + L["oy"]) & 0xFFFF
            L.o["codes"][y * width + x] = _interleave(X, Y)
            L.o["back"][y * width + x] = (Y << 16) | X
    return L.result()


@ref("crc32_bytes")
def ref_crc32(case):
    L = Launch(case)
    data = unpack_bytes(L["data"])
    for s, (b, e) in enumerate(_segments(L)):
        L.o["crc"][s] = zlib.crc32(data[b:e])
    return L.result()


@ref("bitrev_permute")
def ref_bitrev_permute(case):
    L = Launch(case)
    logn = L["logn"]
    for i in range(L.nthreads):
        j = brev(i, logn)
        L.o["out"][j] = L["in"][i] * 2 + (j & 1)
    return L.result()


@ref("var_shifts")
def ref_var_shifts(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, s, s6 = L["in"][t], L["amount"][t] & 31, L["amount"][t] & 63
        u = u32(x)
        rot = ((u << s) | (u >> (32 - s))) & M32 if s else u
        L.o["out32"][4 * t: 4 * t + 4] = [x >> s, u >> s, (u << s) & M32, rot]
        w = x * 0x10001
        L.o["out64"][3 * t: 3 * t + 3] = [w >> s6, u64(w) >> s6, (u64(w) << s6) & M64]
    return L.result()


@ref("minmax_clamp")
def ref_minmax_clamp(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, y, z = L["a"][t], L["b"][t], L["c"][t]
        ux, uy = u32(x), u32(y)
        assert x != -(2**31)
        L.o["out"][8 * t: 8 * t + 8] = [min(x, y), max(x, y), min(ux, uy), max(ux, uy), abs(x),
                                        u32(abs(x - y) + (u32(z) & 0xFFFF)), u32(abs(ux - uy) + 7),
                                        max(-1000, min(1000, x))]
        X, Y = x * 3000000, y * -5000000
        L.o["out64"][2 * t: 2 * t + 2] = [min(X, Y) + abs(X - Y), max(u64(X), u64(Y))]
    return L.result()


# ---------------------------------------------------------------------------------------------
# control flow
# ---------------------------------------------------------------------------------------------
@ref("bytecode_vm")
def ref_bytecode_vm(case):
    L = Launch(case)
    prog = L["prog"]
    for t in range(L.nthreads):
        pc, acc, b, cnt, k = L["entry"][t], L["input"][t], 0, 0, 0
        running = True
        while running and k < 200:
            w = prog[pc]
            op, arg = w & 0xFF, w >> 8          # Python >> on a negative int is arithmetic
            pc += 1
            k += 1
            if op == 0:
                running = False
            elif op == 1:
                acc = s32(acc + arg)
            elif op == 2:
                acc = s32(acc * arg)
            elif op == 3:
                acc ^= arg
            elif op == 4:
                acc = s32(u32(acc) >> (arg & 31))
            elif op == 5:
                cnt = s32(cnt - 1)
                if cnt != 0:
                    pc = arg
            elif op == 6:
                cnt = arg
            elif op == 7:
                acc, b = b, acc
            elif op == 8:
                acc = s32(acc + b)
            elif op == 9:
                if acc < 0:
                    pc = arg
            else:
                running = False
        L.o["result"][t] = acc ^ b
        L.o["steps"][t] = k * 1000 + pc
    return L.result()


@ref("pair_search")
def ref_pair_search(case):
    L = Launch(case)
    a, b = L["a"][: L["na"]], L["b"][: L["nb"]]
    for t in range(L.nthreads):
        want = L["target"][t]
        fi = fj = -1
        tried = 0
        for i, ai in enumerate(a):
            if ai < 0:
                continue
            for j, bj in enumerate(b):
                tried += 1
                if ai + bj == want:
                    fi, fj = i, j
                    break
                if ai + bj > want + 100:
                    break
            if fi >= 0:
                break
        L.o["found"][t] = fi * 1000000 + fj * 1000 + tried
    return L.result()


@ref("lower_bound_search")
def ref_lower_bound(case):
    L = Launch(case)
    arr = L["sorted"][: L["n"]]
    n = len(arr)
    for t in range(L.nthreads):
        key = L["keys"][t]
        if key < arr[0]:
            L.o["pos"][t], L.o["probes"][t] = -1, 0
        elif key > arr[-1]:
            L.o["pos"][t], L.o["probes"][t] = n, 0
        else:
            lo = bisect.bisect_left(arr, key)
            L.o["pos"][t] = lo if arr[lo] == key else lo + 1000
            # probes of a halving search over [0, n): count the midpoints it visits
            lo_, hi_, p = 0, n, 0
            while lo_ < hi_:
                mid = (lo_ + hi_) // 2
                p += 1
                lo_, hi_ = (mid + 1, hi_) if arr[mid] < key else (lo_, mid)
            L.o["probes"][t] = p
    return L.result()


@ref("lane_divergence")
def ref_lane_divergence(case):
    L = Launch(case)
    for t in range(L.nthreads):
        v = L["in"][t]
        if t & 1:
            if v > 0:
                r = v * 3
                r = r - 7 if t & 4 else r ^ 0x55
            else:
                r = -v + (t >> 3)
        elif t & 2:
            r = sum(k * t for k in range(v & 7))
        else:
            r = 500 if crem(v, 5) == 0 else cdiv(v, 5)
        if t & 8:
            r += 10000
        L.o["out"][t] = r * 2 + (v & 1)
    return L.result()


@ref("grid_stride")
def ref_grid_stride(case):
    L = Launch(case)
    stride = L.nthreads
    for i in range(L["n"]):
        t = i % stride
        blk, tid = divmod(t, L.block[0])
        L.o["out"][i] = L["in"][i] * (i & 3) - (blk * 7 + tid)
    for t in range(stride):
        L.o["visits"][t] = len(range(t, L["n"], stride))
    return L.result()


@ref("atoi_segments")
def ref_atoi(case):
    L = Launch(case)
    text = unpack_bytes(L["text"])
    for s, (b, e) in enumerate(_segments(L)):
        k, state, sign, v = b, 0, 1, 0      # 0 blanks, 1 after sign, 2 digits, 3 done
        while k < e and state != 3:
            c = text[k]
            if state == 0:
                if c in b" \t":
                    k += 1
                elif c in b"+-":
                    sign, state, k = (-1 if c == ord("-") else 1), 1, k + 1
                else:
                    state = 1
            elif ord("0") <= c <= ord("9"):
                v, state, k = v * 10 + c - ord("0"), 2, k + 1
            else:
                state = 3
        assert abs(v) < 2**31
        L.o["value"][s] = sign * v
        L.o["used"][s] = (k - b) | (state << 8)
    return L.result()


@ref("word_stats")
def ref_word_stats(case):
    L = Launch(case)
    text = unpack_bytes(L["text"])
    for s, (b, e) in enumerate(_segments(L)):
        words, best, best_at = 0, 0, -1
        k = b
        while k < e:
            if chr(text[k]).isascii() and chr(text[k]).isalpha():
                start = k
                while k < e and chr(text[k]).isascii() and chr(text[k]).isalpha():
                    k += 1
                words += 1
                if k - start > best:
                    best, best_at = k - start, start
            else:
                k += 1
        L.o["stats"][3 * s: 3 * s + 3] = [words, best, best_at]
    return L.result()


@ref("strcmp_pairs")
def ref_strcmp(case):
    L = Launch(case)
    text = unpack_bytes(L["text"])

    def cstr(o):
        return text[o: text.index(b"\0", o)]

    for t in range(L.nthreads):
        p, q = cstr(L["a_off"][t]), cstr(L["b_off"][t])
        L.o["cmp"][t] = (p > q) - (p < q)
        i = 0
        while i < len(p) and i < len(q) and p[i] == q[i]:
            i += 1
        L.o["prefix"][t] = i
    return L.result()


# ---------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------
def _blocks(L, n=None):
    n = n or L.block[0]
    for blk in range(L.nblocks):
        yield blk, blk * n


@ref("shared_reverse")
def ref_shared_reverse(case):
    L = Launch(case)
    n = L.block[0]
    for _, base in _blocks(L):
        sl = L["in"][base: base + n]
        for t in range(n):
            L.o["rev"][base + t] = sl[n - 1 - t]
            L.o["diff"][base + t] = sl[n - 1 - t] - sl[t]
    return L.result()


@ref("dyn_shared_rotate")
def ref_dyn_shared_rotate(case):
    L = Launch(case)
    n, k = L.block[0], L["k"]
    for _, base in _blocks(L):
        sl = L["in"][base: base + n]
        for t in range(n):
            L.o["out"][base + t] = sl[(t + k) % n] + sl[(t - 1) % n] ** 2
    return L.result()


@ref("bitonic_sort")
def ref_bitonic_sort(case):
    L = Launch(case)
    for _, base in _blocks(L, 64):
        L.o["out"][base: base + 64] = sorted(L["in"][base: base + 64])
    return L.result()


@ref("rank_sort")
def ref_rank_sort(case):
    L = Launch(case)
    n = L["n"]
    vals = L["in"][:n]
    order = sorted(range(n), key=lambda i: (vals[i], i))
    for r, i in enumerate(order):
        L.o["out"][r] = vals[i]
        L.o["rank"][i] = r
    return L.result()


@ref("scan_i64")
def ref_scan_i64(case):
    L = Launch(case)
    n = L.block[0]
    for _, base in _blocks(L):
        run = 0
        for t in range(n):
            L.o["excl"][base + t] = run
            run += L["in"][base + t]
            assert -(2**63) <= run < 2**63
            L.o["incl"][base + t] = run
    return L.result()


@ref("conv2d_tile")
def ref_conv2d(case):
    L = Launch(case)
    w, h, img, k3 = L["w"], L["h"], L["img"], L["k3"]
    for y in range(h):
        for x in range(w):
            acc = 0
            for dy in range(3):
                for dx in range(3):
                    yy = min(max(y + dy - 1, 0), h - 1)
                    xx = min(max(x + dx - 1, 0), w - 1)
                    acc += k3[dy * 3 + dx] * img[yy * w + xx]
            L.o["out"][y * w + x] = s32(acc)
    return L.result()


@ref("index_3d")
def ref_index_3d(case):
    L = Launch(case)
    (gx, gy, gz), (bx, by, bz) = L.grid, L.block
    nx, ny, nz = gx * bx, gy * by, gz * bz
    for z in range(nz):
        for y in range(ny):
            for x in range(nx):
                lin = (z * ny + y) * nx + x
                block = ((z // bz) * gy + y // by) * gx + x // bx
                thread = ((z % bz) * by + y % by) * bx + x % bx
                L.o["ids"][lin] = block * 1000 + thread
                L.o["transposed"][(x * ny + y) * nz + z] = lin
    L.o["dims"][:6] = [gx, gy, gz, bx, by, bz]
    return L.result()


@ref("rpn_eval")
def ref_rpn_eval(case):
    L = Launch(case)
    toks = L["tokens"]
    for t in range(L.nthreads):
        stack, max_sp = [], 0
        k = L["start"][t]
        while toks[k] != -6:
            tok = toks[k]
            if tok >= 0:
                stack.append(tok)
            elif tok == -5:
                stack.append(stack[-1])
            else:
                b, a = stack.pop(), stack.pop()
                stack.append({-1: s32(a + b), -2: s32(a - b), -3: s32(a * b)}.get(tok, max(a, b)))
            assert len(stack) <= 16
            max_sp = max(max_sp, len(stack))
            k += 1
        L.o["result"][t] = stack[-1] if stack else 0
        L.o["depth"][t] = max_sp * 100 + len(stack)
    return L.result()


def rc4(key, nbytes):
    S = list(range(256))
    j = 0
    for i in range(256):
        j = (j + S[i] + key[i % len(key)]) % 256
        S[i], S[j] = S[j], S[i]
    i = j = 0
    out = []
    for _ in range(nbytes):
        i = (i + 1) % 256
        j = (j + S[i]) % 256
        S[i], S[j] = S[j], S[i]
        out.append(S[(S[i] + S[j]) % 256])
    return bytes(out)


@ref("rc4_keystream")
def ref_rc4(case):
    L = Launch(case)
    keys = unpack_bytes(L["keys"])
    nw = L["nwords"]
    for t in range(L.nthreads):
        key = keys[16 * t: 16 * t + L["lens"][t]]
        L.o["out"][t * nw: (t + 1) * nw] = pack_bytes(rc4(key, 4 * nw))
    return L.result()


@ref("small_types")
def ref_small_types(case):
    L = Launch(case)
    n = L.nthreads
    b8s, b8u = unpack_bytes(L["s8"]), unpack_bytes(L["u8"])
    h16s, h16u = unpack_bytes(L["s16"]), unpack_bytes(L["u16"])
    o16, o8 = bytearray(unpack_bytes(L.o["out16"])), bytearray(unpack_bytes(L.o["out8"]))
    for t in range(n):
        a, b = s8(b8s[t]), b8u[t]
        c = struct.unpack_from("<h", h16s, 2 * t)[0]
        d = struct.unpack_from("<H", h16u, 2 * t)[0]
        L.o["sums"][2 * t: 2 * t + 2] = [a * 1000 + b, c * 3 + d]
        struct.pack_into("<H", o16, 2 * t, (c * 2 - d) & 0xFFFF)
        o8[t] = (a + b) & 0xFF
    L.o["out16"] = pack_bytes(o16)
    L.o["out8"] = pack_bytes(o8)
    return L.result()


@ref("add128")
def ref_add128(case):
    L = Launch(case)
    M128 = (1 << 128) - 1
    for t in range(L.nthreads):
        A = L["a"][2 * t] | (L["a"][2 * t + 1] << 64)
        B = L["b"][2 * t] | (L["b"][2 * t + 1] << 64)
        for name, v in (("sum", (A + B) & M128), ("diff", (A - B) & M128), ("prod", (A * B) & M128)):
            L.o[name][2 * t: 2 * t + 2] = [v & M64, v >> 64]
    return L.result()


@ref("struct_records")
def ref_struct_records(case):
    L = Launch(case)
    raw = b"".join(struct.pack("<Q", w) for w in L["recs"])
    for t in range(min(L["n"], L.nthreads)):
        rid, dx, kind, bias, tag = struct.unpack_from("<ihBbQ", raw, 16 * t)
        v = rid * kind + dx * bias
        L.o["out"][t] = s64(v ^ s64(tag >> (kind & 63)))
        L.o["small"][t] = dx + bias * 65536
    return L.result()


# ---------------------------------------------------------------------------------------------
# atomics (only order-independent results)
# ---------------------------------------------------------------------------------------------
@ref("atomic_minmax_keys")
def ref_atomic_minmax(case):
    L = Launch(case)
    for t in range(min(L["n"], L.nthreads)):
        k, v = L["keys"][t] & 3, L["vals"][t]
        L.o["mins"][k] = min(L.o["mins"][k], v)
        L.o["maxs"][k] = max(L.o["maxs"][k], v)
        L.o["umins"][k] = min(L.o["umins"][k], u32(v))
        L.o["umaxs"][k] = max(L.o["umaxs"][k], u32(v))
    return L.result()


@ref("bitwise_atomics")
def ref_bitwise_atomics(case):
    L = Launch(case)
    n = L.block[0]
    g = L.o["global_acc"]
    for blk, base in _blocks(L):
        sl = L["in"][base: base + n]
        a, o, x = M32, 0, 0
        for v in sl:
            a, o, x = a & v, o | v, x ^ v
        L.o["per_block"][3 * blk: 3 * blk + 3] = [a, o, x]
        g[0], g[1], g[2] = g[0] & a, g[1] | o, g[2] ^ x
    return L.result()


@ref("exch_claim")
def ref_exch_claim(case):
    L = Launch(case)
    for t in range(L.nthreads):
        L.o["old"][t] = L["slots"][t]
        L.o["slots"][t] = L["vals"][t]
    for blk in range(L.nblocks):
        if L["lock"][blk] == 0:
            L.o["winners"][0] += 1
        L.o["lock"][blk] = 1
    return L.result()


@ref("cas_accumulate")
def ref_cas_accumulate(case):
    L = Launch(case)
    for t in range(L.nthreads):
        L.o["prods"][t & 3] = u32(L.o["prods"][t & 3] * L["factors"][t])
        L.o["maxes"][t & 1] = fmax(L.o["maxes"][t & 1], L["vals"][t])
    return L.result()


@ref("ticket_atomics")
def ref_ticket_atomics(case):
    L = Launch(case)
    n = L.nthreads
    c0 = L["counter"][0]
    L.o["counter"][0] = u32(c0 + n)
    for ticket in range(c0, c0 + n):
        L.o["seen"][ticket >> 5] |= 1 << (ticket & 31)
    L.o["ticket_sum"][0] = u32(L["ticket_sum"][0] + sum(range(c0, c0 + n)))
    w0, w1 = L["wrap"]
    for _ in range(n):
        w0 = 0 if w0 >= 9 else w0 + 1                   # atomicInc(limit 9)
        w1 = 6 if (w1 == 0 or w1 > 6) else w1 - 1       # atomicDec(limit 6)
    L.o["wrap"][:2] = [w0, w1]
    L.o["down"][0] = L["down"][0] - 3 * n
    return L.result()


@ref("atomic_wide")
def ref_atomic_wide(case):
    L = Launch(case)
    vs = L["v64"][: L.nthreads]
    acc = L.o["acc"]
    acc[0] = u64(acc[0] + sum(vs))
    acc[1] = max([acc[1]] + vs)
    acc[2] = min([acc[2]] + vs)
    for j in (0, 1):
        exact = fr(L.o["facc"][j]) + sum(fr(L["vf"][t]) for t in range(L.nthreads) if t & 1 == j)
        v = round_f32(exact)
        assert fr(v) == exact, "float atomics must sum exactly (order-independent)"
        L.o["facc"][j] = v
    sv = [s64(v) for v in vs]
    L.o["mm"][0] = min([L.o["mm"][0]] + sv)
    L.o["mm"][1] = max([L.o["mm"][1]] + sv)
    return L.result()


@ref("shared_histogram")
def ref_shared_histogram(case):
    L = Launch(case)
    text = unpack_bytes(L["text"])[: L["n"]]
    for c in text:
        L.o["hist"][c >> 4] += 1
    return L.result()


# ---------------------------------------------------------------------------------------------
# warp-level: PTX shfl.sync semantics with CUDA's clamp/segment operand for a width
# ---------------------------------------------------------------------------------------------
def shfl(vals, lane, mode, b, width=32):
    """Value lane `lane` gets from shfl.sync.<mode> over the warp's `vals` (32 entries)."""
    seg = (32 - width) & 0x1F                  # c[12:8]: segment mask
    cval = 0 if mode == "up" else 0x1F         # c[4:0]
    maxlane = (lane & seg) | (cval & ~seg & 0x1F)
    minlane = lane & seg
    b &= 0x1F
    if mode == "up":
        j = lane - b
        ok = j >= maxlane
    elif mode == "down":
        j = lane + b
        ok = j <= maxlane
    elif mode == "bfly":
        j = lane ^ b
        ok = j <= maxlane
    else:
        j = minlane | (b & ~seg & 0x1F)
        ok = j <= maxlane
    return vals[j if ok else lane]


def _warps(L):
    n = L.nthreads
    for w0 in range(0, n, 32):
        yield w0, list(range(w0, min(w0 + 32, n)))


@ref("shfl_width_bcast")
def ref_shfl_width_bcast(case):
    L = Launch(case)
    for w0, ts in _warps(L):
        vals = [L["in"][t] for t in ts]
        for lane, t in enumerate(ts):
            s = L["src"][t]
            L.o["out"][4 * t: 4 * t + 4] = [shfl(vals, lane, "idx", s, w) for w in (4, 8, 16, 32)]
    return L.result()


@ref("shfl_updown_width")
def ref_shfl_updown(case):
    L = Launch(case)
    for w0, ts in _warps(L):
        vals = [L["in"][t] for t in ts]
        for lane, t in enumerate(ts):
            d = L["delta"][t] & 31
            L.o["out"][4 * t: 4 * t + 4] = [shfl(vals, lane, "up", 3, 8), shfl(vals, lane, "down", 5, 16),
                                            shfl(vals, lane, "up", d, 32), shfl(vals, lane, "down", d, 4)]
    return L.result()


@ref("shfl_xor_allreduce")
def ref_shfl_xor(case):
    L = Launch(case)
    for w0, ts in _warps(L):
        v = [L["in"][t] for t in ts]
        mx = list(v)
        for m in (4, 2, 1):
            mx = [max(mx[l], shfl(mx, l, "bfly", m, 8)) for l in range(32)]
        sm, w, f = list(v), [x * 1000003 for x in v], [L["fin"][t] for t in ts]
        for m in (16, 8, 4, 2, 1):
            sm = [s32(sm[l] + shfl(sm, l, "bfly", m)) for l in range(32)]
            w = [s64(w[l] + shfl(w, l, "bfly", m)) for l in range(32)]
            f = [fadd(f[l], shfl(f, l, "bfly", m)) for l in range(32)]
        for l, t in enumerate(ts):
            L.o["out"][3 * t: 3 * t + 3] = [mx[l], sm[l], shfl(v, l, "bfly", 9, 8)]
            L.o["out64"][t] = w[l]
            L.o["fout"][t] = f[l]
    return L.result()


@ref("warp_vote_partial")
def ref_warp_vote_partial(case):
    L = Launch(case)
    for w0, ts in _warps(L):
        v = {l: L["in"][t] for l, t in enumerate(ts)}
        act = (1 << len(ts)) - 1
        pos = sum(1 << l for l in v if v[l] > 0)
        low = [l for l in v if l < 16]
        half = sum(1 << l for l in low if v[l] & 1)
        any_h = int(any(v[l] == 7 for l in low))
        all_h = int(all(v[l] != 0 for l in low))
        all_w = int(all(x > -50 for x in v.values()))
        any_w = int(any(x > 90 for x in v.values()))
        for l, t in enumerate(ts):
            L.o["masks"][3 * t: 3 * t + 3] = [act, pos, half if l < 16 else 0]
            ah, lh = (any_h, all_h) if l < 16 else (-1, -1)
            L.o["flags"][t] = ah * 10 + lh + 100 * all_w + 1000 * any_w
    return L.result()


@ref("warp_compact")
def ref_warp_compact(case):
    L = Launch(case)
    for w0, ts in _warps(L):
        kept = [L["in"][t] for t in ts if crem(L["in"][t], 3) != 0]
        L.o["out"][w0: w0 + len(kept)] = kept
        L.o["counts"][w0 // 32] = len(kept)
    return L.result()


@ref("segmented_scan")
def ref_segmented_scan(case):
    L = Launch(case)
    for w0, ts in _warps(L):
        start, run = 0, 0
        for l, t in enumerate(ts):
            if l == 0 or L["head"][t] != 0:
                start, run = l, 0
            run += L["in"][t]
            L.o["out"][t] = s32(run)
            L.o["seg_start"][t] = start
    return L.result()


# ---------------------------------------------------------------------------------------------
# floating point
# ---------------------------------------------------------------------------------------------
@ref("horner_poly")
def ref_horner(case):
    L = Launch(case)
    coef, deg = L["coef"], L["degree"]
    for t in range(min(L["n"], L.nthreads)):
        x = L["x"][t]
        acc = coef[deg]
        for k in range(deg - 1, -1, -1):
            acc = fma(acc, x, coef[k])
        L.o["y"][t] = acc
    return L.result()


@ref("float_round_modes")
def ref_float_round_modes(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, y, z = L["a"][t], L["b"][t], L["c"][t]
        L.o["out"][12 * t: 12 * t + 12] = [
            fadd(x, y, "rz"), fadd(x, y, "ru"), fadd(x, y, "rd"), fsub(x, y, "rz"),
            fmul(x, y, "rz"), fmul(x, y, "ru"), fmul(x, y, "rd"),
            fma(x, y, z, "rz"), fma(x, y, z, "ru"), fma(x, y, z, "rd"),
            fdiv(x, y, "rz"), fdiv(x, y, "ru")]
    return L.result()


@ref("div_sqrt_f32")
def ref_div_sqrt(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, y = L["a"][t], L["b"][t]
        L.o["out"][8 * t: 8 * t + 8] = [
            fdiv(x, y), fsqrt(abs(x)), fsqrt(fmul(y, y)), fmin(x, y), fmax(x, y),
            -abs(x) if y < 0 else abs(x), fdiv(F32(1.0), y), fmul(-x, F32(0.25))]
    return L.result()


I32R, U32R, I64R = (-(2**31), 2**31 - 1), (0, 2**32 - 1), (-(2**63), 2**63 - 1)


@ref("f2i_rounding")
def ref_f2i(case):
    L = Launch(case)
    for t in range(L.nthreads):
        f = L["in"][t]
        L.o["si"][4 * t: 4 * t + 4] = [f2i(f, m, *I32R) for m in ("rn", "rz", "rd", "ru")]
        L.o["ui"][4 * t: 4 * t + 4] = [f2i(f, m, *U32R) for m in ("rn", "rz", "rd", "ru")]
        L.o["sl"][2 * t: 2 * t + 2] = [f2i(f, m, *I64R) for m in ("rn", "rz")]
    return L.result()


@ref("i2f_rounding")
def ref_i2f(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, w = L["in"][t], L["in64"][t]
        L.o["out"][12 * t: 12 * t + 12] = (
            [i2f(x, m) for m in ("rn", "rz", "rd", "ru")] + [i2f(u32(x), m) for m in ("rn", "rz", "rd", "ru")]
            + [i2f(w, "rn"), i2f(w, "rz"), i2f(u64(w), "rd"), i2f(u64(w), "ru")])
    return L.result()


@ref("float_bits")
def ref_float_bits(case):
    L = Launch(case)
    for t in range(L.nthreads):
        f = L["in"][t]
        u = fbits(f)
        e, m = (u >> 23) & 0xFF, u & 0x7FFFFF
        kind = (1 if m else 0) if e == 0 else (3 if e == 255 else 2)
        L.o["info"][3 * t: 3 * t + 3] = [e - 127, m, kind]
        L.o["out"][3 * t: 3 * t + 3] = [bits_f(u + 1), bits_f((u & 0x807FFFFF) | (127 << 23)), bits_f(u ^ 0x80000000)]
    return L.result()


@ref("mandelbrot")
def ref_mandelbrot(case):
    L = Launch(case)
    w = L.grid[0] * L.block[0]
    for py in range(L.grid[1] * L.block[1]):
        for px in range(w):
            cx = fma(i2f(px), L["dx"], L["x0"])
            cy = fma(i2f(py), L["dy"], L["y0"])
            zx = zy = m = F32(0.0)
            k = 0
            while k < L["max_iter"]:
                xx, yy = fmul(zx, zx), fmul(zy, zy)
                m = fadd(xx, yy)
                if m > 4.0:
                    break
                xy = fmul(zx, zy)
                zy = fadd(fadd(xy, xy), cy)
                zx = fadd(fsub(xx, yy), cx)
                k += 1
            L.o["iters"][py * w + px] = k
            L.o["mag"][py * w + px] = m
    return L.result()


@ref("newton_sqrt")
def ref_newton_sqrt(case):
    L = Launch(case)
    for t in range(min(L["n"], L.nthreads)):
        a = L["in"][t]
        x = a if a > 1.0 else F32(1.0)
        k = 0
        while k < 40:
            nx = fmul(F32(0.5), fadd(x, fdiv(a, x)))
            k += 1
            if nx == x:
                break
            x = nx
        L.o["root"][t], L.o["iters"][t] = x, k
        L.o["ulps"][t] = s32(fbits(x) - fbits(fsqrt(a)))
    return L.result()


@ref("float_tree_reduce")
def ref_float_tree_reduce(case):
    L = Launch(case)
    n = L.block[0]
    for blk, base in _blocks(L):
        s = list(L["in"][base: base + n])
        hi, lo = list(s), list(s)
        off = n // 2
        while off > 0:
            for t in range(off):
                s[t] = fadd(s[t], s[t + off])
                hi[t] = fmax(hi[t], hi[t + off])
                lo[t] = fmin(lo[t], lo[t + off])
            off //= 2
        L.o["out"][3 * blk: 3 * blk + 3] = [s[0], hi[0], lo[0]]
    return L.result()


@ref("mat4_transform")
def ref_mat4(case):
    L = Launch(case)
    m = L["m"]
    for t in range(min(L["n"], L.nthreads)):
        px, py, pz, pw = L["pts"][4 * t: 4 * t + 4]
        for i in range(4):
            L.o["out"][4 * t + i] = fma(m[4 * i], px, fma(m[4 * i + 1], py, fma(m[4 * i + 2], pz, fmul(m[4 * i + 3], pw))))
    return L.result()


@ref("activations_f32")
def ref_activations(case):
    L = Launch(case)
    for t in range(L.nthreads):
        v = L["x"][t]
        L.o["out"][6 * t: 6 * t + 6] = [
            fmax(v, F32(0.0)), v if v > 0 else fmul(v, F32(0.125)), fdiv(v, fadd(F32(1.0), abs(v))),
            fmin(fmax(v, F32(-1.0)), F32(1.0)), fma(F32(0.25), fsub(F32(3.0), v), v), -v]
    return L.result()


@ref("matvec_f32")
def ref_matvec(case):
    L = Launch(case)
    rows, cols = L["rows"], L["cols"]
    for r in range(min(rows, L.nthreads)):
        acc = L["b"][r]
        for c in range(cols):
            acc = fma(L["A"][r * cols + c], L["x"][c], acc)
        L.o["y"][r] = acc
    return L.result()


def _integral(f, mode):
    """rintf / truncf / floorf / ceilf: an integral float32 with the sign of f kept on zero."""
    f = F32(f)
    if not np.isfinite(f):
        return f
    x = fr(f)
    r = {"rn": round(x), "rz": math.trunc(x), "rd": math.floor(x), "ru": math.ceil(x)}[mode]
    return round_f32(r, "rn", _sign(f))


@ref("float_rounding_fns")
def ref_float_rounding_fns(case):
    L = Launch(case)
    for t in range(L.nthreads):
        f = L["in"][t]
        assert not np.isnan(f) and not (f == 0 and _sign(f) < 0)
        sat = F32(0.0) if f <= 0 else (F32(1.0) if f >= 1 else f)
        rcp = (F32(0.0) if f > 0 else F32(-0.0)) if np.isinf(f) else fdiv(F32(1.0), f)
        L.o["out"][6 * t: 6 * t + 6] = [_integral(f, m) for m in ("rn", "rz", "rd", "ru")] + [sat, rcp]
        g = L["cls_in"][t]
        L.o["cls"][t] = int(np.isnan(g)) | int(np.isinf(g)) << 1 | int(np.isfinite(g)) << 2 | (fbits(g) >> 31) << 3
    return L.result()


@ref("sad_copysign")
def ref_sad_copysign(case):
    L = Launch(case)
    for t in range(L.nthreads):
        a, b = L["a"][t], L["b"][t]
        L.o["sad"][2 * t: 2 * t + 2] = [u32(abs(a - b) + 1000), u32(abs(u32(a) - u32(b)) + t)]
        L.o["cs"][t] = F32(np.copysign(L["x"][t], L["y"][t]))
    return L.result()


@ref("warp_match_uni")
def ref_warp_match_uni(case):
    L = Launch(case)
    for w0, ts in _warps(L):
        k = [L["keys"][t] for t in ts]
        k64 = [L["keys64"][t] for t in ts]
        rem3 = [crem(x, 3) for x in k]
        full = (1 << len(ts)) - 1
        all_eq = len(set(k)) == 1
        uni = int(len({x > 0 for x in k}) == 1)
        for l, t in enumerate(ts):
            L.o["any_mask"][3 * t + 0] = sum(1 << j for j in range(len(ts)) if k[j] == k[l])
            L.o["any_mask"][3 * t + 1] = sum(1 << j for j in range(len(ts)) if k64[j] == k64[l])
            L.o["any_mask"][3 * t + 2] = sum(1 << j for j in range(20) if rem3[j] == rem3[l]) if l < 20 else 0
            L.o["all_mask"][t] = full if all_eq else 0
            L.o["flags"][t] = int(all_eq) | (uni << 1)
    return L.result()


def bfe(a, pos, length, bits, signed):
    """PTX bfe: extract `length` bits from `pos`, sign- or zero-filled above (pos, len are 0..255)."""
    msb = bits - 1
    pos, length = pos & 0xFF, length & 0xFF
    sbit = 0 if (not signed or length == 0) else (a >> min(pos + length - 1, msb)) & 1
    d = 0
    for i in range(bits):
        bit = (a >> (pos + i)) & 1 if (i < length and pos + i <= msb) else sbit
        d |= bit << i
    return d


def lop3(a, b, c, lut):
    return sum(((lut >> ((((a >> i) & 1) << 2) | (((b >> i) & 1) << 1) | ((c >> i) & 1))) & 1) << i
               for i in range(32))


def testp_bits(f):
    # PTX ISA, testp: "As a special case, positive and negative zero are considered normal
    # numbers." So .normal holds for +-0 and normal numbers, .subnormal only for subnormals.
    u = fbits(f)
    e, m = (u >> 23) & 0xFF, u & 0x7FFFFF
    nan, inf = e == 255 and m != 0, e == 255 and m == 0
    return (int(not nan and not inf) | int(inf) << 1 | int(not nan) << 2 | int(nan) << 3
            | int(0 < e < 255 or (e == 0 and m == 0)) << 4 | int(e == 0 and m != 0) << 5)


@ref("inline_ptx_ops")
def ref_inline_ptx_ops(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, y, p, l = L["a"][t], L["b"][t], L["pos"][t], L["len"][t]
        w = (y << 32) | x
        sx, sy = _sx24(x), _sx24(y)
        x24, y24 = x & 0xFFFFFF, y & 0xFFFFFF
        b64 = bfe(w, p + l, l, 64, True)
        g = L["g"][t]
        sx_ = s32(x)
        v = ~sx_ if sx_ < 0 else sx_
        L.o["out"][16 * t: 16 * t + 16] = [
            bfe(x, p, l, 32, False), bfe(x, p, l, 32, True), b64 & M32, b64 >> 32,
            u32(sx * sy), u32((sx * sy) >> 16), u32((x24 * y24) >> 16), u32(x24 * y24 + (x ^ y)),
            u32(((x * y) >> 32) + p * 0x01010101), lop3(x, y, u32(p * 0x9E3779B9), 0x96),
            lop3(x, y, u32(l * 0x85EBCA6B), 0xE8), int((x & y & 0xF) == 0),
            x if s32(x ^ y) >= 0 else y, x if g >= 0 else y, testp_bits(L["f"][t]),
            M32 if v == 0 else v.bit_length() - 1]
        L.o["red_acc"][t & 3] = u32(L.o["red_acc"][t & 3] + (x & 0xFFFF))
        if t % 5 != 4:
            L.o["after"][t] = t * 3
    return L.result()


@ref("atomics64_shared")
def ref_atomics64_shared(case):
    L = Launch(case)
    n = L.block[0]
    for blk, base in _blocks(L):
        vs = L["in"][base: base + n]
        prod = 1
        for v in vs:
            prod = (prod * (v | 1)) & M64
        L.o["out"][4 * blk: 4 * blk + 4] = [sum(vs) & M64, max(vs), min(vs), prod]
        exact = sum(fr(L["fin"][g]) for g in range(base, base + n))
        assert fr(round_f32(exact)) == exact, "shared float atomics must sum exactly"
        L.o["fout"][blk] = round_f32(exact)
        for g in range(base, base + n):
            L.o["old"][g] = L["slots"][g]
            L.o["slots"][g] = L["in"][g] ^ 0x5555555555555555
    return L.result()


@ref("float_edge_cases")
def ref_float_edge_cases(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, y, z = L["a"][t], L["b"][t], L["c"][t]
        m = fmul(x, F32(1024.0))
        L.o["out"][10 * t: 10 * t + 10] = [
            fma(x, y, z, "rn"), fma(x, y, z, "rz"), fma(x, y, z, "ru"), fma(x, y, z, "rd"), fdiv(x, y),
            fsqrt(abs(z)), fmul(x, y), fadd(x, z), fsub(z, x), bits_f(u32(f2i(m, "rz", *I32R)) & 0x7FFFFF)]
    return L.result()


# ---------------------------------------------------------------------------------------------
# double precision
# ---------------------------------------------------------------------------------------------
I64R, U64R = (-(2**63), 2**63 - 1), (0, 2**64 - 1)


@ref("f32_promote_f64")
def ref_f32_promote_f64(case):
    L = Launch(case)
    for t in range(min(L["n"], L.nthreads)):
        v = L["x"][t]
        d = F64(v)                                           # float -> double is exact
        L.o["out"][6 * t: 6 * t + 6] = [
            d2f(dmul(d, 0.1)),
            fdiv(v, F32(3.0)),                               # nvcc narrows x / 3.0 to a float division
            d2f(dfma(d, 0.5, 0.25)),                         # x * 0.5 + 0.25 contracted into fma.rn.f64
            d2f(dsqrt(dadd(F64(fmul(v, v)), 2.0))),          # v * v is a float product
            fmul(v, F32(0.5)),
            d2f(dsub(d, 0.3) if d > 0.3 else dadd(d, 1e-9))]
        L.o["wide"][2 * t: 2 * t + 2] = [dmul(d, 0.1), dfma(F64(t), 0.25, d)]
    return L.result()


@ref("f64_arith")
def ref_f64_arith(case):
    L = Launch(case)
    for t in range(min(L["n"], L.nthreads)):
        x, y, z = L["a"][t], L["b"][t], L["c"][t]
        L.o["out"][12 * t: 12 * t + 12] = [
            dadd(x, y), dsub(x, y), dmul(x, y), dfma(x, y, z), ddiv(x, y), dsqrt(abs(x)), ddiv(1.0, y),
            dmin(x, y), dmax(x, z), -abs(z), F64(math.copysign(float(x), float(y))),
            dfma(x, x, -dmul(x, x)) if np.isfinite(dmul(x, x)) else -dmul(x, x)]
    return L.result()


@ref("f64_round_modes")
def ref_f64_round_modes(case):
    L = Launch(case)
    for t in range(L.nthreads):
        x, y, z = L["a"][t], L["b"][t], L["c"][t]
        L.o["out"][18 * t: 18 * t + 18] = [
            dadd(x, y, "rz"), dadd(x, y, "ru"), dadd(x, y, "rd"), dsub(x, y, "rz"), dsub(x, y, "ru"),
            dmul(x, y, "rz"), dmul(x, y, "ru"), dmul(x, y, "rd"),
            dfma(x, y, z, "rz"), dfma(x, y, z, "ru"), dfma(x, y, z, "rd"),
            ddiv(x, y, "rz"), ddiv(x, y, "ru"), ddiv(x, y, "rd"), ddiv(1.0, y, "rd"),
            dsqrt(abs(x), "rz"), dsqrt(abs(x), "ru"), dsqrt(abs(z), "rd")]
    return L.result()


@ref("f64_convert")
def ref_f64_convert(case):
    L = Launch(case)
    modes = ("rn", "rz", "rd", "ru")
    for t in range(L.nthreads):
        x, k = L["in"][t], L["ints"][t]
        L.o["si"][4 * t: 4 * t + 4] = [d2i(x, m, *I32R) for m in modes]
        L.o["ui"][4 * t: 4 * t + 4] = [d2i(x, m, *U32R) for m in modes]
        L.o["sl"][4 * t: 4 * t + 4] = [d2i(x, m, *I64R) for m in modes]
        L.o["ul"][2 * t: 2 * t + 2] = [d2i(x, "rn", *U64R), d2i(x, "rd", *U64R)]
        L.o["f"][4 * t: 4 * t + 4] = [d2f(x, m) for m in modes]
        L.o["d"][8 * t: 8 * t + 8] = [i2d(k, m) for m in modes] + [i2d(u64(k), "rn"), i2d(u64(k), "ru"),
                                                                   i2d(s32(k)), F64(d2f(x))]
        L.o["r"][4 * t: 4 * t + 4] = [dround_integral(x, m) for m in modes]
    return L.result()


@ref("f64_atomic_add")
def ref_f64_atomic_add(case):
    L = Launch(case)
    exact = lambda vals: sum((fr64(v) for v in vals), Fraction(0))   # noqa: E731
    v = L["v"]
    n = L.bsize
    acc = [fr64(a) for a in L["acc"]]
    acc[0] += exact(v)
    for t in range(L.nthreads):
        acc[1 + t % 3] += fr64(dmul(v[t], L["scale"]))
    for blk in range(L.nblocks):
        for j in range(2):
            part = exact(v[blk * n + i] for i in range(j, n, 2))
            assert fr64(round_f64(part)) == part, "shared sums must be exact"
            L.o["per_block"][2 * blk + j] = round_f64(part)
            acc[4] += part
    for i, q in enumerate(acc):
        assert fr64(round_f64(q)) == q, "the atomic sums must be exact (order-independent)"
        L.o["acc"][i] = round_f64(q)
    return L.result()


@ref("f64_reduce")
def ref_f64_reduce(case):
    L = Launch(case)
    vals, w, n = L["in"], L["w"], L.bsize
    for blk in range(L.nblocks):
        s = [F64(v) for v in vals[blk * n:(blk + 1) * n]]
        mx, mn = list(s), list(s)
        step = n // 2
        while step:
            for i in range(step):
                s[i] = dadd(s[i], s[i + step])
                mx[i] = dmax(mx[i], mx[i + step])
                mn[i] = dmin(mn[i], mn[i + step])
            step //= 2
        L.o["out"][3 * blk: 3 * blk + 3] = [s[0], mx[0], mn[0]]
    for base in range(0, L.nthreads, 32):
        b = [F64(v) for v in vals[base:base + 32]]
        for m in (16, 8, 4, 2, 1):
            b = [dadd(b[l], b[l ^ m]) for l in range(32)]
        L.o["out"][6 + base: 6 + base + 32] = b
    for g in range(L.nthreads):
        dot = F64(0.0)
        for i in range(L["len"]):
            dot = dfma(vals[(g + i) % 128], w[i], dot)
        L.o["dots"][g] = dot
    return L.result()


# ---------------------------------------------------------------------------------------------
# NaN rules (bit patterns), written out from their sources (see gpu_layers/interp/fp64.py):
#   f32 arithmetic with a NaN operand or an invalid operation: 0x7FFFFFFF (CUDA Programming Guide,
#     Floating-Point Standard); min/max: the number, 0x7FFFFFFF for two NaNs (PTX ISA min/max).
#   f64 arithmetic (PTX ISA: NaN payloads are supported for double precision; envytools' hardware
#     tests of DADD/DMUL/DFMA): a NaN operand comes out quieted (bit 51 set), sign and payload kept;
#     two NaN operands: add/sub/mul/div take b's, fma(a, b, c) takes b's, then c's, then a's;
#     invalid operations give 0xFFF8000000000000; min/max of two NaNs: b's, quieted.
#   f32 <-> f64 conversion of a NaN: sign kept, payload shifted, quiet bit set.
#   NaN -> integer (PTX ISA cvt): 0 from f32 to <= 32 bits, else 1 << (width - 1).
# ---------------------------------------------------------------------------------------------
F32_NAN = 0x7FFFFFFF
F64_INVALID = 0xFFF8000000000000


def _isnan32(u):
    return (u & 0x7FFFFFFF) > 0x7F800000


def _isnan64(u):
    return (u & (M64 >> 1)) > 0x7FF0000000000000


def _f32_op(fn, *xs):
    """f32 result bits: 0x7FFFFFFF when any operand is NaN or the result is a NaN."""
    if any(_isnan32(u) for u in xs):
        return F32_NAN
    with np.errstate(all="ignore"):
        r = fn(*[bits_f(u) for u in xs])
    return F32_NAN if np.isnan(r) else fbits(r)


def _f64_op(fn, *xs, order=None):
    """f64 result bits: the first NaN operand in `order` (operand indices), quieted; otherwise the
    invalid-operation NaN when the exact result is undefined."""
    for i in (order if order is not None else range(len(xs))):
        if _isnan64(xs[i]):
            return xs[i] | (1 << 51)
    with np.errstate(all="ignore"):
        r = fn(*[bits_d(u) for u in xs])
    return F64_INVALID if np.isnan(r) else dbits(r)


def _f32_minmax(x, y, pick):
    if _isnan32(x) and _isnan32(y):
        return F32_NAN
    if _isnan32(x):
        return y
    if _isnan32(y):
        return x
    return fbits(pick(bits_f(x), bits_f(y)))


def _f64_minmax(a, b, pick):
    if _isnan64(a) and _isnan64(b):
        return b | (1 << 51)
    if _isnan64(a):
        return b
    if _isnan64(b):
        return a
    return dbits(pick(bits_d(a), bits_d(b)))


def _d2f_bits(a, mode):
    if _isnan64(a):
        return ((a >> 32) & 0x80000000) | 0x7FC00000 | ((a & ((1 << 52) - 1)) >> 29)
    return fbits(d2f(bits_d(a), mode))


def _f2d_bits(x):
    if _isnan32(x):
        return ((x >> 31) << 63) | 0x7FF8000000000000 | ((x & 0x7FFFFF) << 29)
    return dbits(F64(bits_f(x)))


def _fsqrt_any(x):
    return F32(np.sqrt(x)) if x >= 0 else F32(np.nan)


def _dsqrt_any(a):
    return dsqrt(a) if a >= 0 else F64(np.nan)


def _ddiv_any(a, b):
    if (a == 0 and b == 0) or (np.isinf(a) and np.isinf(b)):
        return F64(np.nan)
    return ddiv(a, b)


def _dfma_any(a, b, c):
    p_inf = np.isinf(a) or np.isinf(b)
    if p_inf and (a == 0 or b == 0):
        return F64(np.nan)
    if p_inf:
        sign = _sign64(a) * _sign64(b)
        if np.isinf(c) and _sign64(c) != sign:
            return F64(np.nan)
        return F64(sign * math.inf)
    if np.isinf(c):
        return c
    return dfma(a, b, c)


def _dadd_any(a, b, mode="rn"):
    if np.isinf(a) and np.isinf(b) and _sign64(a) != _sign64(b):
        return F64(np.nan)
    return dadd(a, b, mode)


def _dmul_any(a, b):
    if (np.isinf(a) or np.isinf(b)) and (a == 0 or b == 0):
        return F64(np.nan)
    return dmul(a, b)


@ref("nan_results")
def ref_nan_results(case):
    L = Launch(case)
    fb, db = L["fbits"], L["dbits"]
    for t in range(L.nthreads):
        x, y = u32(fb[2 * t]), u32(fb[2 * t + 1])
        a, b = u64(db[2 * t]), u64(db[2 * t + 1])
        one64, two64 = dbits(1.0), dbits(2.0)
        L.o["fout"][10 * t: 10 * t + 10] = [
            _f32_op(fadd, x, y), _f32_op(fmul, x, y), _f32_op(lambda p, q: _f32_fma_any(p, q, F32(1.0)), x, y),
            _f32_op(_f32_div_any, x, y), _f32_op(_fsqrt_any, x),
            _f32_minmax(x, y, lambda p, q: p if (p < q or (p == q and _sign(p) < 0)) else q),
            _f32_minmax(x, y, lambda p, q: p if (p > q or (p == q and _sign(q) < 0)) else q),
            _d2f_bits(a, "rn"), _d2f_bits(b, "rz"), _f32_op(lambda p: _f32_sub_any(p, p), x)]
        L.o["dout"][12 * t: 12 * t + 12] = [
            _f64_op(_dadd_any, a, b, order=(1, 0)),
            _f64_op(lambda p, q: _dadd_any(p, -q), a, b, order=(1, 0)),
            _f64_op(_dmul_any, a, b, order=(1, 0)),
            _f64_op(_dfma_any, a, b, one64, order=(1, 2, 0)),
            _f64_op(_dfma_any, two64, a, b, order=(1, 2, 0)),
            _f64_op(_ddiv_any, a, b, order=(1, 0)),
            _f64_op(_dsqrt_any, a),
            _f64_minmax(a, b, dmin), _f64_minmax(a, b, dmax),
            _f2d_bits(x),
            _f64_op(lambda p, q: _dadd_any(p, q, "ru"), a, one64, order=(1, 0)),
            _f64_op(lambda p: _dadd_any(p, -p), a)]
        L.o["iout"][4 * t: 4 * t + 4] = [
            d2i(bits_d(a), "rz", *I32R), d2i(bits_d(b), "rn", *I64R), f2i(bits_f(x), "rn", *I32R),
            f2i(bits_f(y), "rz", *I64R)]
    return L.result()


def _f32_fma_any(a, b, c):
    if (np.isinf(a) or np.isinf(b)) and (a == 0 or b == 0):
        return F32(np.nan)
    if np.isinf(a) or np.isinf(b):
        s = F32(a) * F32(b)
        return F32(np.nan) if np.isinf(c) and np.sign(c) != np.sign(s) else s
    if np.isinf(c):
        return F32(c)
    return fma(a, b, c)


def _f32_div_any(a, b):
    if (a == 0 and b == 0) or (np.isinf(a) and np.isinf(b)):
        return F32(np.nan)
    if b == 0 or np.isinf(a) or np.isinf(b):
        with np.errstate(all="ignore"):
            return F32(a) / F32(b)
    return fdiv(a, b)


def _f32_sub_any(a, b):
    if np.isinf(a) and np.isinf(b) and np.sign(a) == np.sign(b):
        return F32(np.nan)
    return fsub(a, b)


# ---------------------------------------------------------------------------------------------
# independent thread scheduling and undefined values
# ---------------------------------------------------------------------------------------------
@ref("spin_lock_cas", "spin_lock_outside")
def ref_spin_locks(case):
    # every thread of every block runs the critical section once: the total is order-free and
    # each count 0 .. threads-1 is seen exactly once
    L = Launch(case)
    n = L.nthreads
    L.o["total"][:2] = [s32(L.nblocks * sum(3 * t + 1 for t in range(L.bsize))), n]
    L.o["seen"][:n] = [1] * n
    return L.result()


@ref("ticket_lock")
def ref_ticket_lock(case):
    L = Launch(case)
    n = L.nthreads
    L.o["lock"][:2] = [n, n]                       # tickets handed out, tickets served
    L.o["total"][:2] = [sum(5 * t + 2 for t in range(n)), n]
    L.o["seen"][:n] = [c + 1 for c in range(n)]    # served in ticket order
    return L.result()


@ref("flag_chain")
def ref_flag_chain(case):
    L = Launch(case)
    vals, v = [], 0
    for d in L["data"]:
        v = s32(v * 3 + d)
        vals.append(v)
    L.o["out"] = [s32(vals[t // 32] + t % 32) for t in range(L.bsize)]
    return L.result()


@ref("last_positive", "last_positive_short")
def ref_last_positive(case):
    L = Launch(case)
    x, n = L["x"], L["n"]
    for t in range(32):
        pos = [x[j] for j in range(t, n, 7) if x[j] > 0]
        L.o["out"][t] = pos[-1] if pos else -1
    return L.result()


@ref("first_match")
def ref_first_match(case):
    L = Launch(case)
    x, n, key = L["x"], L["n"], L["key"]
    L.o["out"] = [next((j for j in range(n) if x[j] == key + t), -1) for t in range(32)]
    return L.result()


@ref("prev_value")
def ref_prev_value(case):
    L = Launch(case)
    x, n = L["x"], L["n"]
    for t in range(32):
        v = [x[(j + t) % n] for j in range(n)]
        L.o["out"][t] = s32(sum(v[j] * v[j - 1] for j in range(1, n)))
    return L.result()


@ref("min_index")
def ref_min_index(case):
    L = Launch(case)
    x, n = L["x"], L["n"]
    for t in range(32):
        cand = list(range(t, n, 3))
        L.o["out"][t] = min(cand, key=lambda j: (float(x[j]), j)) if cand else -1
    return L.result()
