"""Binary32 arithmetic lowered to integer machine steps (part of `gpu_layers.machine.lower`).

The compiled machine has no float datapath: add/sub/mul/fma/mad/div (every rounding mode), sqrt,
rcp, min/max, setp, the conversions between f32 and integers and rounding to integral values
become integer sequences that compute the IEEE result exactly as the reference interpreter does
(gpu_layers/interp/fp.py: no ftz, subnormals kept, canonical NaN 0x7FFFFFFF, -0 below +0 in
min/max).

add, sub, mul, fma, div, rcp and sqrt share one **subroutine** (`emit_routines`), emitted once
after the kernel's code: each site moves its operands into the argument registers, names itself
in a return register (a constant, so the return branch never depends on data) and branches to an
entry; the routine ends in a chain of compares that branches back to the site. A kernel with many
float operations therefore pays for the routine's code once (the core's program holds 512 PCs).
Each entry leaves an exact (or sticky) value P * 2^ep with its sign and special cases, and one
common part adds the addend c and rounds once, in the mode held in a register (0 rn, 1 rz, 2 rm,
3 rp). Entries (only those some site calls are emitted):

  * FMA: a * b, the exact 48-bit product (a 24-step shift-and-add loop);
  * ADD: a itself (a * 1.0 is exact). sub flips c's sign first; mul is fma(a, b, -0) (+0 under
    rm: x + (+-0) rounds like x in every mode, and a zero product keeps its sign);
  * DIV: a / b, a 27-bit quotient of the normalized significands (restoring division, 27 steps)
    with the remainder's sticky bit below it, c = -0 as for mul; rcp is 1.0 / b;
  * SQRT: the integer square root of the normalized significand scaled to an even exponent
    (27 steps, one bit each) with the remainder's sticky bit; sqrt(-0) = -0.

The common part aligns the normalized product and addend in 64-bit words (the smaller one shifted
right with a sticky bit), adds or subtracts, normalizes, and rounds once at bit 40 (or further
down for a subnormal result); overflow gives infinity or the largest finite value by the mode.

Poison: the original instruction's result is undefined when any operand is (the interpreter's
"prop" rule), but a select chain can mask an undefined operand (a NaN in another operand picks
the canonical NaN). So every result is finally xor-ed with a taint, (a ^ b ^ c) - itself: 0, or
undefined exactly when an operand is. Nothing branches on data.
"""
from __future__ import annotations

from gpu_layers.ptx.ir import FImm, Imm, Pair, Reg, Sink

SIGN, INF, CANON_NAN, FLT_MAX = 0x80000000, 0x7F800000, 0x7FFFFFFF, 0x7F7FFFFF
MODES = {"rn": 0, "rz": 1, "rm": 2, "rp": 3}
_M = {1: 1, 32: 0xFFFFFFFF, 64: (1 << 64) - 1}


class Fmt:
    """An IEEE binary format as the expansions see it: a pattern of `w` bits, `mbits` fraction
    bits; an exponent always fits a 32-bit register."""

    def __init__(self, name, w, mbits, bias, nan):
        self.name, self.w, self.mbits, self.bias = name, w, mbits, bias
        self.sign = 1 << (w - 1)
        self.mag = self.sign - 1                        # |x| mask
        self.frac = (1 << mbits) - 1
        self.hidden = 1 << mbits
        self.inf = self.mag ^ self.frac                 # exponent all ones, fraction 0
        self.max = self.inf - 1                         # the largest finite magnitude
        self.low = bias + mbits                         # x = sig * 2^(e - low) for finite x
        self.quiet = 1 << (mbits - 1)
        self.nan = nan          # f32: the canonical NaN of every NaN result; f64: what an invalid
                                # operation makes (a NaN operand passes through, quieted)


F32 = Fmt("f32", 32, 23, 127, CANON_NAN)
F64 = Fmt("f64", 64, 52, 1023, 0xFFF8000000000000)
FORMATS = {"f32": F32, "f64": F64}


def _val(op):
    """An operand as the builder takes it: an int for an immediate, else the register's name."""
    if isinstance(op, FImm):
        return op.bits
    if isinstance(op, Imm):
        return op.value
    return str(op)


class _B:
    """Emits integer machine instructions on fresh temporaries, folding constants (an int is a
    literal, a str a register; predicates fold to Python bools)."""

    def __init__(self, em):
        self.em = em

    def tmp(self, w):
        return self.em.tmp(w)

    def emit(self, text):
        self.em.emit(text)

    def _bin(self, w, name, ty, a, b, fold):
        if isinstance(a, int) and isinstance(b, int):
            return fold(a & _M[w], b & _M[w]) & _M[w]
        d = self.tmp(w)
        self.emit(f"{name}.{ty} {d}, {a}, {b}")
        return d

    def add(self, w, a, b):
        return self._bin(w, "add", f"u{w}", a, b, lambda x, y: x + y)

    def sub(self, w, a, b):
        return self._bin(w, "sub", f"u{w}", a, b, lambda x, y: x - y)

    def and_(self, w, a, b):
        return self._bin(w, "and", f"b{w}", a, b, lambda x, y: x & y)

    def or_(self, w, a, b):
        return self._bin(w, "or", f"b{w}", a, b, lambda x, y: x | y)

    def xor(self, w, a, b):
        return self._bin(w, "xor", f"b{w}", a, b, lambda x, y: x ^ y)

    def shl(self, w, a, n):
        return self._bin(w, "shl", f"b{w}", a, n, lambda x, y: x << y if y < w else 0)

    def shr(self, w, a, n):
        return self._bin(w, "shr", f"u{w}", a, n, lambda x, y: x >> y if y < w else 0)

    def umin(self, w, a, b):
        return self._bin(w, "min", f"u{w}", a, b, min)

    def smax(self, w, a, b):
        return self._bin(w, "max", f"s{w}", a, b, lambda x, y: max(_s(w, x), _s(w, y)))

    def cvt(self, to, frm, a):
        """Zero-extend or truncate (u to <- u frm)."""
        if isinstance(a, int):
            return a & _M[to]
        d = self.tmp(to)
        self.emit(f"cvt.u{to}.u{frm} {d}, {a}")
        return d

    def mov(self, w, a):
        d = self.tmp(w)
        self.emit(f"mov.b{w} {d}, {a}")
        return d

    def setp(self, cmp, ty, a, b):
        if isinstance(a, int) and isinstance(b, int):
            w = int(ty[1:])
            x, y = (a & _M[w], b & _M[w]) if ty[0] != "s" else (_s(w, a), _s(w, b))
            return {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y,
                    "ge": x >= y}[cmp]
        p = self.tmp(1)
        self.emit(f"setp.{cmp}.{ty} {p}, {a}, {b}")
        return p

    def sel(self, w, a, b, p):
        if isinstance(p, bool):
            return a if p else b
        if isinstance(a, int) and isinstance(b, int) and a & _M[w] == b & _M[w]:
            return a
        d = self.tmp(w)
        self.emit(f"selp.b{w} {d}, {a}, {b}, {p}")
        return d

    def pnot(self, p):
        if isinstance(p, bool):
            return not p
        d = self.tmp(1)
        self.emit(f"not.pred {d}, {p}")
        return d

    def pand(self, p, q):
        if isinstance(p, bool) or isinstance(q, bool):
            lit, other = (p, q) if isinstance(p, bool) else (q, p)
            return other if lit else False
        d = self.tmp(1)
        self.emit(f"and.pred {d}, {p}, {q}")
        return d

    def por(self, p, q):
        if isinstance(p, bool) or isinstance(q, bool):
            lit, other = (p, q) if isinstance(p, bool) else (q, p)
            return True if lit else other
        d = self.tmp(1)
        self.emit(f"or.pred {d}, {p}, {q}")
        return d

    def pxor(self, p, q):
        if isinstance(p, bool) and isinstance(q, bool):
            return p != q
        if isinstance(q, bool):
            p, q = q, p
        if isinstance(p, bool):
            return self.pnot(q) if p else q
        d = self.tmp(1)
        self.emit(f"xor.pred {d}, {p}, {q}")
        return d

    def clz(self, w, x):
        """Leading zeros of w-bit x as a 32-bit value (w for 0): a binary search of log2(w) steps."""
        v, n, s = x, 0, w // 2
        while s:
            top = self.shr(w, v, w - s)
            z = self.setp("eq", f"b{w}", top, 0)
            v = self.sel(w, self.shl(w, v, s), v, z)
            n = self.sel(32, self.add(32, n, s), n, z)
            s //= 2
        zero = self.setp("eq", f"b{w}", v, 0)          # only for x == 0 (n is then w - 1)
        return self.sel(32, self.add(32, n, 1), n, zero)

    def taint(self, ops, w=32):
        """0, or an undefined value exactly when one of the operands (w-bit) is undefined."""
        regs = [o for o in ops if isinstance(o, str)]
        if not regs:
            return 0
        t = regs[0]
        for r in regs[1:]:
            t = self.xor(w, t, r)
        return self.sub(w, t, t)

    def taint_pred(self, ops, w=32):
        """False, or an undefined predicate exactly when one of the operands is undefined."""
        t = self.taint(ops, w)
        return False if isinstance(t, int) else self.setp("ne", f"b{w}", t, 0)


def _s(w, x):
    x &= _M[w]
    return x - (1 << w) if x >> (w - 1) else x


def _fields(B, x, F=F32):
    """(sign bit 0/1, significand with the hidden bit, biased exponent clamped to >= 1 (32-bit),
    |x|) of the pattern x of format F: x's value is sig * 2^(exp - F.low) for every finite x."""
    w = F.w
    mag = B.and_(w, x, F.mag)
    sign = B.shr(w, x, w - 1)
    e = B.shr(w, mag, F.mbits)
    if w == 64:
        e = B.cvt(32, 64, e)
    frac = B.and_(w, x, F.frac)
    sub = B.setp("eq", "b32", e, 0)
    sig = B.sel(w, frac, B.or_(w, frac, F.hidden), sub)
    return sign, sig, B.sel(32, 1, e, sub), mag


def _is_nan(B, mag, F=F32):
    return B.setp("gt", f"u{F.w}", mag, F.inf)


# ----------------------------------------------------------------------- the shared subroutine


class _FmaRoutine:
    """Registers and sites of one kernel's float subroutine (created on first use)."""

    def __init__(self, em):
        self.a, self.b, self.c = em.tmp(32), em.tmp(32), em.tmp(32)
        self.mode, self.ret, self.out = em.tmp(32), em.tmp(32), em.tmp(32)
        self.fma, self.add, self.div, self.sqrt = em.label(), em.label(), em.label(), em.label()
        self.sites = []         # per call site k: (index of its bra, entry label, return label)
        self.returns = []       # indices of the routine's return branches


def _routine(em) -> _FmaRoutine:
    r = getattr(em, "fma_routine", None)
    if r is None:
        r = em.fma_routine = _FmaRoutine(em)
    return r


def _call(em, entry, a, b, c, mode) -> str:
    """Branch to the routine's `entry` ("fma", "add", "div", "sqrt") with these operands; the
    result register."""
    r = _routine(em)
    k = len(r.sites)
    back = em.label()
    for reg, v in ((r.a, a), (r.b, b), (r.c, c)):
        if v is not None:
            em.emit(f"mov.b32 {reg}, {v}")
    em.emit(f"mov.b32 {r.mode}, {MODES[mode]}")
    em.emit(f"mov.b32 {r.ret}, {k}")
    target = getattr(r, entry)
    r.sites.append((len(em.code), target, back))
    em.emit(f"bra {target}")
    em.place(back)
    return r.out


def emit_routines(em) -> None:
    """The float subroutine after the kernel's code, when some instruction called it."""
    r = getattr(em, "fma_routine", None)
    if r is None:
        return
    B = _B(em)
    P, ep, sp = em.tmp(64), em.tmp(32), em.tmp(32)
    pnan, pinf = em.tmp(1), em.tmp(1)
    used = {target for _, target, _ in r.sites}         # only the entries some site calls
    common = em.label()
    entries = [(lab, emit) for lab, emit in ((r.add, _emit_addend), (r.div, _emit_quotient),
                                             (r.sqrt, _emit_root), (r.fma, _emit_product))
               if lab in used]
    for k, (lab, emit) in enumerate(entries):      # each leaves P * 2^ep, sp, pnan, pinf
        em.place(lab)
        emit(B, r, P, ep, sp, pnan, pinf)
        if k < len(entries) - 1:
            em.emit(f"bra {common}")
    em.place(common)
    _emit_sum(B, r, P, ep, sp, pnan, pinf)
    for k, (_, _, back) in enumerate(r.sites):                  # return to the calling site
        if k < len(r.sites) - 1:
            p = B.setp("eq", "u32", r.ret, k)
            r.returns.append(len(em.code))
            em.emit(f"@{p} bra {back}")
        else:
            r.returns.append(len(em.code))
            em.emit(f"bra {back}")


def _emit_addend(B, r, P, ep, sp, pnan, pinf):
    """The ADD entry: the "product" is a itself (a * 1.0)."""
    em = B.em
    s, sig, e, mag = _fields(B, r.a)
    em.emit(f"cvt.u64.u32 {P}, {sig}")
    em.emit(f"sub.s32 {ep}, {e}, 150")
    em.emit(f"mov.b32 {sp}, {s}")
    em.emit(f"setp.gt.u32 {pnan}, {mag}, {INF}")
    em.emit(f"setp.eq.u32 {pinf}, {mag}, {INF}")


def _normalized(B, sig, e):
    """(sig shifted to a leading one at bit 23, the biased exponent lowered to match): a
    subnormal's significand too, so that a quotient or root has its full 26 bits. 0 stays 0."""
    n = B.sub(32, B.clz(32, sig), 8)
    return B.shl(32, sig, n), B.sub(32, e, n)


def _emit_quotient(B, r, P, ep, sp, pnan, pinf):
    """The DIV entry: a / b as a 27-bit quotient of the normalized significands (restoring
    division, one bit per step) with the remainder's sticky bit below it, into P * 2^ep."""
    em = B.em
    sa, ma, ea, maga = _fields(B, r.a)
    sb, mb, eb, magb = _fields(B, r.b)
    em.emit(f"xor.b32 {sp}, {sa}, {sb}")
    ainf, binf = B.setp("eq", "u32", maga, INF), B.setp("eq", "u32", magb, INF)
    azero, bzero = B.setp("eq", "u32", maga, 0), B.setp("eq", "u32", magb, 0)
    inv = B.por(B.pand(ainf, binf), B.pand(azero, bzero))             # inf / inf, 0 / 0
    em.emit(f"or.pred {pnan}, {B.por(_is_nan(B, maga), _is_nan(B, magb))}, {inv}")
    em.emit(f"or.pred {pinf}, {ainf}, {bzero}")                       # x / 0 is infinite
    x, ex = _normalized(B, ma, ea)
    y, ey = _normalized(B, mb, eb)
    # a / b = (x / y) * 2^(ex - ey), and x * 2^26 / y has 26 or 27 bits
    em.emit(f"sub.s32 {ep}, {B.sub(32, ex, ey)}, 27")
    rem, q, cnt = em.tmp(32), em.tmp(32), em.tmp(32)
    em.emit(f"selp.b32 {rem}, 0, {x}, {binf}")                        # x / inf is 0
    em.emit(f"mov.b32 {q}, 0")
    em.emit(f"mov.b32 {cnt}, 27")
    top = em.label()
    em.place(top)                       # rem < 2y throughout (x < 2^24 <= 2y)
    take = B.setp("ge", "u32", rem, y)
    em.emit(f"selp.b32 {rem}, {B.sub(32, rem, y)}, {rem}, {take}")
    q2 = B.shl(32, q, 1)
    em.emit(f"selp.b32 {q}, {B.or_(32, q2, 1)}, {q2}, {take}")
    em.emit(f"shl.b32 {rem}, {rem}, 1")
    em.emit(f"sub.u32 {cnt}, {cnt}, 1")
    more = B.setp("ne", "u32", cnt, 0)
    em.emit(f"@{more} bra {top}")
    sticky = B.sel(32, 1, 0, B.setp("ne", "b32", rem, 0))
    em.emit(f"cvt.u64.u32 {P}, {B.or_(32, B.shl(32, q, 1), sticky)}")


def _emit_root(B, r, P, ep, sp, pnan, pinf):
    """The SQRT entry: the integer square root of the normalized significand (an even exponent,
    scaled by 2^28: a 26- or 27-bit root, one bit per step) with the remainder's sticky bit below
    it, into P * 2^ep. sqrt(-0) = -0 (the sign is a's), a negative number gives NaN."""
    em = B.em
    s, sig, e, mag = _fields(B, r.a)
    em.emit(f"mov.b32 {sp}, {s}")
    neg = B.pand(B.setp("ne", "b32", s, 0), B.setp("ne", "u32", mag, 0))
    em.emit(f"or.pred {pnan}, {_is_nan(B, mag)}, {neg}")
    em.emit(f"setp.eq.u32 {pinf}, {mag}, {INF}")
    m, be = _normalized(B, sig, e)
    E = B.sub(32, be, 150)                  # a = m * 2^E; make E even
    odd = B.and_(32, E, 1)
    m = B.shl(32, m, odd)
    E = B.sub(32, E, odd)
    # sqrt(a) = sqrt(m * 2^28) * 2^(E/2 - 14)
    em.emit(f"shr.s32 {ep}, {E}, 1")
    em.emit(f"sub.s32 {ep}, {ep}, 15")
    num, res, bit = em.tmp(64), em.tmp(64), em.tmp(64)
    em.emit(f"shl.b64 {num}, {B.cvt(64, 32, m)}, 28")        # < 2^53
    em.emit(f"mov.b64 {res}, 0")
    em.emit(f"mov.b64 {bit}, {1 << 52}")
    top = em.label()
    em.place(top)                           # 27 steps: bit = 4^26 .. 4^0
    t = B.add(64, res, bit)
    take = B.setp("ge", "u64", num, t)
    em.emit(f"selp.b64 {num}, {B.sub(64, num, t)}, {num}, {take}")
    em.emit(f"shr.u64 {res}, {res}, 1")
    em.emit(f"selp.b64 {res}, {B.add(64, res, bit)}, {res}, {take}")
    em.emit(f"shr.u64 {bit}, {bit}, 2")
    more = B.setp("ne", "b64", bit, 0)
    em.emit(f"@{more} bra {top}")
    sticky = B.sel(64, 1, 0, B.setp("ne", "b64", num, 0))
    em.emit(f"or.b64 {P}, {B.shl(64, res, 1)}, {sticky}")


def _emit_product(B, r, P, ep, sp, pnan, pinf):
    """The FMA entry: the exact product of a and b into P * 2^ep (sign sp), its NaN / inf cases
    (signs, exponent and special cases first, so only the significands and the product stay live
    through the loop)."""
    em = B.em
    sa, ma, ea, maga = _fields(B, r.a)
    sb, mb, eb, magb = _fields(B, r.b)
    em.emit(f"add.u32 {ep}, {B.add(32, ea, eb)}, -300")
    em.emit(f"xor.b32 {sp}, {sa}, {sb}")
    ainf, binf = B.setp("eq", "u32", maga, INF), B.setp("eq", "u32", magb, INF)
    inv = B.por(B.pand(ainf, B.setp("eq", "u32", magb, 0)),
                B.pand(binf, B.setp("eq", "u32", maga, 0)))            # inf * 0
    em.emit(f"or.pred {pinf}, {ainf}, {binf}")
    em.emit(f"or.pred {pnan}, {B.por(_is_nan(B, maga), _is_nan(B, magb))}, {inv}")
    x, y, cnt = em.tmp(64), em.tmp(64), em.tmp(32)
    em.emit(f"cvt.u64.u32 {x}, {ma}")
    em.emit(f"cvt.u64.u32 {y}, {mb}")
    em.emit(f"mov.b64 {P}, 0")
    em.emit(f"mov.b32 {cnt}, 24")
    top = em.label()
    em.place(top)                       # 24 steps: b's significand has 24 bits
    bit = B.and_(64, y, 1)
    take = B.setp("ne", "b64", bit, 0)
    em.emit(f"selp.b64 {P}, {B.add(64, P, x)}, {P}, {take}")
    em.emit(f"shl.b64 {x}, {x}, 1")
    em.emit(f"shr.u64 {y}, {y}, 1")
    em.emit(f"sub.u32 {cnt}, {cnt}, 1")
    more = B.setp("ne", "u32", cnt, 0)
    em.emit(f"@{more} bra {top}")


def call_table(em) -> tuple[list, frozenset]:
    """(Kernel.calls, Kernel.returns) of the lowered kernel."""
    r = getattr(em, "fma_routine", None)
    if r is None:
        return [], frozenset()
    return [(i, em.labels[e], em.labels[b]) for i, e, b in r.sites], frozenset(r.returns)


def _emit_sum(B, r, P, ep, sp, pnan, pinf):
    """out = round(P * 2^ep * (-1)^sp + c) by the mode, with the special cases. Ordered so that
    few predicates are live at once (each pool of the register file counts apart)."""
    em = B.em
    mode = r.mode
    sc, mc, ec, magc = _fields(B, r.c)
    # the special results, kept as one value and one predicate
    cinf = B.setp("eq", "u32", magc, INF)
    clash = B.pand(B.pand(pinf, cinf), B.setp("ne", "b32", sp, sc))      # inf - inf
    nan = B.por(B.por(pnan, _is_nan(B, magc)), clash)
    spec = B.sel(32, CANON_NAN, B.sel(32, B.or_(32, B.shl(32, sp, 31), INF), r.c, pinf), nan)
    special = B.por(B.por(nan, pinf), cinf)
    # the sign of an exact zero: the operands' when they agree, else - only when rounding down
    zsign = B.sel(32, sp, B.sel(32, 1, 0, B.setp("eq", "u32", mode, MODES["rm"])),
                  B.setp("eq", "b32", sp, sc))
    # normalize both to a leading one at bit 57 (bits 0..9 of X and 0..33 of Y are zero)
    kx = B.sub(32, B.clz(64, P), 6)
    X = B.shl(64, P, kx)
    eX = B.sub(32, ep, kx)
    ky = B.add(32, B.clz(32, mc), 26)
    Y = B.shl(64, B.cvt(64, 32, mc), ky)
    eY = B.sub(32, B.sub(32, ec, 150), ky)
    tie = B.pand(B.setp("eq", "s32", eX, eY), B.setp("ge", "u64", X, Y))
    bigger = B.pand(B.setp("ne", "b64", P, 0), B.por(B.setp("gt", "s32", eX, eY), tie))
    big = B.por(B.setp("eq", "b32", mc, 0), bigger)
    L, S = B.sel(64, X, Y, big), B.sel(64, Y, X, big)
    E = B.sel(32, eX, eY, big)
    d = B.sel(32, B.sub(32, eX, eY), B.sub(32, eY, eX), big)
    rsign = B.sel(32, sp, sc, big)
    lost = B.and_(64, S, B.sub(64, B.shl(64, 1, d), 1))
    Sj = B.or_(64, B.shr(64, S, d), B.sel(64, 1, 0, B.setp("ne", "b64", lost, 0)))
    R = B.sel(64, B.sub(64, L, Sj), B.add(64, L, Sj), B.setp("ne", "b32", sp, sc))
    # normalize to bit 63; biased exponent of the leading bit; round at bit 40 (subnormal: lower)
    n = B.clz(64, R)
    R2 = B.shl(64, R, n)
    be = B.add(32, B.sub(32, E, n), 190)
    bc = B.smax(32, be, 1)
    s = B.umin(32, B.add(32, B.sub(32, bc, be), 40), 65)
    q = B.cvt(32, 64, B.shr(64, R2, s))
    rem = B.and_(64, R2, B.sub(64, B.shl(64, 1, s), 1))
    half = B.shl(64, 1, B.sub(32, s, 1))
    at = B.pand(B.setp("eq", "b64", rem, half), B.setp("ne", "b32", B.and_(32, q, 1), 0))
    above = B.pand(B.setp("gt", "u64", rem, half), B.setp("ne", "u32", s, 65))  # s = 65: far below
    rn = B.setp("eq", "u32", mode, MODES["rn"])
    up_rn = B.pand(rn, B.por(above, at))
    # the directed mode that rounds away from zero for this sign (rp for +, rm for -)
    away = B.setp("eq", "u32", mode, B.sel(32, MODES["rm"], MODES["rp"], B.setp("ne", "b32", rsign, 0)))
    up = B.sel(32, 1, 0, B.por(up_rn, B.pand(away, B.setp("ne", "b64", rem, 0))))
    bits = B.add(32, B.add(32, B.shl(32, B.sub(32, bc, 1), 23), q), up)
    sgn = B.shl(32, rsign, 31)
    ovf = B.or_(32, sgn, B.sel(32, INF, FLT_MAX, B.por(rn, away)))
    fin = B.sel(32, ovf, B.or_(32, sgn, bits), B.setp("ge", "u32", bits, INF))
    fin = B.sel(32, B.shl(32, zsign, 31), fin, B.setp("eq", "b64", R, 0))
    em.emit(f"selp.b32 {r.out}, {spec}, {fin}, {special}")


# --------------------------------------------------------------------------- the expansions


def _write(em, ins, value, taint, w=32, tw=32):
    """The one guarded write of the w-bit destination: value ^ taint (`_B.taint`, tw bits)."""
    B = _B(em)
    if not (isinstance(taint, int) and taint == 0):
        if tw != w:
            taint = B.cvt(w, tw, taint)
        value = B.xor(w, value, taint)
    g = f"{ins.guard} " if ins.guard else ""
    em.emit(f"{g}mov.b{w} {ins.operands[0]}, {value}")


def _rmode(ins) -> str:
    return next((m for m in ins.modifiers if m in MODES), "rn")


def _zero(mode):
    """The addend that leaves a product, quotient or root unchanged in `mode`, zeros' signs
    included: -0, or +0 when rounding down (x + (+-0) rounds like x; an exact zero keeps x's sign)."""
    return 0 if mode == "rm" else SIGN


def x_fbin(em, ins):
    """add/sub/mul/div.f32."""
    a, b = _val(ins.operands[1]), _val(ins.operands[2])
    mode = _rmode(ins)
    B = _B(em)
    if ins.opcode in ("mul", "div"):
        out = _call(em, "fma" if ins.opcode == "mul" else "div", a, b, _zero(mode), mode)
    else:
        c = b if ins.opcode == "add" else B.xor(32, b, SIGN)
        out = _call(em, "add", a, None, c, mode)
    _write(em, ins, out, B.taint([a, b]))


def x_funary(em, ins):
    """sqrt.rn.f32 and rcp.rn.f32 (= 1.0 / a, as the interpreter defines it)."""
    a = _val(ins.operands[1])
    if ins.opcode == "sqrt":
        out = _call(em, "sqrt", a, None, _zero("rn"), "rn")
    else:
        out = _call(em, "div", 0x3F800000, a, _zero("rn"), "rn")
    _write(em, ins, out, _B(em).taint([a]))


def x_ffma(em, ins):
    a, b, c = (_val(o) for o in ins.operands[1:4])
    out = _call(em, "fma", a, b, c, _rmode(ins))
    _write(em, ins, out, _B(em).taint([a, b, c]))


def _key(B, x):
    """A signed 32-bit integer ordered like the float x (-0 == +0), and x's NaN predicate."""
    mag = B.and_(32, x, 0x7FFFFFFF)
    neg = B.setp("lt", "s32", x, 0)
    return B.sel(32, B.sub(32, 0, mag), mag, neg), _is_nan(B, mag)


def x_fminmax(em, ins):
    """min/max.f32: the non-NaN operand when one is NaN, canonical NaN when both, -0 < +0."""
    B = _B(em)
    a, b = _val(ins.operands[1]), _val(ins.operands[2])

    def order(x):        # ordered like the float, with -0 below +0 (NaNs are handled apart)
        neg = B.setp("lt", "s32", x, 0)
        return B.sel(32, B.xor(32, x, 0xFFFFFFFF), B.or_(32, x, SIGN), neg)

    ka, kb = order(a), order(b)
    na, nb = _is_nan(B, B.and_(32, a, 0x7FFFFFFF)), _is_nan(B, B.and_(32, b, 0x7FFFFFFF))
    first = B.setp("le" if ins.opcode == "min" else "ge", "u32", ka, kb)
    r = B.sel(32, a, b, first)
    r = B.sel(32, a, r, nb)
    r = B.sel(32, B.sel(32, CANON_NAN, b, nb), r, na)
    _write(em, ins, r, B.taint([a, b]))


def x_fsetp(em, ins):
    """setp.CMP[.BOOL].f32 p[|q], a, b[, c]: the comparison on ordered integer keys."""
    B = _B(em)
    cmp = ins.modifiers[0]
    a, b = _val(ins.operands[1]), _val(ins.operands[2])
    ka, na = _key(B, a)
    kb, nb = _key(B, b)
    unord = B.por(na, nb)
    if cmp == "num":
        r = B.pnot(unord)
    elif cmp == "nan":
        r = unord
    elif cmp.endswith("u"):
        r = B.por(unord, B.setp(cmp[:-1], "s32", ka, kb))
    else:
        r = B.pand(B.pnot(unord), B.setp(cmp, "s32", ka, kb))
    boolop = ins.modifiers[1] if len(ins.modifiers) > 1 else None
    c = _val(ins.operands[3]) if boolop else None
    tp = B.taint_pred([a, b])
    if isinstance(c, str):      # the predicate operand's own taint: c ^ c
        tp = B.pxor(tp, B.pxor(c, c))
    dst = ins.operands[0]
    outs = [(dst.first, False), (dst.second, True)] if isinstance(dst, Pair) else [(dst, False)]
    g = f"{ins.guard} " if ins.guard else ""
    for d, negate in outs:
        if isinstance(d, Sink):
            continue
        v = B.pnot(r) if negate else r
        if boolop:
            v = {"and": B.pand, "or": B.por, "xor": B.pxor}[boolop](v, c)
        v = B.pxor(v, tp)
        if isinstance(v, bool):
            v = B.setp("ne", "b32", B.mov(32, int(v)), 0)
        em.emit(f"{g}mov.pred {d}, {v}")


# ------------------------------------------------------------------------------ conversions


def x_cvt_from_int(em, ins):
    """cvt.{rn,rz,rm,rp}.f32.{s,u}{8..64}: the integer's magnitude normalized to bit 63, rounded
    once at bit 40 (an integer's binary32 value is always a normal number or zero)."""
    B = _B(em)
    st = ins.types[1]
    w, signed = int(st[1:]), st[0] == "s"
    mode = _rmode(ins)
    src = _val(ins.operands[1])
    v = B.tmp(64)
    if w == 64:
        em.emit(f"mov.b64 {v}, {src}")
    else:
        em.emit(f"cvt.{'s' if signed else 'u'}64.{st} {v}, {src}")
    neg = B.setp("lt", "s64", v, 0) if signed else False
    a = B.sel(64, B.sub(64, 0, v), v, neg) if signed else v
    n = B.clz(64, a)
    R2 = B.shl(64, a, n)
    q = B.cvt(32, 64, B.shr(64, R2, 40))
    rem = B.and_(64, R2, (1 << 40) - 1)
    if mode == "rn":
        up = B.por(B.setp("gt", "u64", rem, 1 << 39),
                   B.pand(B.setp("eq", "b64", rem, 1 << 39), B.setp("ne", "b32", B.and_(32, q, 1), 0)))
    elif mode == "rz":
        up = False
    else:
        away = neg if mode == "rm" else B.pnot(neg)
        up = B.pand(away, B.setp("ne", "b64", rem, 0))
    bits = B.add(32, B.add(32, B.shl(32, B.sub(32, 189, n), 23), q), B.sel(32, 1, 0, up))
    bits = B.sel(32, 0, bits, B.setp("eq", "b64", a, 0))
    if signed:
        bits = B.or_(32, bits, B.sel(32, SIGN, 0, neg))
    _write(em, ins, bits, B.cvt(32, 64, B.sub(64, v, v)))


_INT_LIMITS = {"s32": ((1 << 31) - 1, 1 << 31, 0), "u32": ((1 << 32) - 1, 0, 0),
               "s64": ((1 << 63) - 1, 1 << 63, 1 << 63), "u64": ((1 << 64) - 1, 0, 1 << 63)}


def x_cvt_to_int(em, ins):
    """cvt.{rni,rzi,rmi,rpi}.{s,u}{32,64}.f32: round to an integer by the mode and saturate;
    NaN gives 0 (32-bit) or 1 << 63 (64-bit), as the interpreter (and an A100) does."""
    B = _B(em)
    dt = ins.types[0]
    w = int(dt[1:])
    hi, lo_mag, nan_val = _INT_LIMITS[dt]
    x = _val(ins.operands[1])
    sign, sig, e, mag = _fields(B, x)
    neg = B.setp("ne", "b32", sign, 0)
    k = B.sub(32, e, 150)                        # x = sig * 2^k
    left = B.setp("ge", "s32", k, 0)
    big = B.setp("gt", "s32", k, 40)             # |x| >= 2^64: saturates (infinities too)
    sig64 = B.cvt(64, 32, sig)
    whole = B.shl(64, sig64, B.umin(32, k, 40))
    r = B.umin(32, B.sub(32, 0, k), 40)          # right shift (sig < 2^24: 40 is as good as more)
    q = B.shr(64, sig64, r)
    rem = B.and_(64, sig64, B.sub(64, B.shl(64, 1, r), 1))
    half = B.shl(64, 1, B.sub(32, r, 1))
    mode = next(m for m in ins.modifiers if m in ("rni", "rzi", "rmi", "rpi"))
    if mode == "rni":
        up = B.por(B.setp("gt", "u64", rem, half),
                   B.pand(B.setp("eq", "b64", rem, half), B.setp("ne", "b64", B.and_(64, q, 1), 0)))
    elif mode == "rzi":
        up = False
    else:
        away = neg if mode == "rmi" else B.pnot(neg)
        up = B.pand(away, B.setp("ne", "b64", rem, 0))
    m = B.sel(64, whole, B.add(64, q, B.sel(64, 1, 0, up)), left)
    over = B.pand(B.pnot(neg), B.por(big, B.setp("gt", "u64", m, hi)))
    if lo_mag:
        under = B.pand(neg, B.por(big, B.setp("gt", "u64", m, lo_mag)))
        val = B.sel(64, B.sub(64, 0, m), m, neg)
        lo = (-lo_mag) & _M[64]
    else:
        under = B.pand(neg, B.por(big, B.setp("ne", "b64", m, 0)))   # negatives saturate to 0
        val, lo = m, 0
    val = B.sel(64, hi, B.sel(64, lo, val, under), over)
    val = B.sel(64, nan_val, val, _is_nan(B, mag))
    if w == 32:
        val = B.cvt(32, 64, val)
    _write(em, ins, val, B.taint([x]), w)


def x_cvt_round_integral(em, ins):
    """cvt.{rni,rzi,rmi,rpi}.f32.f32: clear the fraction bits of |x| (2^k, k = 150 - exponent,
    is the unit), adding one unit when the mode rounds away; a carry into the exponent is the
    right value. |x| < 1 gives 0 or 1, the sign stays (-0.3 -> -0), |x| >= 2^23 and infinities
    are already integral, NaN gives the canonical NaN."""
    B = _B(em)
    mode = next(m for m in ins.modifiers if m in ("rni", "rzi", "rmi", "rpi"))
    x = _val(ins.operands[1])
    mag = B.and_(32, x, 0x7FFFFFFF)
    e = B.shr(32, mag, 23)
    one = B.shl(32, 1, B.umin(32, B.sub(32, 150, e), 23))
    rem = B.and_(32, mag, B.sub(32, one, 1))
    trunc = B.xor(32, mag, rem)
    neg = B.setp("lt", "s32", x, 0)
    if mode == "rni":
        half = B.shr(32, one, 1)
        odd = B.setp("ne", "b32", B.and_(32, mag, one), 0)
        up = B.por(B.setp("gt", "u32", rem, half), B.pand(B.setp("eq", "b32", rem, half), odd))
        small_up = B.setp("gt", "u32", mag, 0x3F000000)
    elif mode == "rzi":
        up = small_up = False
    else:
        away = neg if mode == "rmi" else B.pnot(neg)
        up = B.pand(away, B.setp("ne", "b32", rem, 0))
        small_up = B.pand(away, B.setp("ne", "b32", mag, 0))
    res = B.sel(32, B.sel(32, 0x3F800000, 0, small_up), B.sel(32, B.add(32, trunc, one), trunc, up),
                B.setp("lt", "u32", e, 127))
    res = B.or_(32, B.and_(32, x, SIGN), res)
    res = B.sel(32, x, res, B.setp("ge", "u32", e, 150))
    res = B.sel(32, CANON_NAN, res, _is_nan(B, mag))
    _write(em, ins, res, B.taint([x]))


def x_cvt_sat(em, ins):
    """cvt.sat.f32.f32: clamp to [0, 1]; NaN and -0 give +0."""
    B = _B(em)
    x = _val(ins.operands[1])
    mag = B.and_(32, x, 0x7FFFFFFF)
    neg = B.setp("lt", "s32", x, 0)
    res = B.sel(32, 0x3F800000, x, B.setp("ge", "u32", mag, 0x3F800000))
    res = B.sel(32, 0, res, B.por(neg, _is_nan(B, mag)))
    _write(em, ins, res, B.taint([x]))


def cvt_expansion(ins):
    """The expansion of an f32 <-> integer cvt, or None."""
    dt, st = ins.types
    ints = {f"{s}{w}" for s in "su" for w in (8, 16, 32, 64)}
    if dt == "f32" and st in ints and "sat" not in ins.modifiers:
        return x_cvt_from_int
    if st == "f32" and dt in _INT_LIMITS:
        return x_cvt_to_int
    if st == dt == "f32":
        return x_cvt_sat if "sat" in ins.modifiers else x_cvt_round_integral
    return None


FLOAT_EXPANSIONS = {"fbin": x_fbin, "ffma": x_ffma, "funary": x_funary, "fminmax": x_fminmax,
                    "fsetp": x_fsetp}
