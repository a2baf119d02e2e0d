"""Binary32 and binary64 arithmetic lowered to integer machine steps (part of
`gpu_layers.machine.lower`).

The compiled machine has no float datapath: add/sub/mul/fma/mad/div (every rounding mode), sqrt,
rcp, min/max, setp, the conversions between floats and integers and between f32 and f64, rounding
to integral values and float atomic adds become integer sequences that compute the IEEE result
exactly as the reference interpreter does (gpu_layers/interp/fp.py and fp64.py: no ftz,
subnormals kept, -0 below +0 in min/max; f32 NaN results are the canonical 0x7FFFFFFF, an f64 NaN
result is the NaN operand with its sign and payload and the quiet bit set, in the hardware's order
of priority, and an invalid operation gives 0xFFF8000000000000). Everything is written once for
both formats (`Fmt`: the instruction's type picks F32 or F64).

add, sub, mul, fma, div, rcp and sqrt share one **subroutine** per format (`emit_routines`),
emitted once after the kernel's code: each site moves its operands into the argument registers,
names itself in a return register (a constant, so the return branch never depends on data) and
branches to an entry; the routine ends in a tree of compares (`emit_returns`, about 2 log2(sites)
steps) that branches back to the site. A kernel with many float operations therefore pays for
the routine's code once (the core's program holds 1,024 PCs). Where the program still fits,
`lower(inline_floats=True)` writes each site's fast entry (fast_paths.py) out at the site on the
site's own registers instead (`_inline`): only the lanes that fall back call the routine. Each
entry leaves an exact (or sticky) value P * 2^ep with its sign and special cases, and one common
part adds the addend c and rounds once, in the mode held in a register (0 rn, 1 rz, 2 rm, 3 rp).
Entries (only those some site calls are emitted):

  * FMA: a * b, the exact product (shift-and-add loops over b's significand bits from the bottom,
    four a turn: 24 for binary32, two halves of 27 for binary64's four 27-bit partial products);
  * ADD: a itself (a * 1.0 is exact). sub flips c's sign first; mul is fma(a, b, -0) (+0 under
    rm: x + (+-0) rounds like x in every mode, and a zero product keeps its sign);
  * DIV: a / b, a quotient of the normalized significands with 27 / 56 bits (restoring division,
    one machine divide step a bit: `_f32_quotient`, `_f64_quotient`) and the remainder's sticky
    bit below it, c = -0 as for mul; rcp is 1.0 / b;
  * SQRT: the integer square root of the normalized significand scaled to an even exponent (the
    root's top half a bit per turn in 64-bit registers, the significand's own bit pairs in place,
    its low half a quotient of machine divide steps: `_isqrt`) with the remainder's sticky bit;
    sqrt(-0) = -0.

The common part works on wide words (`_W64`: one 64-bit register for binary32, `_W128`: a pair of
64-bit registers for binary64's 106-bit products; shifts by a register use PTX's clamped shift
amounts, so neither branches): it aligns the normalized product and addend (the smaller one
shifted right with a sticky bit), adds or subtracts, normalizes, and rounds once below the
significand (further down for a subnormal result); overflow gives infinity or the largest finite
value by the mode.

Float atomic adds (atom/red .add.f32/.f64) are compare-and-swap loops around the ADD entry
(`x_fatom`): each addition is the instruction's own, one at a time per word; the order is the
machine's, as on a GPU.

Poison: the original instruction's result is undefined when any operand is (the interpreter's
"prop" rule), but a select chain can mask an undefined operand (a NaN in another operand picks
a NaN). So every result is finally xor-ed with a taint, (a ^ b ^ c) - itself: 0, or undefined
exactly when an operand is (an operand proven defined, gpu_layers.machine.definedness, needs no
taint). Nothing here branches on data (the atomics' retry branches on memory, which an atomic's
operands may not hold undefined anyway); the fast entries of add, mul and fma (fast_paths.py) do,
and only sites whose operands are proven defined call them.
"""
from __future__ import annotations

from gpu_layers.ptx.ir import FImm, Imm, Pair, Sink

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
        self.one = bias << mbits                        # 1.0
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

    def nonzero(self, w, a):
        """1 where a != 0, else 0: one unsigned min (a compare and a select of two numbers would
        be three steps: selp has one immediate)."""
        return self.umin(w, a, 1)

    def umax(self, w, a, b):
        return self._bin(w, "max", f"u{w}", a, b, max)

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
        """Leading zeros of w-bit x as a 32-bit value (w for 0): one ALU step."""
        n = self.tmp(32)
        self.emit(f"clz.b{w} {n}, {x}")
        return n

    def taint(self, ops, w=32):
        """0, or an undefined value exactly when one of the operands (w-bit) is undefined (0
        without a step when each is an immediate or proven defined: definedness.py)."""
        regs = [o for o in ops if not self.em.is_defined(o)]
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


def _nan_bits(B, x, F):
    """Whether the pattern x (not yet masked to |x|) is a NaN."""
    return _is_nan(B, B.and_(F.w, x, F.mag), F)


# ----------------------------------------------------------------------- routine words


class _W64:
    """The float routine's wide words for binary32: one 64-bit register (a product has 48 bits)."""

    w = 64

    def __init__(self, B):
        self.B = B

    def reg(self):
        return self.B.tmp(64)

    def set(self, dst, v):
        self.B.emit(f"mov.b64 {dst}, {v}")

    def set_from(self, dst, x, w):
        """dst = the w-bit x zero-extended."""
        self.B.emit(f"cvt.u64.u32 {dst}, {x}" if w == 32 else f"mov.b64 {dst}, {x}")

    def set_sel(self, dst, a, b, p):
        self.B.emit(f"selp.b64 {dst}, {a}, {b}, {p}")

    def step(self, dst, op, n):
        """dst = dst shifted by the constant n ("shl" / "shr"), in place."""
        self.B.emit(f"{op}.{'b64' if op == 'shl' else 'u64'} {dst}, {dst}, {n}")

    def from_(self, x, w):
        return x if w == 64 else self.B.cvt(64, w, x)

    def add(self, a, b):
        return self.B.add(64, a, b)

    def sub(self, a, b):
        return self.B.sub(64, a, b)

    def and_(self, a, b):
        return self.B.and_(64, a, b)

    def or_low(self, a, v):
        """a | v for a 64-bit v."""
        return self.B.or_(64, a, v)

    def shl(self, a, n):
        return self.B.shl(64, a, n)

    def shr(self, a, n):
        return self.B.shr(64, a, n)

    def clz(self, a):
        return self.B.clz(64, a)

    def setp(self, cmp, a, b):
        return self.B.setp(cmp, "b64" if cmp in ("eq", "ne") else "u64", a, b)

    def sel(self, a, b, p):
        return self.B.sel(64, a, b, p)

    def low(self, a, w):
        """The low w bits."""
        return a if w == 64 else self.B.cvt(w, 64, a)


class _W128:
    """The float routine's wide words for binary64: a (high, low) pair of 64-bit registers (a
    product has 106 bits). A value is a Python int (a constant) or a pair of operands; shifts by
    a register use PTX's clamped shift amounts (a shift by 64 or more gives 0), so no branch and
    no case split is needed."""

    w = 128

    def __init__(self, B):
        self.B = B

    @staticmethod
    def parts(x):
        return (x >> 64, x & _M[64]) if isinstance(x, int) else x

    @staticmethod
    def _pack(hi, lo):
        return (hi << 64) | lo if isinstance(hi, int) and isinstance(lo, int) else (hi, lo)

    def reg(self):
        return (self.B.tmp(64), self.B.tmp(64))

    def set(self, dst, v):
        for d, x in zip(dst, self.parts(v)):
            self.B.emit(f"mov.b64 {d}, {x}")

    def set_from(self, dst, x, w):
        self.B.emit(f"mov.b64 {dst[0]}, 0")
        self.B.emit(f"cvt.u64.u32 {dst[1]}, {x}" if w == 32 else f"mov.b64 {dst[1]}, {x}")

    def set_sel(self, dst, a, b, p):
        for d, x, y in zip(dst, self.parts(a), self.parts(b)):
            self.B.emit(f"selp.b64 {d}, {x}, {y}, {p}")

    def step(self, dst, op, n):
        """dst shifted by the constant 0 < n < 64, in place (the part read last is written last)."""
        B, (h, lo) = self.B, dst
        if op == "shl":
            B.emit(f"or.b64 {h}, {B.shl(64, h, n)}, {B.shr(64, lo, 64 - n)}")
            B.emit(f"shl.b64 {lo}, {lo}, {n}")
        else:
            B.emit(f"or.b64 {lo}, {B.shr(64, lo, n)}, {B.shl(64, h, 64 - n)}")
            B.emit(f"shr.u64 {h}, {h}, {n}")

    def from_(self, x, w):
        return self._pack(0, x if w == 64 else self.B.cvt(64, w, x))

    def _or(self, a, b):
        if isinstance(a, int) and a == 0:
            return b
        if isinstance(b, int) and b == 0:
            return a
        return self.B.or_(64, a, b)

    def _sh(self, op, a, n):
        if isinstance(a, int) and a == 0:
            return 0
        return (self.B.shl if op == "shl" else self.B.shr)(64, a, n)

    def add(self, a, b):
        B, (ah, al), (bh, bl) = self.B, self.parts(a), self.parts(b)
        lo = B.add(64, al, bl)
        carry = B.setp("lt", "u64", lo, al)
        return self._pack(B.add(64, B.add(64, ah, bh), B.sel(64, 1, 0, carry)), lo)

    def sub(self, a, b):
        B, (ah, al), (bh, bl) = self.B, self.parts(a), self.parts(b)
        borrow = B.setp("lt", "u64", al, bl)
        return self._pack(B.sub(64, B.sub(64, ah, bh), B.sel(64, 1, 0, borrow)), B.sub(64, al, bl))

    def and_(self, a, b):
        B, (ah, al), (bh, bl) = self.B, self.parts(a), self.parts(b)
        return self._pack(B.and_(64, ah, bh), B.and_(64, al, bl))

    def or_low(self, a, v):
        ah, al = self.parts(a)
        return self._pack(ah, self._or(al, v))

    def shl(self, a, n):
        if isinstance(a, int) and isinstance(n, int):
            return (a << n) & ((1 << 128) - 1) if n < 128 else 0
        B, (ah, al) = self.B, self.parts(a)
        if isinstance(n, int):
            if n >= 64:
                return self._pack(self._sh("shl", al, n - 64), 0)
            if n == 0:
                return a
            return self._pack(self._or(self._sh("shl", ah, n), self._sh("shr", al, 64 - n)),
                              self._sh("shl", al, n))
        hi = self._or(self._or(self._sh("shl", ah, n), self._sh("shr", al, B.sub(32, 64, n))),
                      self._sh("shl", al, B.sub(32, n, 64)))
        return self._pack(hi, self._sh("shl", al, n))

    def shr(self, a, n):
        if isinstance(a, int) and isinstance(n, int):
            return a >> n
        B, (ah, al) = self.B, self.parts(a)
        if isinstance(n, int):
            if n >= 64:
                return self._pack(0, self._sh("shr", ah, n - 64))
            if n == 0:
                return a
            return self._pack(self._sh("shr", ah, n), self._or(self._sh("shr", al, n),
                                                               self._sh("shl", ah, 64 - n)))
        lo = self._or(self._or(self._sh("shr", al, n), self._sh("shl", ah, B.sub(32, 64, n))),
                      self._sh("shr", ah, B.sub(32, n, 64)))
        return self._pack(self._sh("shr", ah, n), lo)

    def clz(self, a):
        B, (ah, al) = self.B, self.parts(a)
        z = B.setp("eq", "b64", ah, 0)
        return B.add(32, B.clz(64, B.sel(64, al, ah, z)), B.sel(32, 64, 0, z))

    def setp(self, cmp, a, b):
        B, (ah, al), (bh, bl) = self.B, self.parts(a), self.parts(b)
        if cmp in ("eq", "ne") and isinstance(b, int) and b == 0:
            return B.setp(cmp, "b64", B.or_(64, ah, al), 0)
        if cmp == "eq":
            return B.pand(B.setp("eq", "b64", ah, bh), B.setp("eq", "b64", al, bl))
        if cmp == "ne":
            return B.por(B.setp("ne", "b64", ah, bh), B.setp("ne", "b64", al, bl))
        strict = B.setp(cmp[0] + "t", "u64", ah, bh)
        return B.por(strict, B.pand(B.setp("eq", "b64", ah, bh), B.setp(cmp, "u64", al, bl)))

    def sel(self, a, b, p):
        if isinstance(p, bool):
            return a if p else b
        B, pa, pb = self.B, self.parts(a), self.parts(b)
        return self._pack(*(B.sel(64, x, y, p) for x, y in zip(pa, pb)))

    def low(self, a, w):
        lo = self.parts(a)[1]
        return lo if w == 64 else self.B.cvt(w, 64, lo)


def _words(B, F):
    return _W64(B) if F is F32 else _W128(B)


# ----------------------------------------------------------------------- the shared subroutine


class _FloatRoutine:
    """Registers and sites of one kernel's float subroutine for format F (created on first use;
    a kernel with f32 and f64 arithmetic has one of each)."""

    def __init__(self, em, F):
        self.F = F
        self.a, self.b, self.c = em.tmp(F.w), em.tmp(F.w), em.tmp(F.w)
        self.mode, self.ret, self.out = em.tmp(32), em.tmp(32), em.tmp(F.w)
        self.fma, self.add, self.div, self.sqrt = em.label(), em.label(), em.label(), em.label()
        # the fast entries (operands proven defined: fast_paths.py) and the return chain
        self.fast = fast_paths.labels(em)
        self.back = em.label()
        self.sites = []         # per call site k: (index of its bra, entry label, return label)
        self.weights = []       # per call site: how often it runs, roughly (site_weight)
        self.jumps = []         # fast code written out at a site (_inline): its branches to its
        #                         leaf of the return tree, as calls (index, leaf label, return label)
        self.leaves = {}        # site -> the label of its leaf (sites with fast code written out)
        self.returns = []       # indices of the routine's return branches


def _routines(em) -> dict:
    r = getattr(em, "float_routines", None)
    if r is None:
        r = em.float_routines = {}
    return r


def has_routines(em) -> bool:
    return bool(getattr(em, "float_routines", None))


def _call(em, entry, a, b, c, mode, F=F32, divergent=False) -> str:
    """Branch to the routine's `entry` ("fma", "add", "div", "sqrt", or a fast entry's (op,
    directed): fast_paths.py) with these operands; the result register. A fast entry is written
    out at the site instead where the kernel is lowered with inline_floats (_inline); `divergent`:
    the site runs with part of its warp elsewhere (an atomic's turn)."""
    rs = _routines(em)
    r = rs.get(F.name) or rs.setdefault(F.name, _FloatRoutine(em, F))
    if isinstance(entry, tuple) and em.inline_floats:
        reads = fast_paths.READS[entry[0]]
        if all(isinstance(v, str) for v, n in ((a, "a"), (b, "b"), (c, "c")) if n in reads):
            return _inline(em, r, entry, a, b, c, mode, divergent or em.index in em.divergent)
    back = em.label()
    target = r.fast[entry] if isinstance(entry, tuple) else getattr(r, entry)
    skips = fast_paths.site_skips(*entry) if isinstance(entry, tuple) else set()
    _branch(em, r, target, back, a, b, c, mode, skips)
    em.place(back)
    return r.out


def _branch(em, r, target, back, a, b, c, mode, skips=frozenset()):
    """A call of routine r's `target` returning to `back`: the arguments (those not in `skips`,
    "a" "b" "c" "mode") into its registers, the site's number, the branch."""
    for reg, v, name in ((r.a, a, "a"), (r.b, b, "b"), (r.c, c, "c")):
        if v is not None and name not in skips:
            em.emit(f"mov.b{r.F.w} {reg}, {v}")
    if "mode" not in skips:
        em.emit(f"mov.b32 {r.mode}, {MODES[mode]}")
    em.emit(f"mov.b32 {r.ret}, {len(r.sites)}")
    r.sites.append((len(em.code), target, back))
    r.weights.append(site_weight(em))
    em.emit(f"bra {target}")


class _Site:
    """A fast entry's view of routine r at one site (_inline): the site's operand registers in
    place of the routine's argument registers; the mode register and the result are r's."""

    def __init__(self, r, a, b, c):
        self.F, self.mode, self.out = r.F, r.mode, r.out
        self.a, self.b, self.c = a, b, c


def _inline(em, r, entry, a, b, c, mode, divergent) -> str:
    """A fast entry written out at the site, on the site's own registers: no argument copies and
    no return tree for the lanes it serves. Where it falls back, the lanes call the general entry
    with every argument set (a call site of the routine). The fast lanes wait at this site's leaf
    of the return tree (its `bra` back, after the routine: emit_returns), where the general
    lanes arrive through the tree, so the warp goes on together (a join before the routine would
    let the fast lanes run ahead of the others under the cursor rule). Both leave the result in
    r.out. Every branch but the leaf's is forward."""
    name, directed = entry
    back, way = em.label(), em.label()
    leaf = None if divergent else em.label()
    if directed:                                 # the directed entries round by the mode register
        em.emit(f"mov.b32 {r.mode}, {MODES[mode]}")
    start = len(em.code)
    em.inlining = True
    try:
        fast_paths.EMITTERS[name](_B(em), _Site(r, a, b, c), way, leaf or back, directed=directed)
    finally:
        em.inlining = False
    if leaf is not None:
        r.jumps += [(i, leaf, back) for i in range(start, len(em.code))      # calls of the leaf
                    if em.code[i].opcode == "bra" and em.code[i].operands[0].name == leaf]
        r.leaves[len(r.sites)] = leaf
    em.place(way)
    _branch(em, r, r.fma if name == "mul" else getattr(r, name), back, a, b, c, mode,
            {"mode"} if directed else ())
    em.place(back)
    return r.out


def _entry(em, name, mode, ops, F):
    """The entry a site calls for `name` ("add", "mul", "fma", "div", "sqrt"): a fast one, (name,
    directed), where the site may (fast_paths.eligible), else the general one (mul is the FMA
    entry with c = -0)."""
    if fast_paths.eligible(em, name, ops, F):
        return name, mode != "rn"
    return "fma" if name == "mul" else name


class _Frame:
    """What an entry hands the common part: the value P * 2^ep (P a wide word, ep 32-bit) with
    sign sp, whether the result is a NaN (pnan) or infinite (pinf) before the addend is seen, and
    for binary64 the NaN it is (pv: NaN operands pass through quieted, in the hardware's order of
    priority, else the invalid operation's NaN)."""

    def __init__(self, em, Wd, F):
        self.P, self.ep, self.sp = Wd.reg(), em.tmp(32), em.tmp(F.w)
        self.pnan, self.pinf = em.tmp(1), em.tmp(1)
        self.pv = em.tmp(64) if F is F64 else None


def _nan_value(B, f, F, ops):
    """binary64: pnan |= any operand of `ops` (in priority order) is a NaN; pv = the first such
    operand quieted, else the invalid operation's NaN (used only when pnan is set)."""
    if F is not F64:
        return
    v, anyn = F.nan, False
    for x in reversed(ops):
        n = _nan_bits(B, x, F)
        v = B.sel(64, _nan_of(B, x, F), v, n)
        anyn = B.por(anyn, n)
    B.emit(f"or.pred {f.pnan}, {f.pnan}, {anyn}")
    B.emit(f"mov.b64 {f.pv}, {v}")


def emit_routines(em) -> None:
    """The float subroutines after the kernel's code, one per format some instruction called
    (and the conversion routines, gpu_layers.machine.cvt_routines, which emit themselves)."""
    for r in _routines(em).values():
        if hasattr(r, "emit"):
            r.emit(em)
            continue
        B = _B(em)
        Wd = _words(B, r.F)
        f = _Frame(em, Wd, r.F)
        used = {target for _, target, _ in r.sites}         # only the entries some site calls
        which = {lab: key for key, lab in r.fast.items()}
        for lab, emit, general in fast_paths.entries(r):    # first: they branch forward only
            if lab in used:
                em.place(lab)
                way = general
                if fast_paths.site_skips(*which[lab]):       # through what its sites skip
                    way = em.label()
                emit(B, r, way, r.back)
                if way != general:
                    em.place(way)
                    fast_paths.fallback(B, r, *which[lab], general)
                used.add(general)
        common = em.label()
        entries = [(lab, emit) for lab, emit in ((r.add, _emit_addend), (r.div, _emit_quotient),
                                                 (r.sqrt, _emit_root), (r.fma, _emit_product))
                   if lab in used]
        for k, (lab, emit) in enumerate(entries):      # each leaves P * 2^ep, sp, pnan, pinf
            em.place(lab)
            emit(B, Wd, r, f)
            if k < len(entries) - 1:
                em.emit(f"bra {common}")
        em.place(common)
        _emit_sum(B, Wd, r, f)
        em.place(r.back)
        emit_returns(B, r)


def emit_returns(B, r):
    """The returns to routine r's call sites (r.sites, r.ret: the site's number, a constant), each
    return branch's index recorded in r.returns (Kernel.returns): a tree of `ret < m` tests, the
    cheapest for the sites' weights (r.weights: a site inside a loop runs more often), so a
    return costs about 2 log2(sites) steps, not up to 2 sites (return_tree). A site in r.leaves
    has a leaf of its own (an unconditional `bra`, labelled: its fast lanes wait there)."""
    em = B.em
    backs = [back for _, _, back in r.sites]
    leaves = getattr(r, "leaves", {})

    def emit(node):
        if isinstance(node, int):
            if node in leaves:
                em.place(leaves[node])
            r.returns.append(len(em.code))
            em.emit(f"bra {backs[node]}")
            return
        m, left, right = node
        p = B.setp("lt", "u32", r.ret, m)
        direct = isinstance(left, int) and left not in leaves
        lab = None if direct else em.label()
        if direct:                               # a single site on the left: its return itself
            r.returns.append(len(em.code))
        em.emit(f"@{p} bra {backs[left] if direct else lab}")
        emit(right)
        if not direct:
            em.place(lab)
            emit(left)

    emit(return_tree(r.weights, set(leaves)))


def site_weight(em) -> int:
    """A call site's weight for the return tree: 16 inside a loop of the source, else 1."""
    return 16 if em.index is not None and em.index in em.looped else 1


def return_tree(weights, own=frozenset()) -> int | tuple:
    """The cheapest tree of `ret < m` tests over sites 0..n-1 in order (a leaf: the site's number;
    a node: (m, left: sites < m, right)): a test is two steps (setp, a branch) for every site
    below it, a leaf one more (its branch), except a leaf on the left not in `own` (the test's
    branch is its return). Interval dynamic programming, by the sites' weights."""
    n = len(weights)
    pre = [0]
    for x in weights:
        pre.append(pre[-1] + x)
    best = {}

    def cost(lo, hi):
        if hi - lo == 1:
            return weights[lo], lo
        if (lo, hi) not in best:
            opts = []
            for m in range(lo + 1, hi):
                left = 0 if m - lo == 1 and lo not in own else cost(lo, m)[0]
                opts.append((2 * (pre[hi] - pre[lo]) + left + cost(m, hi)[0], m))
            c, m = min(opts)
            best[lo, hi] = (c, (m, lo if m - lo == 1 else cost(lo, m)[1], cost(m, hi)[1]))
        return best[lo, hi]

    return cost(0, n)[1]


def _emit_addend(B, Wd, r, f):
    """The ADD entry: the "product" is a itself (a * 1.0)."""
    em, F = B.em, r.F
    s, sig, e, mag = _fields(B, r.a, F)
    Wd.set_from(f.P, sig, F.w)
    em.emit(f"sub.s32 {f.ep}, {e}, {F.low}")
    em.emit(f"mov.b{F.w} {f.sp}, {s}")
    em.emit(f"setp.gt.u{F.w} {f.pnan}, {mag}, {F.inf}")
    em.emit(f"setp.eq.u{F.w} {f.pinf}, {mag}, {F.inf}")
    _nan_value(B, f, F, [r.c, r.a])             # DADD: b's NaN, then a's


def _normalized(B, sig, e, F):
    """(sig shifted to a leading one at bit mbits, the biased exponent lowered to match): a
    subnormal's significand too, so that a quotient or root has its full precision. 0 stays 0."""
    n = B.sub(32, B.clz(F.w, sig), F.w - 1 - F.mbits)
    return B.shl(F.w, sig, n), B.sub(32, e, n)


def _emit_quotient(B, Wd, r, f):
    """The DIV entry: a / b as a quotient of the normalized significands with mbits + 4 bits
    (restoring division, one bit per step: 27 for binary32, 56 for binary64) and the remainder's
    sticky bit below it, into P * 2^ep."""
    em, F = B.em, r.F
    w, u = F.w, f"u{F.w}"
    sa, ma, ea, maga = _fields(B, r.a, F)
    sb, mb, eb, magb = _fields(B, r.b, F)
    em.emit(f"xor.b{w} {f.sp}, {sa}, {sb}")
    ainf, binf = B.setp("eq", u, maga, F.inf), B.setp("eq", u, magb, F.inf)
    azero, bzero = B.setp("eq", u, maga, 0), B.setp("eq", u, magb, 0)
    inv = B.por(B.pand(ainf, binf), B.pand(azero, bzero))             # inf / inf, 0 / 0
    em.emit(f"or.pred {f.pnan}, {B.por(_is_nan(B, maga, F), _is_nan(B, magb, F))}, {inv}")
    em.emit(f"or.pred {f.pinf}, {ainf}, {bzero}")                       # x / 0 is infinite
    _nan_value(B, f, F, [r.b, r.a])
    x, ex = _normalized(B, ma, ea, F)
    y, ey = _normalized(B, mb, eb, F)
    steps = F.mbits + 4
    # a / b = (x / y) * 2^(ex - ey), and x * 2^(steps - 1) / y has steps - 1 or steps bits
    em.emit(f"sub.s32 {f.ep}, {B.sub(32, ex, ey)}, {steps}")
    if F is F32:
        _f32_quotient(B, Wd, f, x, y, binf, steps)
        return
    _f64_quotient(B, Wd, f, x, y, binf, steps)


F64_QUOTIENT_CHUNK = 8      # quotient bits a turn of binary64's quotient loop (56 bits: 7 turns)


def _f64_quotient(B, Wd, f, x, y, binf, steps):
    """binary64's 56 quotient bits (quotient64, in a counted loop of turns), the remainder's
    sticky bit below them, into P."""
    from .lower import _counted_loop     # (lower imports this module)
    q, R = quotient64(B, B.sel(64, 0, x, binf), y, steps,               # x / inf is 0
                      lambda n, turn: _counted_loop(B.em, n, turn))
    Wd.set_from(f.P, B.or_(64, B.shl(64, q, 1), B.nonzero(64, R)), 64)


def quotient64(B, x, y, steps, repeat):
    """(q, R): q = floor(x 2^(steps - 1) / y) for x < 2y < 2^54, by machine divide steps, 8 a
    turn (repeat(turns, turn) runs them: a counted loop, or written out). The long division
    compares rem >= y, subtracts, and doubles rem (rem < 2y throughout), so with R = rem << 8 |
    (the turn's quotient bits) and `dstep R, R, (2y << 8) - 1` (2 R's top part 2 rem against
    2y) a step is one bit, and 2 R stays below 2^(55 + 9) = 2^64. Each turn then moves its 8
    bits into q and clears them; after the last, R's top part is the final (doubled) remainder,
    nonzero where the quotient is inexact."""
    em, k = B.em, F64_QUOTIENT_CHUNK
    assert steps % k == 0
    low = (1 << k) - 1
    R, q = em.tmp(64), em.tmp(64)
    em.emit(f"shl.b64 {R}, {x}, {k}")
    em.emit(f"mov.b64 {q}, 0")
    d = B.sub(64, B.shl(64, y, k + 1), 1)

    def turn():
        for _ in range(k):
            em.emit(f"dstep.b64 {R}, {R}, {d}")
        em.emit(f"or.b64 {q}, {B.shl(64, q, k)}, {B.and_(64, R, low)}")
        em.emit(f"and.b64 {R}, {R}, {~low & _M[64]}")
    repeat(steps // k, turn)
    return q, R


F32_QUOTIENT_UNROLL = 9    # divide steps a turn of binary32's quotient loop (27 bits: 3 turns)


def _f32_quotient(B, Wd, f, x, y, binf, steps):
    """binary32's 27 quotient bits with machine divide steps: remainder and quotient share one
    64-bit register R = rem << steps | q, and `dstep R, R, (y << steps) - 1` shifts R and, where
    rem >= y, subtracts y and sets the new quotient bit (2 R is even, the subtrahend odd: the
    compare is rem >= y). R starts at x << (steps - 1), so the first step compares x itself; rem <
    2y < 2^25 throughout, so R stays below 2^52."""
    from .lower import machine_steps     # (lower imports this module)
    em = B.em
    r = em.tmp(64)
    em.emit(f"cvt.u64.u32 {r}, {B.sel(32, 0, x, binf)}")              # x / inf is 0
    em.emit(f"shl.b64 {r}, {r}, {steps - 1}")
    d = B.sub(64, B.shl(64, B.cvt(64, 32, y), steps), 1)
    machine_steps(em, steps, F32_QUOTIENT_UNROLL, lambda: em.emit(f"dstep.b64 {r}, {r}, {d}"))
    q = B.cvt(32, 64, B.and_(64, r, (1 << steps) - 1))
    sticky = B.sel(32, 1, 0, B.setp("ne", "b64", B.shr(64, r, steps), 0))
    Wd.set_from(f.P, B.or_(32, B.shl(32, q, 1), sticky), 32)


def _emit_root(B, Wd, r, f):
    """The SQRT entry: the integer square root of the normalized significand (an even exponent,
    scaled so that the root has mbits + 3 or mbits + 4 bits, one bit per step) with the
    remainder's sticky bit below it, into P * 2^ep. sqrt(-0) = -0 (the sign is a's), a negative
    number gives NaN."""
    em, F = B.em, r.F
    w = F.w
    s, sig, e, mag = _fields(B, r.a, F)
    em.emit(f"mov.b{F.w} {f.sp}, {s}")
    neg = B.pand(B.setp("ne", f"b{w}", s, 0), B.setp("ne", f"u{w}", mag, 0))
    em.emit(f"or.pred {f.pnan}, {_is_nan(B, mag, F)}, {neg}")
    em.emit(f"setp.eq.u{w} {f.pinf}, {mag}, {F.inf}")
    _nan_value(B, f, F, [r.a])
    m, be = _normalized(B, sig, e, F)
    m, E, steps, shift = _root_scale(B, m, B.sub(32, be, F.low), F)     # a = m * 2^E, E even
    # sqrt(a) = sqrt(m * 2^shift) * 2^(E/2 - shift/2)
    em.emit(f"shr.s32 {f.ep}, {E}, 1")
    em.emit(f"sub.s32 {f.ep}, {f.ep}, {shift // 2 + 1}")
    root, rem = _isqrt(B, m if F is F64 else B.cvt(64, 32, m), shift, steps, F.mbits)   # both formats
    Wd.set(f.P, Wd.or_low(Wd.shl(Wd.from_(root, 64), 1), B.nonzero(64, rem)))


ROOT_UNROLL = 4     # root bits a turn of the root loops (_isqrt)


def _root_scale(B, m, E, F):
    """(m, E, steps, shift) for the root of m * 2^E (m a normalized significand, E 32-bit): m
    doubled and E less one where E was odd, so E is even, and _isqrt's steps and even shift (m *
    2^shift < 4^steps: a root of mbits + 3 or mbits + 4 bits)."""
    odd = B.and_(32, E, 1)
    steps = F.mbits + 4
    return B.shl(F.w, m, odd), B.sub(32, E, odd), steps, (2 * steps - (F.mbits + 2)) & ~1


ROOT_DIGITS = 8     # a root of at most this many bits takes the digit method alone (_isqrt)


def _isqrt(B, m, shift, steps, lead):
    """(root, r) of num = m << shift (< 4^steps, shift even), r nonzero exactly where the
    remainder num - root^2 is, for m >= 2^lead (a normalized significand): by a Karatsuba step (Zimmermann's SqrtRem): num = (s1^2 + r1) 4^k + low, s1 the root of num's top
    part, and the low k root bits a quotient of k machine divide steps (_root_step), one step a
    bit instead of the digit method's six or seven. k is at most steps / 2 and small enough that
    every top part's root is >= 2^(k-1) (k <= (its lead + 2) / 4), which makes the candidate at
    most one too large. The top part of m << shift is m << (shift - 2k) and its low part zero
    (both formats: shift >= 2k), so every part fits a 64-bit register. The top part's root: by
    the same method again (_isqrt_split, down to ROOT_DIGITS bits) where the kernel is lowered
    with straight_steps (the core's first lowerings, for programs with room), else by the digit
    method (_isqrt_digits: a deeper step is about 40 instructions, and a lowering that does not
    fit the program memory costs more than the steps it saves). Machine steps a thread of
    sqrt.rn (scripts/check_softfloat.py's count, the digit method alone before): binary64 961 ->
    772, and 960 -> 592 with --inline (straight steps); binary32 529 -> 448, 528 -> 411."""
    k = min(steps // 2, (lead + shift + 2) // 4, shift // 2)
    if steps <= ROOT_DIGITS or k < 1:
        return _isqrt_digits(B, m, shift, steps)
    top = B.shl(64, m, shift - 2 * k)
    if B.em.straight:                    # room for the deeper steps' code (about 40 instructions each)
        s1, r1 = _isqrt_split(B, top, steps - k, lead + shift - 2 * k)
    else:
        s1, r1 = _isqrt_digits(B, top, 0, steps - k)
    return _root_step(B, s1, r1, None, k)


def _isqrt_split(B, n, steps, lead):
    """(root, remainder) of a 64-bit register n in [2^lead, 4^steps) (_isqrt's method)."""
    k = min(steps // 2, (lead + 2) // 4)
    if steps <= ROOT_DIGITS or k < 1:
        return _isqrt_digits(B, n, 0, steps)
    s1, r1 = _isqrt_split(B, B.shr(64, n, 2 * k), steps - k, lead - 2 * k)
    return _root_step(B, s1, r1, B.and_(64, n, (1 << 2 * k) - 1), k)


def _root_step(B, s1, r1, low, k):
    """(s, r), the root and remainder of num = (s1^2 + r1) 4^k + low (low < 4^k, None for 0;
    0 <= r1 <= 2 s1, s1 >= 2^(k-1)): (q, u) = divmod(r1 2^k + (low >> k), 2 s1) by k divide steps
    on RX = r1 << 32 | (low >> k) << (32 - k) against bm = (2 s1 << 32) - 1 (as _udivrem has them;
    where r1 = 2 s1 the steps leave q = 2^k - 1 and u = 2 s1 + (low >> k), which is still
    r1 2^k + (low >> k) = 2 s1 q + u, and then the candidate is the root), s = s1 2^k + q and r =
    u 2^k + (low mod 2^k) - q^2 = num - s^2; where r < 0 the root is one less and r grows by
    2 s - 1. Every value stays below 2^63: r1, u < 2^30 and k <= 28."""
    from .lower import _mul_steps, machine_steps
    em = B.em
    rx = B.shl(64, r1, 32)
    if low is not None:
        rx = B.or_(64, rx, B.shl(64, B.shr(64, low, k), 32 - k))
    bm = B.sub(64, B.shl(64, s1, 33), 1)

    def step():
        em.emit(f"dstep.b64 {rx}, {rx}, {bm}")
    unroll = max(d for d in range(1, 9) if k % d == 0)
    if unroll < 4:                       # (a loop of short turns costs more steps than it saves)
        for _ in range(k):
            step()
    else:
        machine_steps(em, k, unroll, step)
    q = B.and_(64, rx, (1 << k) - 1)
    root = B.or_(64, B.shl(64, s1, k), q)
    lo = B.shl(64, B.shr(64, rx, 32), k)
    if low is not None:
        lo = B.or_(64, lo, B.and_(64, low, (1 << k) - 1))
    r = B.sub(64, lo, _mul_steps(em, q, k, q, 64, bits=k))
    neg = B.setp("lt", "s64", r, 0)
    em.emit(f"@{neg} add.u64 {r}, {r}, {B.sub(64, B.shl(64, root, 1), 1)}")
    em.emit(f"@{neg} sub.u64 {root}, {root}, 1")
    return root, r


def _isqrt_digits(B, m, shift, steps):
    """(root, remainder) of num = m << shift (< 4^steps, shift even) by the digit-by-digit method
    in 64-bit registers, six or seven machine steps a root bit. Each bit: rem = 4 rem + num's next
    bit pair; where rem >= T1 = 4 root + 1, rem -= T1 and the bit is 1; then T1 = 2 T1 - 1 + 4 bit.

    m's P = steps - shift / 2 bit pairs come first, in place: RM = rem << b | m's pairs not yet
    taken (b bits), so taking a pair only moves the boundary b down by 2 and rem >= T1 is RM >=
    T1 << b (the pairs below are less than 2^b): T1k = T1 << b is compared, and updated to the
    next boundary as T1k / 2 - 2^(b - 2) + bit 2^b (both powers shifted down by 2 a bit). RM stays
    below 2^(2P + 1). Then the shift's zero pairs: RM = 4 RM (rem < 2^(steps + 2) fits)."""
    from .lower import _counted_loop     # (lower imports this module)
    em = B.em
    P = steps - shift // 2
    RM, T1, c1, c2, take = em.tmp(64), em.tmp(64), em.tmp(64), em.tmp(64), em.tmp(1)
    em.emit(f"mov.b64 {RM}, {m}")
    em.emit(f"mov.b64 {T1}, {1 << (2 * P - 2)}")
    em.emit(f"mov.b64 {c1}, {1 << (2 * P - 4)}")
    em.emit(f"mov.b64 {c2}, {1 << (2 * P - 2)}")

    def compare():
        em.emit(f"setp.ge.u64 {take}, {RM}, {T1}")
        em.emit(f"@{take} sub.u64 {RM}, {RM}, {T1}")

    def in_place():                      # a pair of m: the boundary moves down
        compare()
        em.emit(f"shr.u64 {T1}, {T1}, 1")
        em.emit(f"sub.u64 {T1}, {T1}, {c1}")
        em.emit(f"@{take} add.u64 {T1}, {T1}, {c2}")
        em.emit(f"shr.u64 {c1}, {c1}, 2")
        em.emit(f"shr.u64 {c2}, {c2}, 2")

    def grow():                          # T1 = 2 T1 - 1 + 4 bit
        em.emit(f"shl.b64 {T1}, {T1}, 1")
        em.emit(f"sub.u64 {T1}, {T1}, 1")
        em.emit(f"@{take} add.u64 {T1}, {T1}, 4")

    def zero_pair():                     # a pair of the shift's zeros
        em.emit(f"shl.b64 {RM}, {RM}, 2")
        compare()
        grow()

    def repeat(n, body):
        if n // ROOT_UNROLL:
            _counted_loop(em, n // ROOT_UNROLL, lambda: [body() for _ in range(ROOT_UNROLL)])
        for _ in range(n % ROOT_UNROLL):
            body()
    repeat(P - 1, in_place)
    compare()                            # m's last pair (b = 0)
    grow()
    repeat(steps - P, zero_pair)
    return B.shr(64, T1, 2), RM


F64_PRODUCT_UNROLL = 4     # multiply steps a turn of binary64's product loops (28 bits: 7 turns)


def _emit_product(B, Wd, r, f):
    """The FMA entry: the exact product of a and b into P * 2^ep (sign sp), its NaN / inf cases
    (signs, exponent and special cases first, so only the significands and the product stay live
    through the loop)."""
    em, F = B.em, r.F
    w, u = F.w, f"u{F.w}"
    sa, ma, ea, maga = _fields(B, r.a, F)
    sb, mb, eb, magb = _fields(B, r.b, F)
    em.emit(f"add.u32 {f.ep}, {B.add(32, ea, eb)}, {-2 * F.low}")
    em.emit(f"xor.b{w} {f.sp}, {sa}, {sb}")
    ainf, binf = B.setp("eq", u, maga, F.inf), B.setp("eq", u, magb, F.inf)
    inv = B.por(B.pand(ainf, B.setp("eq", u, magb, 0)),
                B.pand(binf, B.setp("eq", u, maga, 0)))            # inf * 0
    em.emit(f"or.pred {f.pinf}, {ainf}, {binf}")
    em.emit(f"or.pred {f.pnan}, {B.por(_is_nan(B, maga, F), _is_nan(B, magb, F))}, {inv}")
    _nan_value(B, f, F, [r.b, r.c, r.a])        # DFMA: b's NaN, then c's, then a's
    from .lower import _counted_loop, _mul_steps, pack3     # (lower imports this module)

    if F is F32:                        # 24 x 24 bits: 24 machine multiply steps in one 64-bit register
        Wd.set(f.P, _mul_steps(em, B.cvt(64, 32, ma), F.mbits + 1, mb, 32, bits=F.mbits + 1))
        return
    # 53 x 53 bits from 27-bit halves, b's high half first: P = (P << 27) + a * half, where
    # a * half = al * half + (ah * half << 27) (two products of 27 x 28 bits, machine multiply
    # steps); one pass of code run twice, so the routine stays short (the program holds 1,024 PCs)
    half = (1 << 27) - 1
    al, ah = B.and_(64, ma, half), B.shr(64, ma, 27)
    packed = {x: pack3(em, x) for x in (al, ah)}     # mquad's words, once for both passes
    cur = em.tmp(64)
    em.emit(f"shr.u64 {cur}, {mb}, 27")
    Wd.set(f.P, 0)

    def one_half():
        lo, hi = (_mul_steps(em, x, 27, cur, 64, bits=28, unroll=F64_PRODUCT_UNROLL, packed=packed[x])
                  for x in (al, ah))
        Wd.set(f.P, Wd.add(Wd.shl(f.P, 27), Wd.add(Wd.from_(lo, 64), Wd.shl(Wd.from_(hi, 64), 27))))
        em.emit(f"and.b64 {cur}, {mb}, {half}")
    _counted_loop(em, 2, one_half)


def call_table(em) -> tuple[list, frozenset]:
    """(Kernel.calls, Kernel.returns) of the lowered kernel."""
    calls, returns = [], set()
    for r in _routines(em).values():
        calls += [(i, em.labels[e], em.labels[b]) for i, e, b in r.sites + getattr(r, "jumps", [])]
        returns |= set(r.returns)
    return calls, frozenset(returns)


def _emit_sum(B, Wd, r, f):
    """out = round(P * 2^ep * (-1)^sp + c) by the mode, with the special cases. Ordered so that
    few predicates are live at once (each pool of the register file counts apart)."""
    em, F = B.em, r.F
    w, u, WW = F.w, f"u{F.w}", Wd.w
    mode, P, ep, sp = r.mode, f.P, f.ep, f.sp
    sc, mc, ec, magc = _fields(B, r.c, F)
    # the special results, kept as one value and one predicate
    cinf = B.setp("eq", u, magc, F.inf)
    clash = B.pand(B.pand(f.pinf, cinf), B.setp("ne", f"b{w}", sp, sc))      # inf - inf
    if F is F64:        # the entries saw c's NaN (DIV and SQRT have none)
        nan = B.por(f.pnan, clash)
        nanv = B.sel(64, f.pv, F.nan, f.pnan)
    else:
        nan = B.por(B.por(f.pnan, _is_nan(B, magc, F)), clash)
        nanv = F.nan
    spec = B.sel(w, nanv, B.sel(w, B.or_(w, B.shl(w, sp, w - 1), F.inf), r.c, f.pinf), nan)
    special = B.por(B.por(nan, f.pinf), cinf)
    # the sign of an exact zero: the operands' when they agree, else - only when rounding down
    zsign = B.sel(w, sp, B.sel(w, 1, 0, B.setp("eq", "u32", mode, MODES["rm"])),
                  B.setp("eq", f"b{w}", sp, sc))
    # normalize both to a leading one at bit WW - 7 (the low bits of both are zero)
    kx = B.sub(32, Wd.clz(P), 6)
    X = Wd.shl(P, kx)
    eX = B.sub(32, ep, kx)
    ky = B.add(32, B.clz(w, mc), WW - 7 - (w - 1))
    Y = Wd.shl(Wd.from_(mc, w), ky)
    eY = B.sub(32, B.sub(32, ec, F.low), ky)
    tie = B.pand(B.setp("eq", "s32", eX, eY), Wd.setp("ge", X, Y))
    bigger = B.pand(Wd.setp("ne", P, 0), B.por(B.setp("gt", "s32", eX, eY), tie))
    big = B.por(B.setp("eq", f"b{w}", mc, 0), bigger)
    L, S = Wd.sel(X, Y, big), Wd.sel(Y, X, big)
    E = B.sel(32, eX, eY, big)
    d = B.sel(32, B.sub(32, eX, eY), B.sub(32, eY, eX), big)
    rsign = B.sel(w, sp, sc, big)
    lost = Wd.and_(S, Wd.sub(Wd.shl(1, d), 1))
    Sj = Wd.or_low(Wd.shr(S, d), B.sel(64, 1, 0, Wd.setp("ne", lost, 0)))
    R = Wd.sel(Wd.sub(L, Sj), Wd.add(L, Sj), B.setp("ne", f"b{w}", sp, sc))
    # normalize to bit WW - 1; biased exponent of the leading bit; round below the significand
    n = Wd.clz(R)
    R2 = Wd.shl(R, n)
    be = B.add(32, B.sub(32, E, n), WW - 1 + F.bias)
    bc = B.smax(32, be, 1)
    far = WW + 1                                    # a shift this far: the value is far below
    s = B.umin(32, B.add(32, B.sub(32, bc, be), WW - 1 - F.mbits), far)
    q = Wd.low(Wd.shr(R2, s), w)
    rem = Wd.and_(R2, Wd.sub(Wd.shl(1, s), 1))
    half = Wd.shl(1, B.sub(32, s, 1))
    at = B.pand(Wd.setp("eq", rem, half), B.setp("ne", f"b{w}", B.and_(w, q, 1), 0))
    above = B.pand(Wd.setp("gt", rem, half), B.setp("ne", "u32", s, far))
    rn = B.setp("eq", "u32", mode, MODES["rn"])
    up_rn = B.pand(rn, B.por(above, at))
    # the directed mode that rounds away from zero for this sign (rp for +, rm for -)
    away = B.setp("eq", "u32", mode, B.sel(32, MODES["rm"], MODES["rp"], B.setp("ne", f"b{w}", rsign, 0)))
    up = B.sel(w, 1, 0, B.por(up_rn, B.pand(away, Wd.setp("ne", rem, 0))))
    bexp = B.sub(32, bc, 1)
    bits = B.add(w, B.add(w, B.shl(w, bexp if w == 32 else B.cvt(64, 32, bexp), F.mbits), q), up)
    sgn = B.shl(w, rsign, w - 1)
    ovf = B.or_(w, sgn, B.sel(w, F.inf, F.max, B.por(rn, away)))
    fin = B.sel(w, ovf, B.or_(w, sgn, bits), B.setp("ge", u, bits, F.inf))
    fin = B.sel(w, B.shl(w, zsign, w - 1), fin, Wd.setp("eq", R, 0))
    em.emit(f"selp.b{w} {r.out}, {spec}, {fin}, {special}")


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


def _zero(mode, F=F32):
    """The addend that leaves a product, quotient or root unchanged in `mode`, zeros' signs
    included: -0, or +0 when rounding down (x + (+-0) rounds like x; an exact zero keeps x's sign)."""
    return 0 if mode == "rm" else F.sign


def _fmt(ins):
    return FORMATS[ins.types[-1]]


def _early_taint(em, B, ops, w):
    """The operands' taint computed before the routine's call when that shortens what lives
    across it (two or more operand registers die at this instruction: one taint register instead
    of them), else None (computed after the call, as _write does)."""
    regs = {o for o in ops if isinstance(o, str)}
    if len(regs - em.liveness.live_out[em.index]) < 2:
        return None
    return B.taint(ops, w)


def x_fbin(em, ins):
    """add/sub/mul/div.f32 and .f64."""
    F = _fmt(ins)
    a, b = _val(ins.operands[1]), _val(ins.operands[2])
    mode = _rmode(ins)
    B = _B(em)
    early = _early_taint(em, B, [a, b], F.w)
    if ins.opcode == "mul":
        out = _call(em, _entry(em, "mul", mode, [a, b], F), a, b, _zero(mode, F), mode, F)
    elif ins.opcode == "div":
        out = _call(em, _entry(em, "div", mode, [a, b], F), a, b, _zero(mode, F), mode, F)
    else:
        c = b
        if ins.opcode == "sub":       # f64: a NaN b passes through unnegated (DADD's rule)
            c = B.xor(F.w, b, F.sign)
            if F is F64:
                c = B.sel(64, b, c, _nan_bits(B, b, F))
        out = _call(em, _entry(em, "add", mode, [a, b], F), a, None, c, mode, F)
    _write(em, ins, out, B.taint([a, b], F.w) if early is None else early, F.w, F.w)


def x_funary(em, ins):
    """sqrt and rcp (= 1.0 / a, as the interpreter defines it), .f32 (rn) and .f64."""
    F = _fmt(ins)
    a = _val(ins.operands[1])
    mode = _rmode(ins)
    if ins.opcode == "sqrt":
        out = _call(em, _entry(em, "sqrt", mode, [a], F), a, None, _zero(mode, F), mode, F)
    else:
        out = _call(em, _entry(em, "div", mode, [a], F), F.one, a, _zero(mode, F), mode, F)
    _write(em, ins, out, _B(em).taint([a], F.w), F.w, F.w)


def x_ffma(em, ins):
    """fma and mad (.rn: a fused multiply-add), .f32 and .f64."""
    F = _fmt(ins)
    a, b, c = (_val(o) for o in ins.operands[1:4])
    B = _B(em)
    early = _early_taint(em, B, [a, b, c], F.w)
    out = _call(em, _entry(em, "fma", _rmode(ins), [a, b, c], F), a, b, c, _rmode(ins), F)
    _write(em, ins, out, B.taint([a, b, c], F.w) if early is None else early, F.w, F.w)


def _ftz(B, x):
    """binary32 subnormals flushed to a zero of their sign (atom.add.f32 flushes, PTX ISA)."""
    return B.sel(32, B.and_(32, x, SIGN), x, B.setp("eq", "b32", B.and_(32, x, INF), 0))


def x_fatom(em, ins):
    """atom/red .add.f32/.f64 as a compare-and-swap loop around the routine's ADD entry: load a
    guess, add, `atom.cas` it in; a thread whose word changed meanwhile retries with the value
    the cas returned. Each addition is the instruction's own (f32: rn with inputs and result
    flushed, f64: rn), and the additions to one word happen one at a time, so the result is that
    of one order of the atomics; which order is the machine's (lanes in ascending order, as the
    interpreter; threads of other warps may interleave), as on a GPU, where it is unspecified.
    That loop is for blocks of several warps and the lowering without one_warp; a block of one
    warp takes turns instead (_fatom_turns: no rounds)."""
    F = _fmt(ins)
    w = F.w
    B = _B(em)
    atom = ins.opcode == "atom"
    addr, b = (ins.operands[1], ins.operands[2]) if atom else (ins.operands[0], ins.operands[1])
    src = _val(b)
    space = next((f".{m}" for m in ins.modifiers if m in ("global", "shared")), "")
    done = em.label() if ins.guard else None
    if done:
        em.emit(f"@{'' if ins.guard.negated else '!'}{ins.guard.reg} bra {done}")
    turns = em.one_warp and em.warps == 1
    old = (_fatom_turns if turns else _fatom_cas)(em, ins, F, B, addr, src, space)
    if atom:
        em.emit(f"mov.b{w} {ins.operands[0]}, {old}")
    if done:
        em.place(done)


def _fatom_cas(em, ins, F, B, addr, src, space) -> str:
    """x_fatom's compare-and-swap loop; the register holding the word's value before this
    thread's addition."""
    w = F.w
    cas = ".".join(["atom"] + [m for m in ins.modifiers if m != "add"] + ["cas", f"b{w}"])
    old, got = em.tmp(w), em.tmp(w)
    em.emit(f"ld{space}.u{w} {old}, {addr}")
    b = _ftz(B, src) if F is F32 else src
    top = em.label()
    em.place(top)
    a = _ftz(B, old) if F is F32 else old
    # a global word's old value is defined (a load or cas of a buffer), b is the operand
    new = _call(em, _entry(em, "add", "rn", [src] if space == ".global" else [a, src], F), a, None, b,
                "rn", F, divergent=True)
    if F is F32:
        new = _ftz(B, new)
    em.emit(f"{cas} {got}, {addr}, {old}, {new}")
    retry = B.setp("ne", f"b{w}", got, old)
    em.emit(f"mov.b{w} {old}, {got}")
    em.emit(f"@{retry} bra {top}")
    return got


def _fatom_turns(em, ins, F, B, addr, src, space) -> str:
    """atom/red .add.f32/.f64 in a block of one warp: every lane adds its operand to the word as
    loaded first (one call for the whole warp), then the lanes take turns in ascending order
    (word_memory.lane_loop, under the warp's atomic lock): the lane whose turn it is loads the
    word again and stores its sum when the word is unchanged, or adds to what it found (a call for
    that lane alone) and stores that. So each word gets its additions one at a time in the
    interpreter's order, without the compare-and-swap loop's rounds, which repeat every waiting
    lane's addition once per lane ahead of it on the same word. Returns the register holding the
    word's value before this lane's addition.

    While that lane is in the routine the others must not go on to the next turn (its call jumps
    past them, so the cursor rule runs them first): the lane marks itself AWAY for the call, and
    after each turn the others go back to the turn's first instruction while the mark is set
    (their backward branch hands the step back to the routine). Fast entries are always
    eligible: a word nothing has written and an undefined operand both make the original raise,
    and a branch on them raises too."""
    from gpu_layers.machine.word_memory import AWAY, lane_id, lane_loop

    w = F.w
    b = _ftz(B, src) if F is F32 else src
    guess, mine, cur = em.tmp(w), em.tmp(w), em.tmp(w)
    em.emit(f"ld{space}.u{w} {guess}, {addr}")
    entry = _entry(em, "add", "rn", [], F)

    def add(x):
        out = _call(em, entry, _ftz(B, x) if F is F32 else x, None, b, "rn", F, divergent=True)
        em.emit(f"mov.b{w} {mine}, {_ftz(B, out) if F is F32 else out}")

    add(guess)
    one, zero = em.tmp(32), em.tmp(32)
    em.emit(f"mov.u32 {one}, 1")
    em.emit(f"mov.u32 {zero}, 0")
    em.emit(f"mov.b{w} {cur}, 0")                # (written in every executing lane's turn)

    def turn():
        em.emit(f"ld{space}.u{w} {cur}, {addr}")
        same, store = em.tmp(1), em.label()
        em.emit(f"setp.eq.b{w} {same}, {cur}, {guess}")
        em.emit(f"@{same} bra {store}")
        em.emit(f"st.shared.u32 [{AWAY}], {one}")
        add(cur)
        em.emit(f"st.shared.u32 [{AWAY}], {zero}")
        em.place(store)
        em.emit(f"st{space}.u{w} {addr}, {mine}")

    def wait(top):
        away, p = em.tmp(32), em.tmp(1)
        em.emit(f"ld.shared.u32 {away}, [{AWAY}]")
        em.emit(f"setp.ne.u32 {p}, {away}, 0")
        em.emit(f"@{p} bra {top}")

    lane_loop(em, lane_id(em), turn, turns=2, after=wait)
    return cur


def _nan_of(B, x, F):
    """The NaN result that carries operand x's NaN: f32's canonical NaN; an f64 NaN keeps its
    sign and payload and gets the quiet bit (interp/fp64.py)."""
    return CANON_NAN if F is F32 else B.or_(F.w, x, F.quiet)


def _key(B, x, F=F32):
    """A signed integer of F's width ordered like the float x (-0 == +0), and x's NaN predicate."""
    w = F.w
    mag = B.and_(w, x, F.mag)
    neg = B.setp("lt", f"s{w}", x, 0)
    return B.sel(w, B.sub(w, 0, mag), mag, neg), _is_nan(B, mag, F)


def x_fminmax(em, ins):
    """min/max.f32 and .f64: the non-NaN operand when one is NaN; when both are, f32's canonical
    NaN or b's f64 NaN quieted; -0 < +0."""
    F = _fmt(ins)
    w = F.w
    B = _B(em)
    a, b = _val(ins.operands[1]), _val(ins.operands[2])

    def order(x):        # ordered like the float, with -0 below +0 (NaNs are handled apart)
        neg = B.setp("lt", f"s{w}", x, 0)
        return B.sel(w, B.xor(w, x, _M[w]), B.or_(w, x, F.sign), neg)

    ka, kb = order(a), order(b)
    na, nb = _nan_bits(B, a, F), _nan_bits(B, b, F)
    first = B.setp("le" if ins.opcode == "min" else "ge", f"u{w}", ka, kb)
    r = B.sel(w, a, b, first)
    r = B.sel(w, a, r, nb)
    r = B.sel(w, B.sel(w, _nan_of(B, b, F), b, nb), r, na)
    _write(em, ins, r, B.taint([a, b], w), w, w)


def x_fsetp(em, ins):
    """setp.CMP[.BOOL].{f32,f64} p[|q], a, b[, c]: the comparison on ordered integer keys."""
    F = _fmt(ins)
    B = _B(em)
    cmp = ins.modifiers[0]
    a, b = _val(ins.operands[1]), _val(ins.operands[2])
    ka, na = _key(B, a, F)
    kb, nb = _key(B, b, F)
    unord = B.por(na, nb)
    if cmp == "num":
        r = B.pnot(unord)
    elif cmp == "nan":
        r = unord
    elif cmp.endswith("u"):
        r = B.por(unord, B.setp(cmp[:-1], f"s{F.w}", ka, kb))
    else:
        r = B.pand(B.pnot(unord), B.setp(cmp, f"s{F.w}", ka, kb))
    boolop = ins.modifiers[1] if len(ins.modifiers) > 1 else None
    c = _val(ins.operands[3]) if boolop else None
    tp = B.taint_pred([a, b], F.w)
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


def _round_pack(B, F, neg, R, ex, mode, tiny=False, huge=False):
    """The bits of format F, sign apart, of |v| = R * 2^(ex + 1 - F.bias - 63) rounded once by
    `mode`: R (64-bit) has its leading one at bit 63, ex (32-bit) is the biased exponent of that
    leading one minus one (the significand's hidden bit adds the one back), neg (a predicate or
    False) is v's sign, which the directed modes need. tiny: the result may be subnormal or round
    to zero (ex < 0, by any amount), so the rounding point moves up; huge: it may overflow (ex
    above F's largest, by any amount) into infinity or the largest finite value by the mode."""
    w, low = F.w, 63 - F.mbits                  # the rounding point of a normal result
    if tiny:
        bc = B.smax(32, ex, 0)
        s = B.umin(32, B.add(32, B.sub(32, bc, ex), low), 65)   # 65: below half the least subnormal
    else:
        bc, s = ex, low
    q = B.shr(64, R, s)
    if w == 32:
        q = B.cvt(32, 64, q)
    away = None                                 # the directed mode rounds away from zero
    if mode != "rz":
        rem = B.and_(64, R, B.sub(64, B.shl(64, 1, s), 1))
    if mode == "rn":
        half = B.shl(64, 1, B.sub(32, s, 1))
        above = B.setp("gt", "u64", rem, half)
        if tiny:
            above = B.pand(above, B.setp("ne", "u32", s, 65))
        up = B.por(above, B.pand(B.setp("eq", "b64", rem, half),
                                 B.setp("ne", f"b{w}", B.and_(w, q, 1), 0)))
    elif mode == "rz":
        up = False
    else:
        away = neg if mode == "rm" else B.pnot(neg)
        up = B.pand(away, B.setp("ne", "b64", rem, 0))
    e = bc if w == 32 else B.cvt(64, 32, bc)
    bits = B.add(w, B.add(w, B.shl(w, e, F.mbits), q), B.sel(w, 1, 0, up))
    if huge:
        over = B.por(B.setp("gt", "s32", ex, (F.inf >> F.mbits) - 2), B.setp("ge", f"u{w}", bits, F.inf))
        to_inf = {"rn": True, "rz": False}.get(mode, away)
        bits = B.sel(w, B.sel(w, F.inf, F.max, to_inf), bits, over)
    return bits


_INTS = frozenset(f"{s}{w}" for s in "su" for w in (8, 16, 32, 64))


def x_cvt_from_int(em, ins):
    """cvt.{rn,rz,rm,rp}.{f32,f64}.{s,u}{8..64}: the integer's magnitude normalized to bit 63,
    rounded once (an integer's value is always a normal number or zero in either format)."""
    B = _B(em)
    F = FORMATS[ins.types[0]]
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
    R = B.shl(64, a, n)
    bits = _round_pack(B, F, neg, R, B.sub(32, F.bias + 62, n), mode)
    bits = B.sel(F.w, 0, bits, B.setp("eq", "b64", a, 0))
    if signed:
        bits = B.or_(F.w, bits, B.sel(F.w, F.sign, 0, neg))
    _write(em, ins, bits, B.sub(64, v, v), F.w, 64)


def x_cvt_to_int(em, ins):
    """cvt.{rni,rzi,rmi,rpi}[.sat].{s,u}{8,16,32,64}.{f32,f64}: round to an integer by the mode
    and saturate (a float to integer conversion always does). NaN gives 1 << (width - 1) (MININT
    for a signed type) from an f64 or into a 64-bit integer, else 0 (the PTX ISA's cvt rule; an
    A100 does so). The value is computed in 64 bits and truncated to the destination register, so
    a narrow signed result arrives sign-extended, as the interpreter writes a wider register.
    With lower(cvt_routines=True): a call of gpu_layers.machine.cvt_routines' routine instead."""
    from gpu_layers.machine import cvt_routines

    if cvt_routines.uses_routine(em, ins):
        return cvt_routines.x_cvt_routine(em, ins)
    B = _B(em)
    F = FORMATS[ins.types[1]]
    dt = ins.types[0]
    w, signed = int(dt[1:]), dt[0] == "s"
    hi, lo_mag = (1 << (w - signed)) - 1, (1 << (w - 1)) if signed else 0
    nan_val = 0 if F is F32 and w < 64 else (-(1 << (w - 1)) if signed else 1 << (w - 1)) & _M[64]
    x = _val(ins.operands[1])
    sign, sig, e, mag = _fields(B, x, F)
    neg = B.setp("ne", f"b{F.w}", sign, 0)
    top = 63 - F.mbits                           # sig * 2^top < 2^64 <= sig * 2^(top + 1)
    k = B.sub(32, e, F.low)                      # x = sig * 2^k
    left = B.setp("ge", "s32", k, 0)
    big = B.setp("gt", "s32", k, top)            # |x| >= 2^64: saturates (infinities too)
    sig64 = sig if F.w == 64 else B.cvt(64, 32, sig)
    whole = B.shl(64, sig64, B.umin(32, k, top))
    r = B.umin(32, B.sub(32, 0, k), max(top, F.mbits + 2))     # a right shift (more is as good)
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
    val = B.sel(64, nan_val, val, _is_nan(B, mag, F))
    rw = em.regbits[str(ins.operands[0])]          # 16, 32 or 64 bits (no 8-bit registers)
    if rw < 64:
        val = B.cvt(rw, 64, val)
    _write(em, ins, val, B.taint([x], F.w), rw, F.w)


def x_cvt_round_integral(em, ins):
    """cvt.{rni,rzi,rmi,rpi}.{f32,f64}.{f32,f64}: clear the fraction bits of |x| (2^k, k = low -
    exponent, is the unit), adding one unit when the mode rounds away; a carry into the exponent
    is the right value. |x| < 1 gives 0 or 1, the sign stays (-0.3 -> -0), |x| >= 2^mbits and
    infinities are already integral, a NaN gives the NaN result `_nan_of`."""
    B = _B(em)
    F = FORMATS[ins.types[0]]
    w = F.w
    mode = next(m for m in ins.modifiers if m in ("rni", "rzi", "rmi", "rpi"))
    x = _val(ins.operands[1])
    mag = B.and_(w, x, F.mag)
    e = B.shr(w, mag, F.mbits)
    if w == 64:
        e = B.cvt(32, 64, e)
    one = B.shl(w, 1, B.umin(32, B.sub(32, F.low, e), F.mbits))
    rem = B.and_(w, mag, B.sub(w, one, 1))
    trunc = B.xor(w, mag, rem)
    neg = B.setp("lt", f"s{w}", x, 0)
    if mode == "rni":
        half = B.shr(w, one, 1)
        odd = B.setp("ne", f"b{w}", B.and_(w, mag, one), 0)
        up = B.por(B.setp("gt", f"u{w}", rem, half), B.pand(B.setp("eq", f"b{w}", rem, half), odd))
        small_up = B.setp("gt", f"u{w}", mag, (F.bias - 1) << F.mbits)        # |x| > 0.5
    elif mode == "rzi":
        up = small_up = False
    else:
        away = neg if mode == "rmi" else B.pnot(neg)
        up = B.pand(away, B.setp("ne", f"b{w}", rem, 0))
        small_up = B.pand(away, B.setp("ne", f"b{w}", mag, 0))
    res = B.sel(w, B.sel(w, F.bias << F.mbits, 0, small_up), B.sel(w, B.add(w, trunc, one), trunc, up),
                B.setp("lt", "u32", e, F.bias))
    res = B.or_(w, B.and_(w, x, F.sign), res)
    res = B.sel(w, x, res, B.setp("ge", "u32", e, F.low))
    res = B.sel(w, _nan_of(B, x, F), res, _is_nan(B, mag, F))
    _write(em, ins, res, B.taint([x], w), w, w)


def x_cvt_sat(em, ins):
    """cvt.sat.{f32,f64}.{f32,f64}: clamp to [0, 1]; NaN and -0 give +0."""
    B = _B(em)
    F = FORMATS[ins.types[0]]
    w = F.w
    x = _val(ins.operands[1])
    mag = B.and_(w, x, F.mag)
    neg = B.setp("lt", f"s{w}", x, 0)
    one = F.bias << F.mbits
    res = B.sel(w, one, x, B.setp("ge", f"u{w}", mag, one))
    res = B.sel(w, 0, res, B.por(neg, _is_nan(B, mag, F)))
    _write(em, ins, res, B.taint([x], w), w, w)


def x_cvt_float(em, ins):
    """cvt.f64.f32 (exact: an f32 subnormal becomes a normal f64) and cvt.{rn,rz,rm,rp}.f32.f64
    (rounded once: subnormal results, overflow to infinity or the largest finite value by the
    mode): the significand normalized to bit 63, packed by `_round_pack`. A NaN keeps its sign and
    the top of its payload (shifted) and gets the quiet bit; infinities and zeros keep their sign
    (interp/fp64.py from_f32, to_f32). With lower(cvt_routines=True), f64 -> f32 is a call of
    gpu_layers.machine.cvt_routines' routine instead."""
    from gpu_layers.machine import cvt_routines

    if cvt_routines.uses_routine(em, ins):
        return cvt_routines.x_cvt_routine(em, ins)
    B = _B(em)
    G, F = FORMATS[ins.types[0]], FORMATS[ins.types[1]]
    narrow = G.w < F.w
    x = _val(ins.operands[1])
    sign, sig, e, mag = _fields(B, x, F)
    neg = B.setp("ne", f"b{F.w}", sign, 0)
    sig64 = sig if F.w == 64 else B.cvt(64, 32, sig)
    n = B.clz(64, sig64)
    R = B.shl(64, sig64, n)
    # x = sig * 2^(e - F.low): its leading one is 2^(e - F.low + 63 - n), G's biased exponent
    # of it that plus G.bias
    ex = B.sub(32, B.add(32, e, G.bias - F.low + 62), n)
    bits = _round_pack(B, G, neg, R, ex, _rmode(ins) if narrow else "rz", tiny=narrow, huge=narrow)
    frac = B.and_(F.w, x, F.frac)
    d = F.mbits - G.mbits
    payload = B.cvt(G.w, F.w, B.shr(F.w, frac, d)) if d > 0 else B.shl(G.w, B.cvt(G.w, F.w, frac), -d)
    spec = B.sel(G.w, B.or_(G.w, payload, G.inf | G.quiet), G.inf, _is_nan(B, mag, F))
    bits = B.sel(G.w, spec, bits, B.setp("ge", f"u{F.w}", mag, F.inf))
    bits = B.sel(G.w, 0, bits, B.setp("eq", f"b{F.w}", mag, 0))
    bits = B.or_(G.w, bits, B.sel(G.w, G.sign, 0, neg))
    _write(em, ins, bits, B.taint([x], F.w), G.w, F.w)


def cvt_expansion(ins):
    """The expansion of a cvt with an f32 or f64 type, or None."""
    dt, st = ins.types
    if dt in FORMATS and st in _INTS and "sat" not in ins.modifiers:
        return x_cvt_from_int
    if st in FORMATS and dt in _INTS:
        return x_cvt_to_int
    if st == dt and st in FORMATS:
        return x_cvt_sat if "sat" in ins.modifiers else x_cvt_round_integral
    if dt in FORMATS and st in FORMATS:
        return x_cvt_float
    return None


FLOAT_EXPANSIONS = {"fbin": x_fbin, "ffma": x_ffma, "funary": x_funary, "fminmax": x_fminmax,
                    "fsetp": x_fsetp, "dbin": x_fbin, "dfma": x_ffma, "dunary": x_funary}


from . import fast_paths  # noqa: E402  (it builds on this module's builder and formats)
