"""Fast entries of the float routines: add, mul, fma, div and sqrt (binary32 and binary64),
rounding to nearest or by the mode register, for operands the lowering proved defined
(gpu_layers/machine/definedness.py).

The general routine (softfloat.py) is branch-free on data, so it pays for every special case on
every call: 135 steps for a binary32 add, 244 for binary64. Most operands of real kernels are
normal numbers, and where they are also defined a branch on them is allowed, so these entries
compute the common case directly and fall back to the general entry (the operands are still in
its argument registers, the mode register as the site set it) for anything else: a subnormal,
infinite or NaN operand, a zero one where it is not a term of a sum, a result that is zero,
subnormal or overflows. Both end at the routine's return chain, so a call site does not know
which one ran; every branch is forward, so lanes that take different ones reconverge there under
the cursor rule.

Exactness: significands sit in a word with guard bits below them (hidden bit at w - 2 for a
sum, products exact in 64 or 128 bits); the operand shifted right for alignment has the bits it
loses OR-ed into its lowest bit ("jamming"). The result is then odd where it is inexact and lies
in the same open interval between two even integers as the exact value, and rounding at bit 1
or above cannot tell them apart; a large cancellation only happens for alignment shifts of 0 or
1, which lose nothing. Rounding to nearest even: up = ((rem + lsb) + half - 1) >> k.
"""
from __future__ import annotations

from functools import partial

from .softfloat import F32, _B, _isqrt, _root_scale, _words, quotient64


def entries(r) -> list:
    """(label, emitter, general entry it falls back to) of routine r's fast entries: add, mul, fma,
    sqrt and div, each rounding to nearest or by the mode register (the directed modes)."""
    ops = [("add", emit_add, r.add), ("mul", emit_mul, r.fma), ("fma", emit_fma, r.fma),
           ("sqrt", emit_sqrt, r.sqrt), ("div", emit_div, r.div)]
    return [(r.fast[name, directed], partial(emit, directed=directed), general)
            for name, emit, general in ops for directed in (False, True)]


# the argument registers a site calling a fast entry leaves alone: the entry does not read them,
# and its way to the general entry (fallback) sets them. A rounding-to-nearest entry never reads
# the mode; mul, div and sqrt never read the addend c (the general entry adds c: -0, or +0 when
# rounding down, so the product, quotient or root is unchanged)
def site_skips(name: str, directed: bool) -> set:
    """Which of "mode" and "c" a call site of fast entry (name, directed) does not set."""
    out = set() if directed else {"mode"}
    if name in ("mul", "div", "sqrt"):
        out.add("c")
    return out


def fallback(B: _B, r, name: str, directed: bool, general) -> None:
    """The way from fast entry (name, directed) to the general entry: set what its sites skip
    (site_skips), then branch."""
    F, skips = r.F, site_skips(name, directed)
    if "mode" in skips:
        B.em.emit(f"mov.b32 {r.mode}, 0")
    if "c" in skips and not directed:
        B.em.emit(f"mov.b{F.w} {r.c}, {F.sign}")
    elif "c" in skips:                                  # +0 rounding down (mode 2), else -0
        B.em.emit(f"selp.b{F.w} {r.c}, 0, {F.sign}, {B.setp('eq', 'u32', r.mode, 2)}")
    B.em.emit(f"bra {general}")


def labels(em) -> dict:
    """(op, directed) -> a fresh label, for one routine's fast entries."""
    return {(op, d): em.label() for op in ("add", "mul", "fma", "div", "sqrt") for d in (False, True)}


def eligible(em, entry, ops, F) -> bool:
    """Whether a site may call a fast entry for `entry` ("add", "mul", "fma", "div", "sqrt"):
    every operand proven defined (a branch on an undefined value would raise)."""
    allowed = em.fast_floats is True or (em.fast_floats and entry in em.fast_floats)
    return allowed and all(em.is_defined(o) for o in ops)


def _exp32(B: _B, mag, F):
    """The biased exponent of a magnitude, as a 32-bit value."""
    e = B.shr(F.w, mag, F.mbits)
    return B.cvt(32, 64, e) if F.w == 64 else e


def _sig(B: _B, mag, F):
    """The significand with its hidden bit (a normal number's)."""
    return B.or_(F.w, B.and_(F.w, mag, F.frac), F.hidden)


def _normal(B: _B, mag, F):
    """Whether a magnitude is a normal number: hidden <= mag < inf, one unsigned compare."""
    return B.setp("lt", f"u{F.w}", B.sub(F.w, mag, F.hidden), F.inf - F.hidden)


def _round(B: _B, R2, ww, r, sign, directed):
    """(sig, up) for a ww-bit R2 whose leading one is at bit ww - 1: its top mbits + 1 bits and
    whether rounding takes them up (0 or 1): to nearest even, or (directed) by the mode register
    (rz never; rp for a positive result, rm for a negative one, when inexact). `sign`: a pattern
    whose top bit is the result's sign."""
    F = r.F
    k = ww - 1 - F.mbits
    sig = B.shr(ww, R2, k)
    rem = B.and_(ww, R2, (1 << k) - 1)
    if not directed:
        return sig, B.shr(ww, B.add(ww, B.add(ww, rem, B.and_(ww, sig, 1)), (1 << (k - 1)) - 1), k)
    s = B.shr(F.w, sign, F.w - 1)
    away = B.setp("eq", "u32", r.mode, B.sub(32, 3, B.cvt(32, 64, s) if F.w == 64 else s))
    return sig, B.sel(ww, 1, 0, B.pand(away, B.setp("ne", f"b{ww}", rem, 0)))


def _jam_shift(B: _B, x, d, ww=64, Wd=None):
    """x >> d with the bits shifted out OR-ed into bit 0 (d >= the width loses all of x: 0 | 1):
    a ww-bit word (the lost bits' min with 1), or a 128-bit pair (Wd a _W128: whether shifting
    back gives x again, fewer steps than a 128-bit subtraction)."""
    if Wd is not None and Wd.w == 128:
        y = Wd.shr(x, d)
        return Wd.or_low(y, B.sel(64, 1, 0, Wd.setp("ne", Wd.shl(y, d), x)))
    y = B.shr(ww, x, d)
    return B.or_(ww, y, B.umin(ww, B.sub(ww, x, B.shl(ww, y, d)), 1))


def _pack(B: _B, F, e1, sig, up, ww):
    """|result| = (e1 << mbits) + sig + up, e1 the biased exponent - 1 (>= 0, checked apart):
    the hidden bit of sig adds the one back, and a rounding carry moves into the exponent."""
    su = B.add(ww, sig, up)
    if ww != F.w:
        su = B.cvt(F.w, ww, su)
    e = B.cvt(64, 32, e1) if F.w == 64 else e1
    return B.add(F.w, B.shl(F.w, e, F.mbits), su)


def _unless(B: _B, ok, general):
    """Fall back to the general entry unless every predicate of `ok` holds."""
    p = ok[0]
    for q in ok[1:]:
        p = B.pand(p, q)
    B.em.emit(f"@!{p} bra {general}")


def _operands_ok(B: _B, ok, general, loops) -> list:
    """The operands' checks of an entry that also checks at the end (fma): a branch to the
    general entry now, unless the entry `loops` and its steps are not written out (lower's
    straight_steps); then returned for `_finish` (a loop's backward branch would hand the turn
    to the lanes that left early, and they would run the general entry apart from those that
    leave at the end: in scripts/check_softfloat.py --normal, binary32 mul 217 -> 266 steps a
    thread when looped). Entries without a loop (add, div) or without checks at the end (mul,
    sqrt) branch at once (`_unless`)."""
    if loops and not B.em.straight:
        return ok
    _unless(B, ok, general)
    return []


def _finish(B: _B, r, ok, sign_of, mag, general, back):
    """Fall back to the general entry unless every predicate of `ok` (the result's checks)
    holds; else out = the sign bit of `sign_of` | mag, and return. (The operands' checks come
    first, `_unless` before any work: a lane with a special operand then leaves at once instead
    of computing a result it throws away, so it writes no data tokens here.)"""
    em, F = B.em, r.F
    if ok:
        _unless(B, ok, general)
    em.emit(f"or.b{F.w} {r.out}, {B.and_(F.w, sign_of, F.sign)}, {mag}")
    em.emit(f"bra {back}")


def emit_add(B: _B, r, general, back, directed=False):
    """a + c: the larger magnitude x and the smaller y, significands with their hidden bit at
    w - 2 (7 guard bits for binary32, 10 for binary64), y aligned and jammed, added or
    subtracted, normalized by a leading-zero count and rounded. x normal, y normal or zero."""
    F = r.F
    w, u = F.w, f"u{F.w}"
    maga, magc = B.and_(w, r.a, F.mag), B.and_(w, r.c, F.mag)
    mx, my = B.umax(w, maga, magc), B.umin(w, maga, magc)
    py = B.setp("ge", u, my, F.hidden)       # y is not zero or subnormal
    _unless(B, [_normal(B, mx, F), B.por(py, B.setp("eq", u, my, 0))], general)   # (no loop)
    x = B.sel(w, r.a, r.c, B.setp("ge", u, maga, magc))      # its sign is the result's
    ex, ey = _exp32(B, mx, F), _exp32(B, my, F)
    g = w - 2 - F.mbits
    sx, sy = B.shl(w, _sig(B, mx, F), g), B.sel(w, B.shl(w, _sig(B, my, F), g), 0, py)
    yj = _jam_shift(B, sy, B.sub(32, ex, ey), w)
    R = B.sel(w, B.sub(w, sx, yj), B.add(w, sx, yj), B.setp("lt", f"s{w}", B.xor(w, r.a, r.c), 0))
    n = B.clz(w, R)
    sig, up = _round(B, B.shl(w, R, n), w, r, x, directed)
    e1 = B.sub(32, ex, n)                   # the leading one at w - 1 - n: exponent ex + 1 - n
    mag = _pack(B, F, e1, sig, up, w)
    ok = [B.setp("ge", "s32", e1, 0), B.setp("ne", f"b{w}", R, 0), B.setp("lt", u, mag, F.inf)]
    _finish(B, r, ok, x, mag, general, back)


def _product(B: _B, sa, sb, F):
    """The exact product of two significands as a list of 64-bit registers, high first
    (binary32: one word; binary64: two)."""
    em = B.em
    if F is F32:                            # 24 x 24 bits: the general entry's product
        from .lower import _mul_steps       # (lower imports this module)
        return [_mul_steps(em, B.cvt(64, 32, sa), F.mbits + 1, sb, 32, bits=F.mbits + 1)]
    # 53 x 53 bits: b's significand in chunks of 9 + 4 x 11 bits from the top, each chunk's
    # product (< 2^64) by multiply steps, accumulated as acc = acc * 2^11 + product
    hi = lo = None
    for s, bits in ((44, 9), (33, 11), (22, 11), (11, 11), (0, 11)):
        R = B.and_(64, B.shl(64, sb, 64 - bits - s), ((1 << bits) - 1) << (64 - bits))
        for _ in range(bits):
            em.emit(f"mstep.b64 {R}, {R}, {sa}")
        if lo is None:
            lo = R
            continue
        top = B.shr(64, lo, 53)
        hi = top if hi is None else B.or_(64, B.shl(64, hi, 11), top)
        lo2 = B.add(64, B.shl(64, lo, 11), R)
        hi = B.add(64, hi, B.sel(64, 1, 0, B.setp("lt", "u64", lo2, R)))
        lo = lo2
    return [hi, lo]


def _normalized_product(B: _B, sa, sb, F):
    """(n, R2): the product shifted so its leading one is at bit 63 of R2 (binary64: the bits
    below R2 jammed into its bit 0), n the shift (the product's leading one was at bit
    64 * words - 1 - n)."""
    words = _product(B, sa, sb, F)
    if len(words) == 1:
        n = B.clz(64, words[0])
        return n, B.shl(64, words[0], n)
    hi, lo = words
    n = B.clz(64, hi)                       # 22 or 23: the product is below 2^106, at least 2^104
    h = B.or_(64, B.shl(64, hi, n), B.shr(64, lo, B.sub(32, 64, n)))
    return n, B.or_(64, h, B.nonzero(64, B.shl(64, lo, n)))


def _within(B: _B, x, lo, hi):
    """lo <= x <= hi for a signed 32-bit x: two compares (predicates: no data tokens, where one
    unsigned compare of x - lo would send x - lo)."""
    return B.pand(B.setp("ge", "s32", x, lo), B.setp("le", "s32", x, hi))


def emit_mul(B: _B, r, general, back, directed=False):
    """a * b: the exact product of the significands, normalized and rounded; the biased
    exponent - 1 is e1 = ea + eb - bias - 2 mbits + (its leading one's position) - 1. Every
    check comes first: normal operands, and an exponent sum for which the result is normal and
    finite whatever the product's leading bit (n0 or n0 + 1 leading zeros) and the rounding
    carry: e1 >= 0 and e1 + 2 <= 2 bias. So no lane leaves at the end (nothing to split from)."""
    F = r.F
    w = F.w
    top, n0 = (63, 16) if F is F32 else (127, 22)
    K = top - 1 - F.bias - 2 * F.mbits
    maga, magb = B.and_(w, r.a, F.mag), B.and_(w, r.b, F.mag)
    ea, eb = _exp32(B, maga, F), _exp32(B, magb, F)
    S = B.add(32, ea, eb)
    _unless(B, [_normal(B, maga, F), _normal(B, magb, F), _within(B, S, n0 + 1 - K, 2 * F.bias - 2 + n0 - K)],
            general)
    n, R2 = _normalized_product(B, _sig(B, maga, F), _sig(B, magb, F), F)
    e1 = B.add(32, B.sub(32, S, n), K)
    sign = B.xor(w, r.a, r.b)
    sig, up = _round(B, R2, 64, r, sign, directed)
    mag = _pack(B, F, e1, sig, up, 64)
    _finish(B, r, [], sign, mag, general, back)


def emit_fma(B: _B, r, general, back, directed=False):
    """a * b + c in the routine's wide words (softfloat._words: one 64-bit register for binary32,
    a 128-bit pair for binary64): the exact product (48 / 106 bits) and c's significand, both
    with the leading one at bit T = width - 3 (61 / 125; guard bits 14 and 38 / 20 and 73), the
    smaller jammed into place, added or subtracted, normalized to the top bit and rounded from the
    high word (binary64: the low word jammed into its bit 0). E is the biased exponent of bit T's
    place. Each operand normal or zero (a zero product or c is a zero term: sums to zero go to the
    general entry, which knows the zero's sign)."""
    F = r.F
    w, u = F.w, f"u{F.w}"
    Wd = _words(B, F)
    T = Wd.w - 3
    maga, magb, magc = (B.and_(w, v, F.mag) for v in (r.a, r.b, r.c))
    za, zb, zc = (B.setp("eq", u, m, 0) for m in (maga, magb, magc))
    early = _operands_ok(B, [B.por(_normal(B, m, F), z) for m, z in ((maga, za), (magb, zb), (magc, zc))],
                         general, loops=F is F32)
    pz = B.por(za, zb)                      # a zero product: the result is c
    ea, eb, ec = (_exp32(B, m, F) for m in (maga, magb, magc))
    words = _product(B, _sig(B, maga, F), _sig(B, magb, F), F)
    k = B.clz(64, words[0])                 # the leading one at width - 1 - k (16/17, 22/23)
    X = Wd.sel(0, Wd.shl(words[0] if len(words) == 1 else tuple(words), B.sub(32, k, 2)), pz)
    Ex = B.sub(32, B.add(32, ea, eb), B.add(32, k, F.bias + 2 * F.mbits - (Wd.w - 1)))
    C = Wd.sel(0, Wd.shl(Wd.from_(_sig(B, magc, F), w), T - F.mbits), zc)
    big = B.por(B.setp("gt", "s32", Ex, ec),            # C's lower word is 0: X >= C by the highs
                B.pand(B.setp("eq", "s32", Ex, ec), B.setp("ge", "u64", _high(Wd, X), _high(Wd, C))))
    big = B.pand(B.por(big, zc), B.pnot(pz))   # a zero term is the smaller one
    L, S = Wd.sel(X, C, big), Wd.sel(C, X, big)
    EL = B.sel(32, Ex, ec, big)
    d = B.sel(32, B.sub(32, Ex, ec), B.sub(32, ec, Ex), big)
    sp = B.xor(w, r.a, r.b)
    yj = _jam_shift(B, S, d, 64, Wd)
    R = Wd.sel(Wd.sub(L, yj), Wd.add(L, yj), B.setp("lt", f"s{w}", B.xor(w, sp, r.c), 0))
    n = Wd.clz(R)
    sign = B.sel(w, sp, r.c, big)
    sig, up = _round(B, _high_jammed(B, Wd, Wd.shl(R, n)), 64, r, sign, directed)
    e1 = B.sub(32, B.add(32, EL, 1), n)     # the leading one at width - 1 - n: exponent EL + 2 - n
    mag = _pack(B, F, e1, sig, up, 64)
    ok = early + [B.setp("ge", "s32", e1, 0), Wd.setp("ne", R, 0), B.setp("lt", u, mag, F.inf)]
    _finish(B, r, ok, sign, mag, general, back)


def _high(Wd, x):
    """The high 64-bit word of a wide word."""
    return x if Wd.w == 64 else Wd.parts(x)[0]


def _high_jammed(B: _B, Wd, x):
    """The high 64-bit word with every lower bit OR-ed into its bit 0."""
    if Wd.w == 64:
        return x
    hi, lo = Wd.parts(x)
    return B.or_(64, hi, B.nonzero(64, lo))


QUOTIENT_STEPS = 27         # binary32 quotient bits (softfloat's DIV entry computes as many)


def emit_div(B: _B, r, general, back, directed=False):
    """a / b. binary32: q = floor(x 2^26 / y) of the significands by 27 machine divide steps
    (softfloat._f32_quotient's register layout: R = rem << 27 | q); binary64: q = floor(x 2^55 /
    y) by 56 (softfloat.quotient64, written out where the code runs often). The remainder's
    sticky bit goes below q (q' = 2q + sticky: odd where inexact, as jamming), then q' is
    normalized and rounded. q' has its leading one at ww - 1 - n (ww: 32 / 64 bits), so the
    biased exponent - 1 is ea - eb + bias + 3 - n (binary32) or + 6 - n (binary64)."""
    em, F = B.em, r.F
    w = F.w
    maga, magb = B.and_(w, r.a, F.mag), B.and_(w, r.b, F.mag)
    ea, eb = _exp32(B, maga, F), _exp32(B, magb, F)
    # normal operands, and ea - eb + bias in [2, 2 bias - 1]: q2 has 4 or 5 (binary64: 7 or 8)
    # leading zeros, so e1 is ea - eb + bias - 2 or - 1, normal and finite after a rounding
    # carry (every check first)
    D = B.sub(32, ea, eb)
    _unless(B, [_normal(B, maga, F), _normal(B, magb, F), _within(B, D, 2 - F.bias, F.bias - 1)], general)
    if F is F32:
        steps = QUOTIENT_STEPS
        R = B.shl(64, B.cvt(64, 32, _sig(B, maga, F)), steps - 1)
        d = B.sub(64, B.shl(64, B.cvt(64, 32, _sig(B, magb, F)), steps), 1)
        for _ in range(steps):
            em.emit(f"dstep.b64 {R}, {R}, {d}")
        q = B.cvt(32, 64, B.and_(64, R, (1 << steps) - 1))
        sticky = B.sel(32, 1, 0, B.setp("ne", "b64", B.shr(64, R, steps), 0))
        ww, top = 32, 3
    else:
        from .lower import machine_steps         # (lower imports this module)
        q, R = quotient64(B, _sig(B, maga, F), _sig(B, magb, F), F.mbits + 4,
                          lambda n, turn: machine_steps(em, n, 1, turn))
        sticky = B.nonzero(64, R)
        ww, top = 64, 6
    q2 = B.or_(ww, B.shl(ww, q, 1), sticky)
    n = B.clz(ww, q2)
    sign = B.xor(w, r.a, r.b)
    sig, up = _round(B, B.shl(ww, q2, n), ww, r, sign, directed)
    e1 = B.sub(32, D, B.sub(32, n, F.bias + top))
    mag = _pack(B, F, e1, sig, up, ww)
    _finish(B, r, [], sign, mag, general, back)


def emit_sqrt(B: _B, r, general, back, directed=False):
    """sqrt(a) for a positive normal a (one compare: a - hidden < inf - hidden fails for the sign
    bit too; zeros, subnormals, infinities, NaNs and negatives take the general entry): a = m 2^E
    with E even (softfloat._root_scale, as the general entry), root and remainder of m 2^shift by
    the general entry's method (softfloat._isqrt: Karatsuba steps over a digit loop), the remainder's
    sticky bit jammed below the root, normalized and rounded. The result is always normal. R =
    2 root + sticky has its leading one at 63 - n after the shift, and sqrt(a) = R 2^((E - shift)
    / 2 - 1), so the biased exponent - 1 is 61 - n + (E - shift) / 2 + bias."""
    F = r.F
    w = F.w
    _unless(B, [_normal(B, r.a, F)], general)    # (no check at the end to split from: before the loop)
    mag = B.and_(w, r.a, F.mag)
    m, E, steps, shift = _root_scale(B, _sig(B, mag, F), B.sub(32, _exp32(B, mag, F), F.bias + F.mbits), F)
    root, rem = _isqrt(B, m if w == 64 else B.cvt(64, 32, m), shift, steps, F.mbits)
    R = B.or_(64, B.shl(64, root, 1), B.nonzero(64, rem))
    n = B.clz(64, R)
    sig, up = _round(B, B.shl(64, R, n), 64, r, r.a, directed)
    half = B.em.tmp(32)                      # (E - shift) / 2, E even (signed)
    B.em.emit(f"shr.s32 {half}, {B.sub(32, E, shift)}, 1")
    e1 = B.add(32, B.sub(32, half, n), 61 + F.bias)
    mag_out = _pack(B, F, e1, sig, up, 64)
    _finish(B, r, [], r.a, mag_out, general, back)


# each entry's emitter and the operands it reads (softfloat._inline writes one out at a site)
EMITTERS = {"add": emit_add, "mul": emit_mul, "fma": emit_fma, "sqrt": emit_sqrt, "div": emit_div}
READS = {"add": "ac", "mul": "ab", "fma": "abc", "sqrt": "a", "div": "ab"}    # the operands each reads
