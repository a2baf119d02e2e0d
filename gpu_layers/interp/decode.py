"""Pre-decoding: every PTX instruction becomes a small handler over a warp's register columns.

Register state of a warp is a list of *columns*, one per register (and per immediate, special
register and scratch value): column[i][lane] holds that lane's raw bits, as an unsigned int of the
register's declared width (f32 as its IEEE bits, predicates as 0/1); None means never written.
Immediates are shared read-only constant columns, so every operand is read the same way.

Operand widths follow the PTX rules for operands wider than the instruction type: a source
register wider than the type is truncated to the type's width (a "pre" step into a scratch
column); a destination register wider than the type is sign-extended for signed types and
zero-extended otherwise (a "post" step). Each handler is `fn(warp, lanes)` (warp-level ones
`fn(warp, lanes, active)`) and only touches the lanes it is given (the active threads whose
guard holds). Every handler family corresponds to one `Form.kind` of ptx.validator.SUPPORTED.

Undefined values (see machine.py, "Undefined values"): None in a column is poison. Each decoded
instruction says how poison in its inputs behaves (`Decoded.pmode`): "prop" (the results are
poison), "select" (selp: only the selected operand or the predicate matters), "and" / "or" (a
dominating clean operand decides: x & 0, x | ~0), or "strict" (observable: the machine raises).
Integer div/rem by zero and signed MIN / -1 give poison (PTX: an unspecified value); a load of
memory nothing has written gives poison.

Warp-synchronous instructions (shfl/vote/match/bar.warp.sync) are executed by the machine once every
thread their membermasks name has arrived or exited; the handlers then check the membermask rule
(a thread executing it must be in its own mask) and a shfl reading from a lane that does not
take part, or whose value is undefined, raises.
"""
from __future__ import annotations

import operator
import struct
from dataclasses import dataclass, field

from gpu_layers.errors import ExecutionError, UninitializedRead, UnsupportedPTX
from gpu_layers.interp import fp, fp64
from gpu_layers.interp.memory import GLOBAL_BASE, LOCAL_WINDOW, M64, SHARED_WINDOW, WINDOW_SIZE
from gpu_layers.ptx.ir import TYPE_BITS, Addr, FImm, Imm, Pair, Reg, Sink, Sym, Vec
from gpu_layers.ptx.validator import MACHINE_STEPS, SPECIAL_REGS, SUPPORTED


# Form kinds whose inputs are observable: poison in any read register is an error (addresses,
# stored values, atomic operands, warp exchanges, control). Every other kind propagates poison.
WARP_BARRIER = -1

STRICT_KINDS = frozenset({"ld", "st", "atom", "red", "shfl", "vote", "match", "warpsync",
                          "activemask", "bar", "bra", "exit", "nop"})
# Kinds that can make poison from clean inputs, and why (the origin named in errors).
MAY_POISON = {"idiv": "integer division by zero or overflow", "irem": "integer division by zero",
              "ld": "a load of memory nothing has written"}


def mask(bits):
    return (1 << bits) - 1


def _sx(bits):
    half = 1 << (bits - 1)
    full = 1 << bits
    return lambda x: x - full if x & half else x


def _range(t):
    bits = TYPE_BITS[t]
    if t[0] == "s":
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


# ---------------------------------------------------------------------------- lane functions


# The most frequent operations are given as Python expressions over the lane values x, y, z
# (t-width bit patterns) and the constants M (the type's mask), N (its width), H (its sign bit),
# M2 (the mask of twice the width). `(x ^ H) - H` is x read as a signed integer.
# `_expr_handler` compiles each into a list comprehension (a lane function would be the same
# expression in a lambda); everything else is an ordinary Python lane function.
_EXPRS = {
    "iadd": "(x + y) & M",
    "isub": "(x - y) & M",
    "imul.lo": "(x * y) & M",
    "imad.lo": "(x * y + z) & M",
    "imul.wide.u": "x * y",
    "imul.wide.s": "(((x ^ H) - H) * ((y ^ H) - H)) & M2",
    "and": "x & y",
    "or": "x | y",
    "xor": "x ^ y",
    "not": "x ^ M",
    "shl": "((x << y) & M) if y < N else 0",
    "shr.u": "(x >> y) if y < N else 0",
    "shr.s": "((((x ^ H) - H) >> (y if y < N else N)) & M)",
    "selp": "x if z else y",
    "copy": "x",
    "cmp.u": "int(x OP y)",
    "cmp.s": "int(((x ^ H) - H) OP ((y ^ H) - H))",
}
_OPS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "lo": "<", "ls": "<=",
        "hi": ">", "hs": ">="}


class Expr:
    """A lane operation written as an expression (see _EXPRS) with its constants."""

    def __init__(self, text, t=None):
        self.text = text
        w = TYPE_BITS[t] if t else 32
        self.env = {"M": mask(w), "N": w, "H": 1 << (w - 1), "M2": mask(2 * w)}


def _step_fn(kind, w):
    """The machine's multiply step (2a + (a's bit w-1 ? b : 0)), two-bit multiply step and its
    operand packer (mquad, mtrip: 64 bits), or restoring-division step (t = 2a; t >= b ? t - b :
    t), on w-bit patterns (gpu_layers/craft/blocks/alu.py)."""
    M = mask(w)
    if kind == "mstep":
        return lambda a, b: ((a << 1) + (b if a >> (w - 1) else 0)) & M
    if kind == "mquad":             # 64 bits: 4a + (0, L, 2L, H)[a's top two bits], b = H << 32 | L
        return lambda a, b: ((a << 2) + (0, b & 0xFFFFFFFF, (b & 0xFFFFFFFF) << 1, b >> 32)[a >> 62]) & M
    if kind == "mtrip":             # 64 bits: ((2a + b) mod 2^32) << 32 | (a mod 2^32)
        return lambda a, b: ((((a << 1) + b) & 0xFFFFFFFF) << 32 | (a & 0xFFFFFFFF)) & M

    def dstep(a, b):
        t = (a << 1) & M
        return t - b if t >= b else t
    return dstep


def _int_fn(kind, mods, t):
    """Lane function(s) for integer arithmetic on type t (inputs are t-width bit patterns)."""
    w = TYPE_BITS[t]
    M = mask(w)
    signed = t[0] == "s"
    sx = _sx(w)
    val = sx if signed else (lambda x: x)
    if kind == "iadd":
        return Expr(_EXPRS["iadd"], t)
    if kind == "isub":
        return Expr(_EXPRS["isub"], t)
    if kind in ("imul", "imad") and mods[0] == "lo":
        return Expr(_EXPRS[f"{kind}.lo"], t)
    if kind == "imul" and mods[0] == "wide":
        return Expr(_EXPRS["imul.wide.s" if signed else "imul.wide.u"], t)
    if kind in ("imin", "imax"):
        pick = min if kind == "imin" else max
        if signed:
            return lambda x, y: pick(sx(x), sx(y)) & M
        return pick
    if kind == "ineg":
        return lambda x: (-x) & M
    if kind == "iabs":
        return lambda x: abs(sx(x)) & M
    if kind in ("idiv", "irem"):
        lo = -(1 << (w - 1))

        def divrem(x, y, rem=(kind == "irem")):
            a, b = val(x), val(y)
            if b == 0 or (signed and a == lo and b == -1):
                return None         # PTX: an unspecified value (poison)
            q = abs(a) // abs(b)
            if (a < 0) != (b < 0):
                q = -q
            return ((a - q * b) if rem else q) & M
        return divrem
    if kind in ("imul", "imad"):
        mode = mods[0]
        if mode == "lo":
            f = lambda x, y: x * y & M                          # noqa: E731
        elif mode == "hi":
            f = lambda x, y: (val(x) * val(y) >> w) & M         # noqa: E731
        else:  # wide
            M2 = mask(2 * w)
            f = lambda x, y: (val(x) * val(y)) & M2             # noqa: E731
        if kind == "imul":
            return f
        if mode == "wide":
            M2 = mask(2 * w)
            return lambda x, y, z: (f(x, y) + z) & M2
        return lambda x, y, z: (f(x, y) + z) & M
    if kind in ("imul24", "imad24"):
        s24 = _sx(24)
        v24 = (lambda x: s24(x & 0xFFFFFF)) if signed else (lambda x: x & 0xFFFFFF)
        if mods[0] == "lo":
            f = lambda x, y: (v24(x) * v24(y)) & M              # noqa: E731
        else:
            f = lambda x, y: ((v24(x) * v24(y)) >> 16) & M      # noqa: E731
        if kind == "imul24":
            return f
        return lambda x, y, z: (f(x, y) + z) & M
    raise AssertionError(kind)


def _logic_fn(op, t):
    return Expr(_EXPRS[op], t if t != "pred" else None)


def _shift_fn(kind, t):
    if kind == "shl":
        return Expr(_EXPRS["shl"], t)
    return Expr(_EXPRS["shr.s" if t[0] == "s" else "shr.u"], t)


def _brev32(x):
    return int(f"{x:032b}"[::-1], 2)


def _brev64(x):
    return int(f"{x:064b}"[::-1], 2)


def bfind_fn(t, shiftamt):
    w = TYPE_BITS[t]
    M = mask(w)
    signed = t[0] == "s"
    half = 1 << (w - 1)

    def f(x):
        if signed and x & half:
            x = x ^ M            # most significant non-sign bit
        if x == 0:
            return 0xFFFFFFFF
        pos = x.bit_length() - 1
        return (w - 1 - pos) if shiftamt else pos
    return f


def bfe_fn(t):
    w = TYPE_BITS[t]
    msb = w - 1
    signed = t[0] == "s"
    M = mask(w)

    def f(a, b, c):
        pos = b & 0xFF
        ln = c & 0xFF
        if signed and ln:
            sbit = (a >> min(pos + ln - 1, msb)) & 1
        else:
            sbit = 0
        r = 0
        for i in range(w):
            if i < ln and pos + i <= msb:
                bit = (a >> (pos + i)) & 1
            else:
                bit = sbit
            r |= bit << i
        return r & M
    return f


def bfi_fn(t):
    w = TYPE_BITS[t]
    msb = w - 1

    def f(a, b, c, d):
        pos = c & 0xFF
        ln = d & 0xFF
        r = b
        for i in range(ln):
            if pos + i > msb:
                break
            bit = (a >> i) & 1
            r = (r & ~(1 << (pos + i))) | (bit << (pos + i))
        return r
    return f


def prmt(a, b, c):
    """prmt.b32 default mode: byte i of d = byte (c.nibble[i] & 7) of {b, a}; bit 3 sign-fills."""
    src = (b << 32) | a
    r = 0
    for i in range(4):
        sel = (c >> (4 * i)) & 0xF
        byte = (src >> (8 * (sel & 7))) & 0xFF
        if sel & 8:
            byte = 0xFF if byte & 0x80 else 0
        r |= byte << (8 * i)
    return r


def lop3_fn(lut):
    """lop3.b32: bit i of d = bit (a_i<<2 | b_i<<1 | c_i) of the 8-bit lookup table."""
    def f(a, b, c):
        r = 0
        for k in range(8):
            if (lut >> k) & 1:
                r |= ((a if k & 4 else ~a) & (b if k & 2 else ~b) & (c if k & 1 else ~c))
        return r & 0xFFFFFFFF
    return f


def shf_fn(direction, mode):
    def f(a, b, c):
        n = (c & 31) if mode == "wrap" else min(c, 32)
        v = (b << 32) | a
        if direction == "l":
            return ((v << n) >> 32) & 0xFFFFFFFF
        return (v >> n) & 0xFFFFFFFF
    return f


_ICMP = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
         "gt": operator.gt, "ge": operator.ge, "lo": operator.lt, "ls": operator.le,
         "hi": operator.gt, "hs": operator.ge}


def _cmp_fn(op, t):
    """setp comparison on t-width bit patterns -> 0/1."""
    if t == "f64":
        return fp64.cmp_fn(op)
    if t == "f32":
        b2f = fp.b2f
        if op == "num":
            return lambda x, y: int(not (fp.is_nan(x) or fp.is_nan(y)))
        if op == "nan":
            return lambda x, y: int(fp.is_nan(x) or fp.is_nan(y))
        unordered = op.endswith("u")
        c = _ICMP[op[:-1] if unordered else op]

        def f(x, y):
            a, b = b2f(x), b2f(y)
            if a != a or b != b:
                return int(unordered)
            return int(c(a, b))
        return f
    return Expr(_EXPRS["cmp.s" if t[0] == "s" else "cmp.u"].replace("OP", _OPS[op]), t)


def _cvt_fn(mods, dt, st):
    rnd = [m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")]
    rnd = rnd[0] if rnd else None
    sat = "sat" in mods
    if dt == "f32" and st == "f32":
        if rnd:
            return lambda x: fp.f32_round_integral(x, rnd)
        return fp.sat01
    if dt == "f32":
        sw = TYPE_BITS[st]
        val = _sx(sw) if st[0] == "s" else (lambda x: x)
        return lambda x: fp.int_to_f32(val(x), rnd)
    lo, hi = _range(dt)
    M = mask(TYPE_BITS[dt])
    if st == "f32":
        return lambda x: fp.f32_to_int(x, rnd, lo, hi) & M
    val = _sx(TYPE_BITS[st]) if st[0] == "s" else (lambda x: x)
    if sat:
        return lambda x: min(max(val(x), lo), hi) & M
    return lambda x: val(x) & M


def _cvt64_fn(mods, dt, st):
    """cvt forms with an f64 source or destination (interp/fp64.py)."""
    rnd = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")), None)
    if dt == "f64" and st == "f32":
        return fp64.from_f32
    if dt == "f32":
        return lambda x: fp64.to_f32(x, rnd)
    if dt == "f64" and st == "f64":
        if rnd:
            return lambda x: fp64.round_integral(x, rnd)
        return fp64.sat01
    if dt == "f64":
        val = _sx(TYPE_BITS[st]) if st[0] == "s" else (lambda x: x)
        return lambda x: fp64.from_int(val(x), rnd)
    lo, hi = _range(dt)
    M = mask(TYPE_BITS[dt])
    return lambda x: fp64.to_int(x, rnd, lo, hi) & M


def _atom_fn(op, t):
    w = TYPE_BITS[t]
    M = mask(w)
    if op == "add":
        if t == "f32":
            return lambda old, b, c: fp.atom_add(old, b)
        if t == "f64":
            return lambda old, b, c: fp64.atom_add(old, b)
        return lambda old, b, c: (old + b) & M
    if op in ("min", "max"):
        pick = min if op == "min" else max
        if t[0] == "s":
            sx = _sx(w)
            return lambda old, b, c: pick(sx(old), sx(b)) & M
        return lambda old, b, c: pick(old, b)
    if op == "and":
        return lambda old, b, c: old & b
    if op == "or":
        return lambda old, b, c: old | b
    if op == "xor":
        return lambda old, b, c: old ^ b
    if op == "exch":
        return lambda old, b, c: b
    if op == "cas":
        return lambda old, b, c: c if old == b else old
    if op == "inc":
        return lambda old, b, c: 0 if old >= b else (old + 1) & M
    if op == "dec":
        return lambda old, b, c: b if (old == 0 or old > b) else old - 1
    raise AssertionError(op)


# ---------------------------------------------------------------------------- decoded program


@dataclass(slots=True)
class Decoded:
    kind: str                   # "op", "warp", "bra", "exit", "bar", "nop"
    fn: object                  # handler (None for control)
    line: int
    text: str
    guard: int | None = None    # column of the guard predicate
    gneg: bool = False
    gname: str = ""
    target: int = 0             # branch target index / barrier thread count (0: whole block;
                                # WARP_BARRIER: the machine's warp barrier, Kernel.warp_barriers)
    reads: list = field(default_factory=list)   # [(column, register name)] checked before use
    dsts: list = field(default_factory=list)    # columns written
    pmode: str = "strict"       # poison rule: "strict", "prop", "select", "and", "or"
    pargs: tuple = ()           # select: (predicate, a, b) columns; and/or: ((column, mask), ...)
    lenient: tuple = ()         # read columns whose poison the handler judges lane by lane
    may_poison: str = ""        # why this instruction can produce poison from clean inputs
    mcol: int | None = None     # membermask column of a warp-synchronous instruction
    sync: str = ""              # "pc": waits at this instruction; "any": at any bar.warp.sync


@dataclass
class Layout:
    """Where the kernel's variables live (state-space addresses) and how big each space is."""
    shared: dict                # name -> shared address
    shared_static: int          # bytes of static shared
    dynamic_base: int           # address of extern .shared arrays
    local: dict                 # name -> local address
    local_size: int
    params: dict                # name -> (offset, size)
    param_size: int


def _align(x, a):
    return (x + a - 1) // a * a


def make_layout(kernel) -> Layout:
    module_vars = kernel.module.vars if kernel.module is not None else []
    used = kernel.used_symbols()
    shared, local = {}, {}
    off = 0
    externs = []
    for v in list(module_vars) + list(kernel.vars):
        if v.space != "shared":
            continue
        if v.extern or v.array == []:
            externs.append(v)
            continue
        if v in module_vars and v.name not in used:
            continue
        off = _align(off, v.align or v.elem_bytes)
        shared[v.name] = off
        off += v.size
    static = off
    dyn = static
    for v in externs:
        dyn = max(dyn, _align(static, v.align or v.elem_bytes))
    for v in externs:
        shared[v.name] = dyn
    loff = 0
    for v in kernel.vars:
        if v.space == "local":
            loff = _align(loff, v.align or v.elem_bytes)
            local[v.name] = loff
            loff += v.size
    params = {}
    poff = 0
    for p in kernel.params:
        a = p.align or max(1, TYPE_BITS[p.type] // 8)
        poff = _align(poff, a)
        params[p.name] = (poff, p.size)
        poff += p.size
    return Layout(shared, static, dyn, local, loff, params, poff)


class Program:
    """A kernel decoded once: handlers, column layout, variable layout."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.layout = make_layout(kernel)
        self.regbits = {}
        self.colnames = []              # column -> name (registers, scratch, constants, specials)
        self.regcol = {}
        for d in kernel.regs:
            for n in d.names:
                if n not in self.regcol:
                    self.regcol[n] = len(self.colnames)
                    self.colnames.append(n)
                    self.regbits[n] = TYPE_BITS[d.type]
        self.nregs = len(self.colnames)
        self.scratch = []               # scratch column indices (per warp, mutable)
        self.consts = {}                # value -> column
        self.constcols = {}             # column -> value
        self.specials = {}              # special register name -> column
        self.code = []
        for i, ins in enumerate(kernel.instructions):
            if i in kernel.warp_barriers:
                if ins.opcode != "bar" or ins.modifiers[:2] != ("warp", "sync") or ins.guard is not None:
                    raise ValueError(f"machine code: the warp barrier at index {i} is `{ins}`, "
                                     "not an unguarded bar.warp.sync")
                self.code.append(Decoded("bar", None, ins.line, str(ins), target=WARP_BARRIER))
            else:
                self.code.append(self._decode(ins))

    # -- columns --
    def _new_scratch(self, name):
        c = len(self.colnames)
        self.colnames.append(name)
        self.scratch.append(c)
        return c

    def _const(self, v):
        if v not in self.consts:
            c = len(self.colnames)
            self.colnames.append(f"const {v}")
            self.consts[v] = c
            self.constcols[c] = v
        return self.consts[v]

    def _special(self, name):
        if name not in self.specials:
            c = len(self.colnames)
            self.colnames.append(name)
            self.specials[name] = c
        return self.specials[name]

    # -- operands --
    def src(self, op, bits, st):
        """Column holding `op` as a `bits`-wide pattern (registers wider are truncated)."""
        if isinstance(op, Reg):
            if op.name in SPECIAL_REGS:
                c = self._special(op.name)
                if bits < 32:
                    s = self._new_scratch(op.name)
                    st.pre.append((c, s, mask(bits)))
                    return s
                return c
            c = self.regcol[op.name]
            st.reads.append((c, op.name))
            rb = self.regbits[op.name]
            if rb > bits and bits > 1:
                s = self._new_scratch(op.name)
                st.pre.append((c, s, mask(bits)))
                return s
            return c
        if isinstance(op, Imm):
            if bits == 1:
                return self._const(1 if op.value else 0)
            return self._const(op.value & mask(bits))
        if isinstance(op, FImm):
            if op.width != bits or bits not in (32, 64):
                raise _Bad(f"float literal {op} for a {bits}-bit operand")
            return self._const(op.bits)
        if isinstance(op, Sym):
            return self._const(self.sym_addr(op.name) & mask(bits))
        if isinstance(op, Addr) and isinstance(op.base, Sym):
            return self._const((self.sym_addr(op.base.name) + op.offset) & mask(bits))
        raise _Bad(f"operand {op} cannot be read")

    def _plain_col(self, op, bits):
        """The column an operand is read from before any truncation (for the poison rules)."""
        if isinstance(op, Reg) and op.name in self.regcol:
            return self.regcol[op.name]
        return self.src(op, bits, _State())

    def dst(self, op, bits, signed, st):
        if isinstance(op, Sink):
            c = self._new_scratch("_")
            st.dsts.append(c)
            return c
        if not isinstance(op, Reg) or op.name not in self.regcol:
            raise _Bad(f"operand {op} cannot be written")
        c = self.regcol[op.name]
        st.dsts.append(c)
        rb = self.regbits[op.name]
        if rb > bits and signed and bits > 1:
            sx = _sx(bits)
            RM = mask(rb)
            st.post.append((c, lambda x: sx(x) & RM))
        elif rb < bits:
            RM = mask(rb)
            st.post.append((c, lambda x: x & RM))
        return c

    def sym_addr(self, name):
        L = self.layout
        if name in L.shared:
            return L.shared[name]
        if name in L.local:
            return L.local[name]
        raise _Bad(f"the address of `{name}` is not available")

    def sym_space(self, name):
        L = self.layout
        if name in L.shared:
            return "shared"
        if name in L.local:
            return "local"
        if name in L.params:
            return "param"
        raise _Bad(f"unknown symbol `{name}`")

    # -- decoding --
    def _decode(self, ins):
        form = SUPPORTED.get(ins.name)
        if form is None:
            raise UnsupportedPTX([f"line {ins.line}: instruction `{ins.name}` is not supported"])
        st = _State()
        try:
            d = self._decode_form(ins, form, st)
        except _Bad as e:
            raise UnsupportedPTX([f"line {ins.line}: `{ins}`: {e}"]) from None
        d.line = ins.line
        d.text = str(ins)
        d.reads = st.reads
        d.dsts = st.dsts
        if st.pmode is not None:
            d.pmode, d.pargs = st.pmode, st.pargs
        elif d.kind == "op" and form.kind not in STRICT_KINDS:
            d.pmode = "prop"
        d.lenient = tuple(st.lenient)
        d.may_poison = MAY_POISON.get(form.kind, "")
        if st.pre or st.post:
            d.fn = _wrap(d.fn, st.pre, st.post, d.kind == "warp")
        if ins.guard is not None:
            g = ins.guard.reg
            if g not in self.regcol:
                raise UnsupportedPTX([f"line {ins.line}: guard {g} is not a declared register"])
            d.guard = self.regcol[g]
            d.gneg = ins.guard.negated
            d.gname = g
        return d

    def _decode_form(self, ins, form, st):
        k = form.kind
        ops = ins.operands
        mods = ins.modifiers
        types = ins.types
        t = types[0] if types else None
        w = TYPE_BITS[t] if t else 0
        signed = bool(t) and t[0] == "s"

        def lanewise(f, nsrc, dbits=w, dsigned=signed, sbits=None):
            sbits = sbits or [w] * nsrc
            srcs = [self.src(ops[1 + i], sbits[i], st) for i in range(nsrc)]
            d = self.dst(ops[0], dbits, dsigned, st)
            return Decoded("op", _lanewise(f, d, srcs), 0, "")

        if k in ("iadd", "isub", "imin", "imax", "idiv", "irem"):
            return lanewise(_int_fn(k, mods, t), 2)
        if k in ("ineg", "iabs"):
            return lanewise(_int_fn(k, mods, t), 1)
        if k == "imul":
            wide = mods[0] == "wide"
            return lanewise(_int_fn(k, mods, t), 2, dbits=2 * w if wide else w)
        if k == "imad":
            wide = mods[0] == "wide"
            return lanewise(_int_fn(k, mods, t), 3, dbits=2 * w if wide else w,
                            sbits=[w, w, 2 * w if wide else w])
        if k in ("imul24", "imad24"):
            return lanewise(_int_fn(k, mods, t), 2 if k == "imul24" else 3)
        if k in MACHINE_STEPS:                   # machine code only (ptx.validator.MACHINE_ONLY)
            return lanewise(_step_fn(k, w), 2)
        if k == "logic":
            dec = lanewise(_logic_fn(ins.opcode, t), 2)
            if ins.opcode in ("and", "or"):
                M = 1 if t == "pred" else mask(w)
                st.pmode = ins.opcode
                st.pargs = tuple((self._plain_col(o, w), M) for o in ops[1:3])
            return dec
        if k == "not":
            e = Expr(_EXPRS["not"], t if t != "pred" else None)
            if t == "pred":
                e.env["M"] = 1
            return lanewise(e, 1)
        if k == "cnot":
            return lanewise(lambda x: int(x == 0), 1)
        if k in ("shl", "shr"):
            return lanewise(_shift_fn(k, t), 2, sbits=[w, 32])
        if k == "popc":
            return lanewise(int.bit_count, 1, dbits=32, dsigned=False)
        if k == "clz":
            return lanewise(lambda x: w - x.bit_length(), 1, dbits=32, dsigned=False)
        if k == "brev":
            return lanewise(_brev32 if w == 32 else _brev64, 1)
        if k == "bfind":
            return lanewise(bfind_fn(t, "shiftamt" in mods), 1, dbits=32, dsigned=False)
        if k == "bfe":
            return lanewise(bfe_fn(t), 3, sbits=[w, 32, 32])
        if k == "bfi":
            return lanewise(bfi_fn(t), 4, sbits=[w, w, 32, 32])
        if k == "prmt":
            return lanewise(prmt, 3)
        if k == "lop3":
            return lanewise(lop3_fn(ops[4].value & 0xFF), 3)
        if k == "isat":
            lo, hi = _range("s32")
            sgn = _sx(32)
            sign = 1 if ins.opcode == "add" else -1
            return lanewise(lambda x, y: min(max(sgn(x) + sign * sgn(y), lo), hi) & 0xFFFFFFFF, 2)
        if k == "slct":
            ct = types[1]
            if ct == "f32":
                # c >= 0.0 (so -0.0 selects a, NaN selects b)
                pick = lambda c: (not fp.is_nan(c)) and (c & fp.SIGN == 0 or c & 0x7FFFFFFF == 0)  # noqa: E731
            else:
                pick = lambda c: c & 0x80000000 == 0     # noqa: E731
            return lanewise(lambda x, y, c: x if pick(c) else y, 3, sbits=[w, w, 32])
        if k == "copysign":
            return lanewise(lambda a, b: (b & 0x7FFFFFFF) | (a & fp.SIGN), 2)
        if k == "warpsync":
            m = self.src(ops[0], 32, st)
            return Decoded("warp", _warpsync(m), 0, "", mcol=m, sync="any")
        if k == "shf":
            return lanewise(shf_fn(mods[0], mods[1]), 3)
        if k == "setp":
            cmp = _cmp_fn(mods[0], t)
            boolop = mods[1] if len(mods) > 1 else None
            a = self.src(ops[1], w, st)
            b = self.src(ops[2], w, st)
            c = self.src(ops[3], 1, st) if boolop else None
            dp = ops[0]
            if isinstance(dp, Pair):
                p = self.dst(dp.first, 1, False, st)
                q = self.dst(dp.second, 1, False, st)
            else:
                p, q = self.dst(dp, 1, False, st), None
            if boolop is None and q is None:
                return Decoded("op", _lanewise(cmp, p, [a, b]), 0, "")
            if isinstance(cmp, Expr):
                cmp = eval("lambda x, y: " + cmp.text, dict(cmp.env))
            return Decoded("op", _setp_full(cmp, boolop, p, q, a, b, c), 0, "")
        if k == "selp":
            st.pmode = "select"
            st.pargs = (self._plain_col(ops[3], 1), self._plain_col(ops[1], w),
                        self._plain_col(ops[2], w))
            return lanewise(Expr(_EXPRS["selp"]), 3, sbits=[w, w, 1])
        if k == "mov":
            return self._decode_mov(ins, st, t, w)
        if k == "fbin":
            rmode = next((m for m in mods if m in ("rz", "rm", "rp")), None)
            if rmode:
                return lanewise(fp.directed(ins.opcode, rmode), 2)
            f = {"add": fp.add, "sub": fp.sub, "mul": fp.mul, "div": fp.div}[ins.opcode]
            return lanewise(f, 2)
        if k == "fminmax":
            return lanewise(fp.fmin if ins.opcode == "min" else fp.fmax, 2)
        if k in ("dbin", "dfma", "dunary", "dminmax", "dbits", "dcopysign", "dtestp", "dcvt"):
            return self._decode_f64(ins, k, mods, types, lanewise)
        if k == "ffma":
            rmode = next((m for m in mods if m in ("rz", "rm", "rp")), None)
            return lanewise(fp.directed("fma", rmode) if rmode else fp.fma, 3)
        if k == "sad":
            sv = _sx(w) if signed else (lambda x: x)
            M = mask(w)
            return lanewise(lambda a, b, c: (c + abs(sv(a) - sv(b))) & M, 3)
        if k == "funary":
            return lanewise(fp.sqrt if ins.opcode == "sqrt" else fp.rcp, 1)
        if k == "fbits":
            if ins.opcode == "abs":
                return lanewise(lambda x: x & 0x7FFFFFFF, 1)
            return lanewise(lambda x: x ^ 0x80000000, 1)
        if k == "testp":
            return lanewise(_testp_fn(mods[0]), 1, dbits=1, dsigned=False)
        if k == "cvt":
            dt, s_t = types
            f = _cvt_fn(mods, dt, s_t)
            return lanewise(f, 1, dbits=TYPE_BITS[dt], dsigned=dt[0] == "s", sbits=[TYPE_BITS[s_t]])
        if k == "cvta":
            return lanewise(_cvta_fn(mods), 1)
        if k in ("ld", "st"):
            return self._decode_ldst(ins, st, k, t, w)
        if k in ("atom", "red"):
            return self._decode_atom(ins, st, k, t, w)
        if k == "shfl":
            return self._decode_shfl(ins, st)
        if k == "vote":
            return self._decode_vote(ins, st)
        if k == "match":
            dop = ops[0]
            if isinstance(dop, Pair):
                d = self.dst(dop.first, 32, False, st)
                p = self.dst(dop.second, 1, False, st)
            else:
                d, p = self.dst(dop, 32, False, st), None
            a = self.src(ops[1], w, st)
            m = self.src(ops[2], 32, st)
            return Decoded("warp", _match(mods[0], d, p, a, m), 0, "", mcol=m, sync="pc")
        if k == "activemask":
            d = self.dst(ops[0], 32, False, st)
            return Decoded("warp", _activemask(d), 0, "")
        if k == "bar":
            n = 0
            if len(ops) == 2:
                if not isinstance(ops[1], Imm):
                    raise _Bad("the barrier thread count must be an immediate")
                n = ops[1].value
            return Decoded("bar", None, 0, "", target=n)
        if k == "nop":
            return Decoded("nop", None, 0, "")
        if k == "bra":
            name = ops[0].name
            if name not in self.kernel.labels:
                raise _Bad(f"unknown label {name}")
            return Decoded("bra", None, 0, "", target=self.kernel.labels[name])
        if k == "exit":
            return Decoded("exit", None, 0, "")
        raise AssertionError(f"no decoder for form kind {k!r}")

    def _decode_f64(self, ins, k, mods, types, lanewise):
        """The f64 form kinds (exact binary64, interp/fp64.py)."""
        rmode = next((m for m in mods if m in ("rn", "rz", "rm", "rp")), "rn")
        op = ins.opcode
        if k == "dbin":
            f = {"add": fp64.add, "sub": fp64.sub, "mul": fp64.mul, "div": fp64.div}[op]
            return lanewise(f if rmode == "rn" else (lambda x, y: f(x, y, rmode)), 2)
        if k == "dfma":
            return lanewise(fp64.fma if rmode == "rn" else (lambda x, y, z: fp64.fma(x, y, z, rmode)), 3)
        if k == "dunary":
            f = fp64.sqrt if op == "sqrt" else fp64.rcp
            return lanewise(f if rmode == "rn" else (lambda x: f(x, rmode)), 1)
        if k == "dminmax":
            return lanewise(fp64.fmin if op == "min" else fp64.fmax, 2)
        if k == "dbits":
            return lanewise(fp64.fabs if op == "abs" else fp64.neg, 1)
        if k == "dcopysign":
            return lanewise(fp64.copysign, 2)
        if k == "dtestp":
            return lanewise(fp64.testp_fn(mods[0]), 1, dbits=1, dsigned=False)
        dt, s_t = types                   # dcvt
        return lanewise(_cvt64_fn(mods, dt, s_t), 1, dbits=TYPE_BITS[dt], dsigned=dt[0] == "s",
                        sbits=[TYPE_BITS[s_t]])

    def _decode_mov(self, ins, st, t, w):
        ops = ins.operands
        d, s = ops
        if isinstance(d, Vec):
            n = len(d.elems)
            ew = w // n
            a = self.src(s, w, st)
            dsts = [self.dst(e, ew, False, st) for e in d.elems]
            return Decoded("op", _unpack(a, dsts, ew), 0, "")
        if isinstance(s, Vec):
            n = len(s.elems)
            ew = w // n
            srcs = [self.src(e, ew, st) for e in s.elems]
            dc = self.dst(d, w, False, st)
            return Decoded("op", _lanewise(lambda *xs: sum(x << (i * ew) for i, x in enumerate(xs)),
                                           dc, srcs), 0, "")
        if isinstance(s, Sym) or (isinstance(s, Addr) and isinstance(s.base, Sym)):
            name = s.name if isinstance(s, Sym) else s.base.name
            if self.sym_space(name) == "param":
                raise _Bad("taking the address of a kernel parameter is not supported")
        a = self.src(s, w, st)
        dc = self.dst(d, w, t[0] == "s", st)
        return Decoded("op", _lanewise(None, dc, [a]), 0, "")

    def _address(self, op, space, st):
        """(base column or None, constant offset) of an address operand."""
        if not isinstance(op, Addr):
            raise _Bad("expected an address")
        if op.base is None:
            return None, op.offset
        if isinstance(op.base, Sym):
            sp = self.sym_space(op.base.name)
            if space == "param":
                if sp != "param":
                    raise _Bad(f"`{op.base.name}` is not a kernel parameter")
                return None, self.layout.params[op.base.name][0] + op.offset
            if sp != space:
                raise _Bad(f"`{op.base.name}` is a .{sp} variable, accessed as .{space or 'generic'}")
            return None, self.sym_addr(op.base.name) + op.offset
        if space == "param":
            raise _Bad("ld.param needs a parameter name as its address")
        c = self.src(op.base, self.regbits.get(op.base.name, 64), st)
        return c, op.offset

    def _decode_ldst(self, ins, st, k, t, w):
        ops = ins.operands
        mods = ins.modifiers
        space = next((m for m in mods if m in ("param", "global", "shared", "local")), "")
        n = 4 if "v4" in mods else 2 if "v2" in mods else 1
        size = w // 8
        if k == "ld":
            vop, aop = ops
        else:
            aop, vop = ops
        base, off = self._address(aop, space, st)
        elems = vop.elems if isinstance(vop, Vec) else (vop,)
        if k == "ld":
            cols = [self.dst(e, w, t[0] == "s", st) for e in elems]
        else:
            cols = [self.src(e, w, st) for e in elems]
        return Decoded("op", _memop(k == "ld", space, base, off, cols, size, n), 0, "")

    def _decode_atom(self, ins, st, k, t, w):
        ops = ins.operands
        mods = ins.modifiers
        space = next((m for m in mods if m in ("global", "shared")), "")
        op = next(m for m in mods if m in ("add", "min", "max", "and", "or", "xor", "exch", "cas",
                                           "inc", "dec"))
        if k == "atom":
            d = self.dst(ops[0], w, False, st)
            rest = ops[1:]
        else:
            d = None
            rest = ops
        base, off = self._address(rest[0], space, st)
        b = self.src(rest[1], w, st)
        c = self.src(rest[2], w, st) if len(rest) > 2 else None
        return Decoded("op", _atomic(space, base, off, d, b, c, w // 8, _atom_fn(op, t)), 0, "")

    def _decode_shfl(self, ins, st):
        ops = ins.operands
        mode = ins.modifiers[1]
        dop = ops[0]
        if isinstance(dop, Pair):
            d = self.dst(dop.first, 32, False, st)
            p = self.dst(dop.second, 1, False, st)
        else:
            d, p = self.dst(dop, 32, False, st), None
        a, b, c, m = (self.src(o, 32, st) for o in ops[1:])
        if isinstance(ops[1], Reg) and ops[1].name in self.regcol:
            st.lenient.append(self.regcol[ops[1].name])
        return Decoded("warp", _shfl(mode, d, p, a, b, c, m, str(ops[1])), 0, "", mcol=m, sync="pc")

    def _decode_vote(self, ins, st):
        ops = ins.operands
        mode = ins.modifiers[1]
        ballot = mode == "ballot"
        d = self.dst(ops[0], 32 if ballot else 1, False, st)
        p = self.src(ops[1], 1, st)
        m = self.src(ops[2], 32, st)
        return Decoded("warp", _vote(mode, d, p, m), 0, "", mcol=m, sync="pc")


class _Bad(Exception):
    pass


class _State:
    def __init__(self):
        self.pre = []
        self.post = []
        self.reads = []
        self.dsts = []          # columns the instruction writes
        self.pmode = None       # poison rule when not the kind's default (see Decoded.pmode)
        self.pargs = ()         # columns the rule inspects
        self.lenient = []       # read columns whose poison the handler itself judges (shfl source)


# ---------------------------------------------------------------------------- handler builders


_VARS = ("x", "y", "z")


def _expr_handler(e: Expr, d, srcs):
    """Compile `D[l] = expr(x=A[l], y=B[l], z=C[l])` for the given lanes into a handler."""
    n = len(srcs)
    names = _VARS[:n]
    cols = [f"S{i}" for i in range(n)]
    loads = "; ".join(f"S{i} = R[{c}]" for i, c in enumerate(srcs))
    if n == 1:
        full = f"[{e.text} for x in S0]"
    else:
        full = f"[{e.text} for {', '.join(names)} in zip({', '.join(cols)})]"
    per = "; ".join(f"{v} = S{i}[l]" for i, v in enumerate(names))
    src = (f"def h(W, act):\n"
           f"    R = W.R; {loads}\n"
           f"    if len(act) == 32:\n"
           f"        R[{d}] = {full}\n"
           f"    else:\n"
           f"        D = R[{d}]\n"
           f"        for l in act:\n"
           f"            {per}; D[l] = {e.text}\n")
    env = dict(e.env)
    exec(compile(src, f"<lane op: {e.text}>", "exec"), env)
    return env["h"]


def _lanewise(f, d, srcs):
    """Handler computing column d from the source columns lane by lane (f None: copy)."""
    n = len(srcs)
    if isinstance(f, Expr):
        return _expr_handler(f, d, srcs)
    if f is None:
        (a,) = srcs

        def h(W, act):
            R = W.R
            if len(act) == 32:
                R[d] = list(R[a])
            else:
                A = R[a]
                D = R[d]
                for l in act:
                    D[l] = A[l]
        return h
    if n == 1:
        (a,) = srcs

        def h(W, act):
            R = W.R
            if len(act) == 32:
                R[d] = list(map(f, R[a]))
            else:
                A = R[a]
                D = R[d]
                for l in act:
                    D[l] = f(A[l])
        return h
    if n == 2:
        a, b = srcs

        def h(W, act):
            R = W.R
            if len(act) == 32:
                R[d] = list(map(f, R[a], R[b]))
            else:
                A = R[a]
                B = R[b]
                D = R[d]
                for l in act:
                    D[l] = f(A[l], B[l])
        return h
    if n == 3:
        a, b, c = srcs

        def h(W, act):
            R = W.R
            if len(act) == 32:
                R[d] = list(map(f, R[a], R[b], R[c]))
            else:
                A = R[a]
                B = R[b]
                C = R[c]
                D = R[d]
                for l in act:
                    D[l] = f(A[l], B[l], C[l])
        return h

    def h(W, act):
        R = W.R
        cols = [R[s] for s in srcs]
        D = R[d]
        for l in act:
            D[l] = f(*[C[l] for C in cols])
    return h


def _wrap(fn, pre, post, warp):
    def h(W, act, *rest):
        R = W.R
        for s, t, m in pre:
            S = R[s]
            T = R[t]
            for l in act:
                v = S[l]
                T[l] = None if v is None else v & m
        fn(W, act, *rest)
        for d, f in post:
            D = R[d]
            for l in act:
                v = D[l]
                if v is not None:
                    D[l] = f(v)
    return h


def _setp_full(cmp, boolop, p, q, a, b, c):
    bop = {None: None, "and": operator.and_, "or": operator.or_, "xor": operator.xor}[boolop]

    def h(W, act):
        R = W.R
        A, B = R[a], R[b]
        C = R[c] if c is not None else None
        P = R[p]
        Q = R[q] if q is not None else None
        for l in act:
            t = cmp(A[l], B[l])
            if bop is None:
                pv, qv = t, t ^ 1
            else:
                pv, qv = bop(t, C[l]), bop(t ^ 1, C[l])
            P[l] = pv
            if Q is not None:
                Q[l] = qv
    return h


def _unpack(a, dsts, ew):
    M = mask(ew)

    def h(W, act):
        R = W.R
        A = R[a]
        for i, d in enumerate(dsts):
            D = R[d]
            for l in act:
                D[l] = (A[l] >> (i * ew)) & M
    return h


def _testp_fn(mode):
    def f(x):
        e = x & fp.INF
        m = x & 0x7FFFFF
        if mode == "finite":
            return int(e != fp.INF)
        if mode == "infinite":
            return int(e == fp.INF and m == 0)
        if mode == "number":
            return int(not fp.is_nan(x))
        if mode == "notanumber":
            return int(fp.is_nan(x))
        if mode == "normal":
            # PTX ISA, testp: "As a special case, positive and negative zero are considered
            # normal numbers." (subnormals, inf and NaN are not normal)
            return int((e != 0 and e != fp.INF) or (x & 0x7FFFFFFF) == 0)
        return int(e == 0 and m != 0)     # subnormal
    return f


def _cvta_fn(mods):
    space = mods[-1]
    to = mods[0] == "to"
    if space == "global":
        return lambda x: x
    win = SHARED_WINDOW if space == "shared" else LOCAL_WINDOW
    if not to:
        return lambda x: (x + win) & M64

    def f(x):
        if not (win <= x < win + WINDOW_SIZE):
            raise ExecutionError(f"cvta.to.{space}: generic address {x:#x} is not in the .{space} window")
        return x - win
    return f


def _resolve(W, l, space, addr):
    """(region, state-space address) for an access by lane l."""
    if space == "global":
        return W.glob.region(addr), addr
    if space == "shared":
        return W.shared, addr
    if space == "local":
        return W.local[l], addr
    if space == "param":
        return W.params, addr
    if SHARED_WINDOW <= addr < SHARED_WINDOW + WINDOW_SIZE:
        return W.shared, addr - SHARED_WINDOW
    if LOCAL_WINDOW <= addr < LOCAL_WINDOW + WINDOW_SIZE:
        return W.local[l], addr - LOCAL_WINDOW
    return W.glob.region(addr), addr


def _memop(is_load, space, base, off, cols, size, n):
    """ld/st of n elements of `size` bytes per lane (n > 1: one aligned vector access)."""
    total = size * n

    def general(W, act):
        R = W.R
        B = R[base] if base is not None else None
        Cs = [R[c] for c in cols]
        for l in act:
            addr = ((B[l] if B is not None else 0) + off) & M64
            try:
                region, a = _resolve(W, l, space, addr)
                if n > 1 and a % total:
                    raise _misaligned(total, a, region)
                if is_load:
                    if not region.full:
                        region.check(a, size, "load")
                        if not region.written(a, total):     # the vector as a whole
                            for C in Cs:
                                C[l] = None                 # poison
                            continue
                    for i, C in enumerate(Cs):
                        C[l] = region.load(a + i * size, size, False)
                else:
                    for i, C in enumerate(Cs):
                        region.store(a + i * size, size, C[l])
            except ExecutionError as e:
                raise type(e)(f"thread {W.thread_name(l)}: {e}") from None

    if not (n == 1 and space == "global" and base is not None) or (is_load and cols[0] == base):
        # (a load into its own address register takes the general path: the fast path below
        # restarts on the general one after loading some lanes, which would then re-read the
        # address of those lanes from the loaded values)
        return general
    fmt = _PACK[size]
    ones = b"\x01" * size

    def global_scalar(W, act):
        # the common case, inlined: one element, .global, [reg+off]; anything unusual (another
        # buffer's window, out of range, misaligned, uninitialised) takes the general path,
        # which raises the precise error
        R = W.R
        B = R[base]
        C = R[cols[0]]
        regions = W.glob.regions
        nreg = len(regions)
        for l in act:
            addr = (B[l] + off) & M64
            i = (addr - GLOBAL_BASE) >> 32
            if addr < GLOBAL_BASE or i >= nreg or addr % size:
                return general(W, act)
            region = regions[i]
            o = addr - region.base
            if o < 0 or o + size > region.size:
                return general(W, act)
            if is_load:
                if not region.full and 1 not in region.init[o:o + size]:
                    return general(W, act)
                C[l] = fmt.unpack_from(region.data, o)[0]
            else:
                fmt.pack_into(region.data, o, C[l])
                if not region.full:
                    region.init[o:o + size] = ones
    return global_scalar


_PACK = {1: struct.Struct("<B"), 2: struct.Struct("<H"), 4: struct.Struct("<I"), 8: struct.Struct("<Q")}


def _misaligned(total, a, region):
    from gpu_layers.errors import OutOfBounds
    return OutOfBounds(f"misaligned {total}-byte vector access at address {a:#x} in {region.name}")


def _atomic(space, base, off, d, b, c, size, f):
    def h(W, act):
        R = W.R
        A = R[base] if base is not None else None
        Bc = R[b]
        Cc = R[c] if c is not None else None
        D = R[d] if d is not None else None
        for l in act:       # ascending lane order: deterministic
            addr = ((A[l] if A is not None else 0) + off) & M64
            try:
                region, a = _resolve(W, l, space, addr)
                old = region.load(a, size)
                region.store(a, size, f(old, Bc[l], Cc[l] if Cc is not None else None))
            except ExecutionError as e:
                raise type(e)(f"thread {W.thread_name(l)}: {e}") from None
            if D is not None:
                D[l] = old
    return h


def _check_members(W, act, M, what):
    """membermask rule: a thread executing it is in its own mask, and every thread the mask names
    executes it with it or has exited (the machine waits for the others before calling this)."""
    amask = 0
    for l in act:
        amask |= 1 << l
    for l in act:
        m = M[l]
        if not (m >> l) & 1:
            raise ExecutionError(f"{what}: thread {W.thread_name(l)} executes it but is not in its "
                                 f"membermask {m:#010x} (undefined behaviour)")
        if m & ~amask & ~W.gone:
            raise ExecutionError(f"{what}: membermask {m:#010x} names threads that are not executing "
                                 f"it (active {amask:#010x}; undefined behaviour)")
    return amask


def _commit(R, d, p, results):
    """Write (lane, value, predicate) results after every lane has read (warp-wide exchanges)."""
    D = R[d]
    P = R[p] if p is not None else None
    for l, v, pv in results:
        D[l] = v
        if P is not None:
            P[l] = pv


def _shfl(mode, d, p, a, b, c, m, aname):
    def h(W, act, active):
        R = W.R
        A, B, C, M = R[a], R[b], R[c], R[m]
        amask = _check_members(W, act, M, f"shfl.sync.{mode}")
        out = []
        for l in act:
            bval = B[l] & 31
            cv = C[l]
            cval = cv & 31
            segmask = (cv >> 8) & 31
            max_lane = (l & segmask) | (cval & ~segmask & 31)
            min_lane = l & segmask
            if mode == "up":
                j = l - bval
                pval = j >= max_lane
            elif mode == "down":
                j = l + bval
                pval = j <= max_lane
            elif mode == "bfly":
                j = l ^ bval
                pval = j <= max_lane
            else:
                j = min_lane | (bval & ~segmask & 31)
                pval = j <= max_lane
            if not pval:
                j = l
            if not (amask >> j) & 1:
                why = "has exited" if (W.gone >> j) & 1 else "does not execute the shuffle"
                raise ExecutionError(f"shfl.sync.{mode}: thread {W.thread_name(l)} reads lane {j}, "
                                     f"which {why} (undefined value)")
            if A[j] is None:
                raise UninitializedRead(
                    f"shfl.sync.{mode}: thread {W.thread_name(l)} reads {aname} of lane {j}, which "
                    f"holds an undefined value ({W.origin(a, j, aname)})")
            out.append((l, A[j], int(pval)))
        _commit(R, d, p, out)
    return h


def _vote(mode, d, p, m):
    def h(W, act, active):
        R = W.R
        P, M = R[p], R[m]
        _check_members(W, act, M, f"vote.sync.{mode}")
        D = R[d]
        res = []
        for l in act:
            mm = M[l]
            lanes = [j for j in act if (mm >> j) & 1]
            if mode == "ballot":
                v = 0
                for j in lanes:
                    if P[j]:
                        v |= 1 << j
            elif mode == "all":
                v = int(all(P[j] for j in lanes))
            elif mode == "any":
                v = int(any(P[j] for j in lanes))
            else:
                v = int(len({P[j] for j in lanes}) <= 1)
            res.append((l, v))
        for l, v in res:
            D[l] = v
    return h


def _warpsync(m):
    """bar.warp.sync: every thread named in the membermask must arrive here together."""
    def h(W, act, active):
        _check_members(W, act, W.R[m], "bar.warp.sync")
    return h


def _match(mode, d, p, a, m):
    """match.any: the mask of threads in membermask holding the same value;
    match.all: membermask if all of them hold the same value, else 0 (p: whether they do)."""
    def h(W, act, active):
        R = W.R
        A, M = R[a], R[m]
        _check_members(W, act, M, f"match.{mode}.sync")
        res = []
        for l in act:
            mm = M[l]
            lanes = [j for j in act if (mm >> j) & 1]
            if mode == "any":
                v = 0
                for j in lanes:
                    if A[j] == A[l]:
                        v |= 1 << j
                res.append((l, v, 1))
            else:
                same = all(A[j] == A[l] for j in lanes)
                res.append((l, mm if same else 0, int(same)))
        _commit(R, d, p, res)
    return h


def _activemask(d):
    def h(W, act, active):
        v = 0
        for l in active:
            v |= 1 << l
        D = W.R[d]
        for l in act:
            D[l] = v
    return h
