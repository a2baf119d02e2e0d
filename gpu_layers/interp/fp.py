"""IEEE binary32 arithmetic on raw bit patterns, exactly as an NVIDIA GPU does it (no ftz).

Values are carried as Python ints holding the 32 IEEE bits. Arithmetic goes through Python floats
(binary64): for +, -, *, / and sqrt a binary64 result rounded once more to binary32 is the
correctly rounded binary32 result, because 53 >= 2*24 + 2 (double rounding is innocuous).
`fma` is exact: the product of two binary32 values is exact in binary64, the sum is computed
with round-to-odd (TwoSum error term), and round-to-odd at 53 bits followed by round-to-nearest
at 24 bits is the correctly rounded fused result.

NaN results are the canonical NaN 0x7FFFFFFF (what the GPU produces for every arithmetic NaN).
min/max return the non-NaN operand when exactly one is NaN, canonical NaN when both are, and
order -0.0 below +0.0. abs/neg only touch the sign bit.
"""
from __future__ import annotations

import math
import struct

CANON_NAN = 0x7FFFFFFF
INF = 0x7F800000
NEG_INF = 0xFF800000
SIGN = 0x80000000

_f = struct.Struct("<f")
_I = struct.Struct("<I")
_d = struct.Struct("<d")
_Q = struct.Struct("<Q")


def b2f(x: int) -> float:
    """binary32 bits -> Python float (exact)."""
    return _f.unpack(_I.pack(x))[0]


def f2b(v: float) -> int:
    """Python float -> binary32 bits, rounding to nearest even; NaN -> canonical NaN."""
    if v != v:
        return CANON_NAN
    try:
        return _I.unpack(_f.pack(v))[0]
    except OverflowError:
        return INF if v > 0 else NEG_INF


def is_nan(x: int) -> bool:
    return (x & 0x7FFFFFFF) > INF


def add(x, y):
    return f2b(b2f(x) + b2f(y))


def sub(x, y):
    return f2b(b2f(x) - b2f(y))


def mul(x, y):
    return f2b(b2f(x) * b2f(y))


def div(x, y):
    a, b = b2f(x), b2f(y)
    if b == 0.0:
        if a != a or a == 0.0:
            return CANON_NAN
        neg = (x ^ y) & SIGN
        return NEG_INF if neg else INF
    return f2b(a / b)


def rcp(x):
    return div(0x3F800000, x)


def sqrt(x):
    a = b2f(x)
    if a != a or a < 0.0:
        return CANON_NAN
    if a == 0.0:
        return x      # sqrt(+-0) = +-0
    return f2b(math.sqrt(a))


def fma(x, y, z):
    """Correctly rounded a*b+c (one rounding), via exact product and round-to-odd sum."""
    a, b, c = b2f(x), b2f(y), b2f(z)
    p = a * b                     # exact: 24x24-bit significands, exponent well inside binary64
    s = p + c
    if not (math.isfinite(p) and math.isfinite(c)) or s != s:
        return f2b(s)
    if s == 0.0 or not math.isfinite(s):
        return f2b(s)
    bb = s - p
    err = (p - (s - bb)) + (c - bb)   # TwoSum: p + c == s + err exactly
    if err != 0.0 and (_Q.unpack(_d.pack(s))[0] & 1) == 0:
        s = math.nextafter(s, math.inf if err > 0 else -math.inf)   # round to odd
    return f2b(s)


def fmin(x, y):
    if is_nan(x):
        return CANON_NAN if is_nan(y) else y
    if is_nan(y):
        return x
    a, b = b2f(x), b2f(y)
    if a == b:
        return x if x & SIGN else y     # -0 < +0
    return x if a < b else y


def fmax(x, y):
    if is_nan(x):
        return CANON_NAN if is_nan(y) else y
    if is_nan(y):
        return x
    a, b = b2f(x), b2f(y)
    if a == b:
        return y if x & SIGN else x
    return x if a > b else y


def ftz(x):
    """Flush a subnormal to sign-preserving zero."""
    return x & SIGN if (x & INF) == 0 else x


def atom_add(x, y):
    """atom/red .add.f32: round to nearest even, subnormal inputs and results flushed (PTX ISA)."""
    return ftz(add(ftz(x), ftz(y)))


# ---- conversions ---------------------------------------------------------------------------

def int_to_f32(v: int, mode: str) -> int:
    """Exact integer -> binary32 bits with rounding mode rn/rz/rm/rp."""
    if v == 0:
        return 0
    neg = v < 0
    a = -v if neg else v
    n = a.bit_length()
    if n > 24:
        shift = n - 24
        q = a >> shift
        rem = a & ((1 << shift) - 1)
        if rem:
            half = 1 << (shift - 1)
            if mode == "rn":
                up = rem > half or (rem == half and (q & 1))
            elif mode == "rz":
                up = False
            elif mode == "rm":
                up = neg
            else:  # rp
                up = not neg
            if up:
                q += 1
        a = q << shift
    r = f2b(float(a))          # exact: a has at most 24 significant bits
    return r | SIGN if neg else r


def f32_to_int(x: int, mode: str, lo: int, hi: int) -> int:
    """binary32 bits -> integer rounded by rni/rzi/rmi/rpi, saturated to [lo, hi]; NaN -> 0 for a
    destination of up to 32 bits, 1 << 63 (MININT for .s64) for a 64-bit one (PTX ISA cvt, Integer
    Notes; seen on an A100: float32 NaN -> int64 is INT64_MIN, -> int32 is 0)."""
    f = b2f(x)
    if f != f:
        if hi > 0xFFFFFFFF:
            return lo if lo < 0 else (hi + 1) >> 1
        return 0
    if f == math.inf:
        return hi
    if f == -math.inf:
        return lo
    if mode == "rni":
        v = round(f)              # Python rounds floats half to even, exactly
    elif mode == "rzi":
        v = math.trunc(f)
    elif mode == "rmi":
        v = math.floor(f)
    else:
        v = math.ceil(f)
    return lo if v < lo else hi if v > hi else v


def f32_round_integral(x: int, mode: str) -> int:
    """cvt.rni/rzi/rmi/rpi.f32.f32: round to an integral value, keeping the sign of zero."""
    if is_nan(x):
        return CANON_NAN
    f = b2f(x)
    if math.isinf(f):
        return x
    v = f32_to_int(x, mode, -(1 << 200), 1 << 200)
    r = f2b(float(v))
    if v == 0:
        r = x & SIGN
    return r


def sat01(x: int) -> int:
    """Clamp to [0.0, 1.0]; NaN -> +0.0 (the .sat rule)."""
    if is_nan(x):
        return 0
    f = b2f(x)
    if f <= 0.0:
        return 0
    if f >= 1.0:
        return 0x3F800000
    return x


# ---- directed rounding (.rz .rm .rp): exact rational arithmetic, rounded once -------------

FLT_MAX = 0x7F7FFFFF


def round_fraction(q, mode: str, neg_zero: bool = False) -> int:
    """Round an exact rational q to binary32 bits with rn/rz/rm/rp (q == 0: +0, or -0 if neg_zero)."""
    from fractions import Fraction

    if q == 0:
        return SIGN if neg_zero else 0
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, -126)                         # below: subnormal quantum 2^-149
    m = a / Fraction(2) ** (e - 23)          # 2^23 <= m < 2^24 for normal results
    n = m.numerator // m.denominator
    rem = m - n
    if rem:
        if mode == "rn":
            up = rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n & 1)
        elif mode == "rz":
            up = False
        elif mode == "rp":
            up = not neg
        else:  # rm
            up = neg
        n += up
    if n == 1 << 24:
        n >>= 1
        e += 1
    sign = SIGN if neg else 0
    if e > 127:
        to_inf = mode == "rn" or (mode == "rp" and not neg) or (mode == "rm" and neg)
        return sign | (INF if to_inf else FLT_MAX)
    if n < 1 << 23:
        return sign | n                      # subnormal (or zero after rounding down)
    return sign | ((e + 127) << 23) | (n - (1 << 23))


def _exact(x):
    from fractions import Fraction

    return Fraction(b2f(x))


def _finite(*xs):
    return all((x & INF) != INF for x in xs)


def directed(op: str, mode: str):
    """add/sub/mul/div/fma on binary32 bits with rounding mode rn/rz/rm/rp (exact, slow path)."""
    rn = {"add": add, "sub": sub, "mul": mul, "div": div, "fma": fma}[op]

    if op in ("add", "sub"):
        def f(x, y):
            if not _finite(x, y):
                return rn(x, y)
            if op == "sub":
                y ^= SIGN
            q = _exact(x) + _exact(y)
            if q == 0:
                both_neg = x == SIGN and y == SIGN      # -0 + -0
                return round_fraction(q, mode, both_neg or (mode == "rm" and not (x == 0 and y == 0)))
            return round_fraction(q, mode)
        return f
    if op in ("mul", "div"):
        def f(x, y):
            if not _finite(x, y) or (op == "div" and (y & 0x7FFFFFFF) == 0):
                return rn(x, y)
            q = _exact(x) * _exact(y) if op == "mul" else _exact(x) / _exact(y)
            return round_fraction(q, mode, bool((x ^ y) & SIGN))
        return f

    def g(x, y, z):
        if not _finite(x, y, z):
            return rn(x, y, z)
        p = _exact(x) * _exact(y)
        q = p + _exact(z)
        if q == 0:
            psign = bool((x ^ y) & SIGN)
            if p == 0 and (z & 0x7FFFFFFF) == 0:
                zneg = bool(z & SIGN)
                neg = (psign and zneg) or (mode == "rm" and psign != zneg)
            else:
                neg = mode == "rm"
            return round_fraction(q, mode, neg)
        return round_fraction(q, mode)
    return g
