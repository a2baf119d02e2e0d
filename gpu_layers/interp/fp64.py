"""IEEE binary64 arithmetic on raw bit patterns, exactly as an NVIDIA GPU does it (no ftz).

Values are carried as Python ints holding the 64 IEEE bits. Round-to-nearest-even add, sub, mul,
div and sqrt go through Python floats (IEEE binary64, correctly rounded, subnormals kept); every
other operation (fma, and all of them under the directed roundings .rz .rm .rp) is computed
exactly with integers and rounded once by `round_exact`. Subnormals are never flushed: PTX has no
.ftz for f64 ("Double-precision instructions support subnormal inputs and results").

NaN policy (what bits a NaN result has), with its sources:

* PTX ISA 9.7.3 (Floating-Point Instructions): "NaN payloads are supported for double-precision
  instructions (except for rcp.approx.ftz.f64 and rsqrt.approx.ftz.f64, which maps input NaNs to
  a canonical NaN). Single-precision instructions return an unspecified NaN." So an f64 result
  from a NaN operand is that operand, not one canonical NaN.
* CUDA C++ Programming Guide, "Floating-Point Standard": "while SNaN encodings are supported,
  they are not signaling and are handled as quiet"; "The result of a single-precision
  floating-point operation involving one or more input NaNs is the quiet NaN of bit pattern
  0x7fffffff" (fp.py); "Double-precision floating-point absolute value and negation are not
  compliant with IEEE-754 with respect to NaNs; these are passed through unchanged."
* envytools (nvhw/fp.c with its hardware test hwtest/g80_fp64.cc, reverse engineering of NVIDIA's
  DADD/DMUL/DFMA/DMNMX/F2F units, checked bit for bit against a GT200 GPU): a NaN operand comes
  out with its sign and payload and the quiet bit (bit 51) set; negate/abs operand modifiers do not
  touch a NaN; when several operands are NaN, DADD returns b's (then a's), DFMA b's, then c's,
  then a's (DMUL is DFMA with a zero addend); an invalid operation (inf - inf, 0 * inf) makes
  0xFFF8000000000000 (negative quiet NaN, empty payload); DMNMX with two NaNs returns b's;
  F2F (f32 <-> f64) keeps sign and payload (shifted) and sets the quiet bit.
* PTX ISA cvt ("Integer Notes"): a NaN converted to an integer is 0 if the source is not .f64 and
  the destination is not 64-bit, else 1 << (width - 1) (MININT for signed types). Seen on an A100
  through PyTorch: float32 NaN -> int64 gives INT64_MIN, float32 NaN -> int32 gives 0.

Not verified on a modern GPU (no GPU in the session that wrote this; the envytools evidence is
GT200-era): that H200's DADD/DMUL/DFMA keep those rules, and how ptxas's software sequences for
div.rn/rcp.rn/sqrt.rn.f64 (built from DFMA and MUFU.RCP64H/RSQ64H) make their NaNs. This module
assumes they behave like the hardware ops above: a NaN operand is propagated quiet (div: b's,
then a's, as DADD a+b would), and 0/0, inf/inf, sqrt(x<0) give 0xFFF8000000000000. The suite's
NaN cases (`nan_results`) record what this module produces; `scripts/gpu_check_suite.py` compares
them with a real GPU. NOTE: the often-quoted "canonical" 0x7FFFFFFFFFFFFFFF is not what the
sources above describe for f64 arithmetic.

min/max: the non-NaN operand when exactly one is NaN, b's NaN (quieted) when both are, and -0.0
orders below +0.0 (PTX ISA min/max). testp.normal follows the PTX ISA's testp text, "As a special
case, positive and negative zero are considered normal numbers", like the f32 handler
(decode._testp_fn): +-0 is normal; subnormals, infinities and NaNs are not.
abs/neg of a NaN: passed through with the quiet bit set (a DADD with a negate/abs modifier, which is
how ptxas is assumed to implement them); for a quiet NaN that is exactly "unchanged".
"""
from __future__ import annotations

import math
import struct

SIGN = 1 << 63
EXP_MASK = 0x7FF0000000000000
FRAC_MASK = (1 << 52) - 1
QUIET = 1 << 51
INF = 0x7FF0000000000000
NEG_INF = 0xFFF0000000000000
DEFAULT_NAN = 0xFFF8000000000000      # what an invalid operation makes (see the module docstring)
DBL_MAX = 0x7FEFFFFFFFFFFFFF
ONE = 0x3FF0000000000000
M64 = (1 << 64) - 1

_d = struct.Struct("<d")
_Q = struct.Struct("<Q")


def b2d(x: int) -> float:
    """binary64 bits -> Python float (exact; NaN payloads are not to be trusted through floats)."""
    return _d.unpack(_Q.pack(x))[0]


def d2b(v: float) -> int:
    """Python float (not NaN) -> binary64 bits."""
    return _Q.unpack(_d.pack(v))[0]


def is_nan(x: int) -> bool:
    return (x & ~SIGN & M64) > INF


def is_inf(x: int) -> bool:
    return (x & ~SIGN & M64) == INF


def is_finite(x: int) -> bool:
    return (x & EXP_MASK) != EXP_MASK


def quiet(x: int) -> int:
    """A NaN operand as the result carries it: sign and payload kept, quiet bit set."""
    return x | QUIET


def _nan2(a: int, b: int) -> int:
    """NaN result of a two-operand op (DADD rule): b's NaN, else a's, quieted."""
    return quiet(b) if is_nan(b) else quiet(a)


# ---- exact rounding ---------------------------------------------------------------------------

# (precision p, exponent of the smallest quantum, largest quantum exponent, sign bit)
F64 = (53, -1074, 971, SIGN)
F32 = (24, -149, 104, 1 << 31)

_MODES = ("rn", "rz", "rm", "rp")


def round_exact(neg: bool, m: int, e: int, mode: str, sticky: bool = False, fmt=F64) -> int:
    """Bits of the value (-1)^neg * (m + f) * 2^e rounded to `fmt` with rn/rz/rm/rp.

    m >= 0 is an integer; 0 <= f < 1 is unknown except that it is 0 iff `sticky` is False (so an
    exact value has sticky False; a truncated quotient or root passes its remainder != 0). With
    sticky set, m must have at least p + 2 bits. m == 0 (and no sticky) gives a zero of sign neg.
    """
    p, qmin, qmax, sbit = fmt
    sign = sbit if neg else 0
    if m == 0:
        assert not sticky
        return sign
    n = m.bit_length()
    q = n + e - p                     # quantum exponent of a normal result
    if q < qmin:
        q = qmin                      # subnormal range: fixed quantum
    shift = q - e
    if shift <= 0:
        assert not sticky, "sticky needs at least p + 2 bits"
        r = m << -shift
    else:
        r = m >> shift
        rem = m & ((1 << shift) - 1)
        if rem or sticky:
            if mode == "rn":
                half = 1 << (shift - 1)
                up = rem > half or (rem == half and (sticky or r & 1))
            elif mode == "rz":
                up = False
            elif mode == "rp":
                up = not neg
            elif mode == "rm":
                up = neg
            else:
                raise ValueError(mode)
            if up:
                r += 1
                if r == 1 << p:          # carried into a new binade
                    r >>= 1
                    q += 1
    if q > qmax:
        to_inf = mode == "rn" or (mode == "rp" and not neg) or (mode == "rm" and neg)
        big = (((qmax - qmin + 2) << (p - 1)) if to_inf else (((qmax - qmin + 2) << (p - 1)) - 1))
        return sign | big
    # normal: r in [2^(p-1), 2^p), biased exponent q - qmin + 1; subnormal (q == qmin): r < 2^(p-1)
    return sign | (((q - qmin) << (p - 1)) + r)


def decode(x: int):
    """Finite bits -> (neg, m, e) with |x| = m * 2^e exactly."""
    neg = bool(x & SIGN)
    ex = (x >> 52) & 0x7FF
    f = x & FRAC_MASK
    if ex == 0:
        return neg, f, -1074
    return neg, f | (1 << 52), ex - 1075


def _check_mode(mode):
    if mode not in _MODES:
        raise ValueError(f"rounding mode {mode!r}")


# ---- arithmetic ------------------------------------------------------------------------------

def _zero_sum_sign(na: bool, nb: bool, mode: str) -> bool:
    """Sign of an exact zero sum a + b (IEEE 754 6.3): same signs keep it, else -0 only in rm."""
    return na if na == nb else mode == "rm"


def _add_exact(x: int, y: int, mode: str) -> int:
    nx, mx, ex = decode(x)
    ny, my, ey = decode(y)
    e = min(ex, ey)
    a = (mx << (ex - e)) * (-1 if nx else 1)
    b = (my << (ey - e)) * (-1 if ny else 1)
    s = a + b
    if s == 0:
        return SIGN if _zero_sum_sign(nx, ny, mode) else 0
    return round_exact(s < 0, abs(s), e, mode)


def add(x: int, y: int, mode: str = "rn") -> int:
    if is_nan(x) or is_nan(y):
        return _nan2(x, y)
    if not (is_finite(x) and is_finite(y)):
        if is_inf(x) and is_inf(y) and (x ^ y) & SIGN:
            return DEFAULT_NAN                       # inf - inf
        return x if is_inf(x) else y
    if mode == "rn":
        return d2b(b2d(x) + b2d(y))
    return _add_exact(x, y, mode)


def sub(x: int, y: int, mode: str = "rn") -> int:
    """x - y: DADD with b negated; a NaN b is not negated (passed through, quieted)."""
    if is_nan(y):
        return _nan2(x, y)
    return add(x, y ^ SIGN, mode)


def _fma_exact(x: int, y: int, z: int, mode: str) -> int:
    nx, mx, ex = decode(x)
    ny, my, ey = decode(y)
    nz, mz, ez = decode(z)
    np_ = nx != ny
    mp, ep = mx * my, ex + ey
    if mp == 0 and mz == 0:
        return SIGN if _zero_sum_sign(np_, nz, mode) else 0
    e = min(ep, ez)
    a = (mp << (ep - e)) * (-1 if np_ else 1)
    b = (mz << (ez - e)) * (-1 if nz else 1)
    s = a + b
    if s == 0:
        return SIGN if _zero_sum_sign(np_, nz, mode) else 0
    return round_exact(s < 0, abs(s), e, mode)


def fma(x: int, y: int, z: int, mode: str = "rn") -> int:
    """x * y + z rounded once (DFMA NaN priority: y, z, x)."""
    for v in (y, z, x):
        if is_nan(v):
            return quiet(v)
    _check_mode(mode)
    if not (is_finite(x) and is_finite(y) and is_finite(z)):
        psign = (x ^ y) & SIGN
        if is_inf(x) or is_inf(y):
            if (x & ~SIGN) == 0 or (y & ~SIGN) == 0:
                return DEFAULT_NAN                   # 0 * inf
            if is_inf(z) and (z & SIGN) != psign:
                return DEFAULT_NAN                   # inf - inf
            return psign | INF
        return z                                     # finite * finite + inf
    return _fma_exact(x, y, z, mode)


def mul(x: int, y: int, mode: str = "rn") -> int:
    if is_nan(x) or is_nan(y):
        return _nan2(x, y)
    sign = (x ^ y) & SIGN
    if not (is_finite(x) and is_finite(y)):
        if (x & ~SIGN) == 0 or (y & ~SIGN) == 0:
            return DEFAULT_NAN                       # 0 * inf
        return sign | INF
    if mode == "rn":
        return d2b(b2d(x) * b2d(y))
    _check_mode(mode)
    nx, mx, ex = decode(x)
    ny, my, ey = decode(y)
    return round_exact(bool(sign), mx * my, ex + ey, mode)


def div(x: int, y: int, mode: str = "rn") -> int:
    if is_nan(x) or is_nan(y):
        return _nan2(x, y)
    _check_mode(mode)
    sign = (x ^ y) & SIGN
    xz, yz = (x & ~SIGN) == 0, (y & ~SIGN) == 0
    if is_inf(x):
        return DEFAULT_NAN if is_inf(y) else sign | INF
    if is_inf(y):
        return sign                                  # finite / inf = signed zero
    if yz:
        return DEFAULT_NAN if xz else sign | INF
    if xz:
        return sign
    if mode == "rn":
        return d2b(b2d(x) / b2d(y))
    _, mx, ex = decode(x)
    _, my, ey = decode(y)
    k = max(0, 56 + my.bit_length() - mx.bit_length())
    q, r = divmod(mx << k, my)
    return round_exact(bool(sign), q, ex - ey - k, mode, sticky=r != 0)


def rcp(x: int, mode: str = "rn") -> int:
    return div(ONE, x, mode)


def sqrt(x: int, mode: str = "rn") -> int:
    if is_nan(x):
        return quiet(x)
    _check_mode(mode)
    if (x & ~SIGN) == 0:
        return x                                     # sqrt(+-0) = +-0
    if x & SIGN:
        return DEFAULT_NAN                           # negative, including -inf
    if x == INF:
        return x
    if mode == "rn":
        return d2b(math.sqrt(b2d(x)))
    _, m, e = decode(x)
    if e & 1:
        m <<= 1
        e -= 1
    k = max(0, (114 - m.bit_length()) // 2 + 1)
    big = m << (2 * k)
    s = math.isqrt(big)
    return round_exact(False, s, (e - 2 * k) // 2, mode, sticky=s * s != big)


def fmin(x: int, y: int) -> int:
    if is_nan(x):
        return quiet(y) if is_nan(y) else y
    if is_nan(y):
        return x
    a, b = b2d(x), b2d(y)
    if a == b:
        return x if x & SIGN else y                  # -0 < +0
    return x if a < b else y


def fmax(x: int, y: int) -> int:
    if is_nan(x):
        return quiet(y) if is_nan(y) else y
    if is_nan(y):
        return x
    a, b = b2d(x), b2d(y)
    if a == b:
        return y if x & SIGN else x
    return x if a > b else y


def fabs(x: int) -> int:
    """abs.f64: clears the sign; a NaN passes through (quieted), its sign kept."""
    return quiet(x) if is_nan(x) else x & ~SIGN


def neg(x: int) -> int:
    """neg.f64: flips the sign; a NaN passes through (quieted), its sign kept."""
    return quiet(x) if is_nan(x) else x ^ SIGN


def copysign(a: int, b: int) -> int:
    """copysign.f64 d, a, b: b's magnitude with a's sign (a bit operation, NaNs included)."""
    return (b & ~SIGN) | (a & SIGN)


def atom_add(x: int, y: int) -> int:
    """atom/red .add.f64: round to nearest even, subnormals kept (like add.rn.f64)."""
    return add(x, y)


# ---- comparisons and classification ------------------------------------------------------------

_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
        "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def cmp_fn(op: str):
    """setp.<op>.f64 on bit patterns -> 0/1 (ordered ops false on NaN, *u ops true, num/nan)."""
    if op == "num":
        return lambda x, y: int(not (is_nan(x) or is_nan(y)))
    if op == "nan":
        return lambda x, y: int(is_nan(x) or is_nan(y))
    unordered = op.endswith("u")
    c = _CMP[op[:-1] if unordered else op]

    def f(x, y):
        if is_nan(x) or is_nan(y):
            return int(unordered)
        return int(c(b2d(x), b2d(y)))
    return f


def testp_fn(mode: str):
    def f(x):
        e = x & EXP_MASK
        m = x & FRAC_MASK
        if mode == "finite":
            return int(e != EXP_MASK)
        if mode == "infinite":
            return int(e == EXP_MASK and m == 0)
        if mode == "number":
            return int(not is_nan(x))
        if mode == "notanumber":
            return int(is_nan(x))
        if mode == "normal":
            # PTX ISA, testp: "As a special case, positive and negative zero are considered
            # normal numbers." (subnormals, inf and NaN are not normal)
            return int((e != 0 and e != EXP_MASK) or (x & ~SIGN) == 0)
        if mode == "subnormal":
            return int(e == 0 and m != 0)
        raise ValueError(mode)
    return f


# ---- conversions -----------------------------------------------------------------------------

def from_f32(x: int) -> int:
    """cvt.f64.f32 (exact); a NaN keeps sign and payload (shifted up) and gets the quiet bit."""
    s = (x >> 31) & 1
    if (x & 0x7FFFFFFF) > 0x7F800000:
        return (s << 63) | INF | QUIET | ((x & 0x7FFFFF) << 29)
    if (x & 0x7FFFFFFF) == 0x7F800000:
        return (s << 63) | INF
    return d2b(struct.unpack("<f", struct.pack("<I", x))[0])


def to_f32(x: int, mode: str) -> int:
    """cvt.{rn,rz,rm,rp}.f32.f64: rounded once, subnormal f32 results kept, overflow by mode; a
    NaN keeps sign and the top of its payload and gets the f32 quiet bit."""
    _check_mode(mode)
    s = (x >> 63) << 31
    if is_nan(x):
        return s | 0x7FC00000 | ((x & FRAC_MASK) >> 29)
    if is_inf(x):
        return s | 0x7F800000
    neg_, m, e = decode(x)
    return round_exact(neg_, m, e, mode, fmt=F32)


def from_int(v: int, mode: str) -> int:
    """cvt.{rn,rz,rm,rp}.f64.{s,u}NN from an exact integer value."""
    _check_mode(mode)
    if v == 0:
        return 0
    return round_exact(v < 0, abs(v), 0, mode)


def _round_int(x: int, mode: str) -> int:
    """Finite bits -> integer rounded by rni/rzi/rmi/rpi (exact, unbounded)."""
    neg_, m, e = decode(x)
    if e >= 0:
        v = m << e
        return -v if neg_ else v
    sh = -e
    q = m >> sh
    rem = m & ((1 << sh) - 1)
    if rem:
        if mode == "rni":
            half = 1 << (sh - 1)
            up = rem > half or (rem == half and q & 1)
        elif mode == "rzi":
            up = False
        elif mode == "rmi":
            up = neg_
        elif mode == "rpi":
            up = not neg_
        else:
            raise ValueError(mode)
        q += up
    return -q if neg_ else q


def to_int(x: int, mode: str, lo: int, hi: int) -> int:
    """cvt.{rni,rzi,rmi,rpi}{.sat}.{s,u}NN.f64: round, then clamp to [lo, hi] (always: float to
    integer saturates); NaN -> 1 << (NN - 1) (PTX ISA cvt Integer Notes, .f64 source)."""
    if is_nan(x):
        return lo if lo < 0 else (hi + 1) >> 1
    if is_inf(x):
        return lo if x & SIGN else hi
    v = _round_int(x, mode)
    return lo if v < lo else hi if v > hi else v


def round_integral(x: int, mode: str) -> int:
    """cvt.{rni,rzi,rmi,rpi}.f64.f64: an integral value; zero keeps the sign of x; NaN quieted."""
    if is_nan(x):
        return quiet(x)
    if not is_finite(x) or (x >> 52) & 0x7FF >= 1075:
        return x                                     # inf, or already an integer (|x| >= 2^52)
    v = _round_int(x, mode)
    if v == 0:
        return x & SIGN
    return round_exact(v < 0, abs(v), 0, "rn")     # exact: |v| <= 2^53


def sat01(x: int) -> int:
    """cvt.sat.f64.f64: clamp to [0.0, 1.0]; NaN -> +0.0."""
    if is_nan(x) or x & SIGN:
        return 0
    return ONE if x >= ONE else x
