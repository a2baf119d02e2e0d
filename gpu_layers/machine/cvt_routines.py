"""Float conversions as subroutines with the rounding mode in a register (part of
`gpu_layers.machine.lower`, `lower(cvt_routines=True)`).

softfloat.py expands each conversion inline, its rounding mode fixed at the site: 45-59 machine
instructions for a float-to-integer or an f64-to-f32 conversion. A kernel that converts in many
places (every mode into every integer type, say) then needs more PCs than the core holds (1,024),
so `core.machine_kernel` lowers such a kernel again with these routines: each conversion's code
is emitted once after the kernel, and a site moves its operands and the mode into argument
registers, names itself in a return register (a constant: the return branch never depends on
data) and branches to the entry, as the arithmetic routine's sites do (softfloat._call). A site
costs about ten instructions, the routine about fifty once.

  * TOINT (one per source format): cvt.{rni,rzi,rmi,rpi}[.sat].{s,u}{8..64}.{f32,f64}; the
    destination type arrives as three 64-bit arguments: its largest value, the magnitude of its
    smallest (0: unsigned) and what a NaN gives. The 64-bit result is truncated at the site.
  * NARROW: cvt.{rn,rz,rm,rp}.f32.f64 (subnormal results, overflow by the mode, NaN payloads).
  * WIDEN: cvt.f64.f32 (exact; no mode).

Both compute what softfloat.x_cvt_to_int / x_cvt_float compute, with the mode's choices made by
compares on the mode register instead of in Python (tests/test_softfloat.py runs every form both
ways against the interpreter). Poison: the site xors the result with its operand's taint, as the
inline forms do.
"""
from __future__ import annotations

from gpu_layers.machine.softfloat import (F32, F64, FORMATS, MODES, _B, _fields, _is_nan, _M, _rmode,
                                          _round_pack, _routines, _val, _write, emit_returns,
                                          site_weight)

_INT_MODES = {"rni": "rn", "rzi": "rz", "rmi": "rm", "rpi": "rp"}


class _Routine:
    """Argument registers, sites and return branches of one conversion routine."""

    def __init__(self, em, kind, F, args):
        self.kind, self.F = kind, F
        self.widths = dict(args)
        self.args = {name: em.tmp(w) for name, w in args}
        self.mode, self.ret = em.tmp(32), em.tmp(32)
        self.out = em.tmp(32 if kind == "narrow" else 64)
        self.entry = em.label()
        self.sites = []         # per call site k: (index of its bra, entry label, return label)
        self.weights = []       # per call site: how often it runs, roughly (softfloat.site_weight)
        self.returns = []       # indices of the routine's return branches

    def call(self, em, mode: str | None, **values) -> str:
        """Branch here from a site with these arguments; the result register."""
        k = len(self.sites)
        back = em.label()
        for name, v in values.items():
            em.emit(f"mov.b{self.widths[name]} {self.args[name]}, {v}")
        if mode is not None:
            em.emit(f"mov.b32 {self.mode}, {MODES[mode]}")
        em.emit(f"mov.b32 {self.ret}, {k}")
        self.sites.append((len(em.code), self.entry, back))
        self.weights.append(site_weight(em))
        em.emit(f"bra {self.entry}")
        em.place(back)
        return self.out

    def emit(self, em):
        """The routine's code after the kernel, then the chain of returns to the sites."""
        B = _B(em)
        em.place(self.entry)
        {"toint": _emit_toint, "narrow": _emit_narrow, "widen": _emit_widen}[self.kind](B, self)
        emit_returns(B, self)


def _routine(em, kind, F, args) -> _Routine:
    key = f"cvt_{kind}.{F.name}"
    rs = _routines(em)
    r = rs.get(key)
    if r is None:
        r = rs[key] = _Routine(em, kind, F, args)
    return r


def uses_routine(em, ins) -> bool:
    """Whether `ins` (a cvt) goes through a routine: only when the lowering asks for them."""
    return getattr(em, "cvt_routines", False) and _eligible(*ins.types)


def _eligible(dt: str, st: str) -> bool:
    return (st in FORMATS and dt[0] in "su" and dt[1:].isdigit()) or {dt, st} == {"f32", "f64"}


def routine_form(form: str) -> bool:
    """Whether a float_forms form name (e.g. "cvt.rzi.s32.f64") is a conversion a routine runs."""
    parts = form.split(".")
    return parts[0] == "cvt" and _eligible(parts[-2], parts[-1])


def x_cvt_routine(em, ins):
    dt, st = ins.types
    B = _B(em)
    x = _val(ins.operands[1])
    if dt == "f32" and st == "f64":
        r = _routine(em, "narrow", F64, [("x", 64)])
        out = r.call(em, _rmode(ins), x=x)
        _write(em, ins, out, B.taint([x], 64), 32, 64)
        return
    if dt == "f64" and st == "f32":
        r = _routine(em, "widen", F32, [("x", 32)])
        out = r.call(em, None, x=x)
        _write(em, ins, out, B.taint([x], 32), 64, 32)
        return
    F = FORMATS[st]
    w, signed = int(dt[1:]), dt[0] == "s"
    hi, lo_mag = (1 << (w - signed)) - 1, (1 << (w - 1)) if signed else 0
    nan_val = 0 if F is F32 and w < 64 else (-(1 << (w - 1)) if signed else 1 << (w - 1)) & _M[64]
    r = _routine(em, "toint", F, [("x", F.w), ("hi", 64), ("lo", 64), ("nan", 64)])
    mode = _INT_MODES[next(m for m in ins.modifiers if m in _INT_MODES)]
    val = r.call(em, mode, x=x, hi=hi, lo=lo_mag, nan=nan_val)
    rw = em.regbits[str(ins.operands[0])]
    if rw < 64:
        val = B.cvt(rw, 64, val)
    _write(em, ins, val, B.taint([x], F.w), rw, F.w)


def _up(B, mode, neg, rem, half, odd, above_ok=True):
    """Whether the magnitude rounds up by the mode in a register: rn on above half or a tie to
    odd, rm / rp when the result's sign rounds away and something was lost. Also returns the
    predicate 'this mode rounds away from zero' (for overflow)."""
    rn = B.setp("eq", "u32", mode, MODES["rn"])
    above = B.setp("gt", "u64", rem, half)
    if above_ok is not True:
        above = B.pand(above, above_ok)
    up_rn = B.pand(rn, B.por(above, B.pand(B.setp("eq", "b64", rem, half), odd)))
    away = B.setp("eq", "u32", mode, B.sel(32, MODES["rm"], MODES["rp"], neg))
    up = B.por(up_rn, B.pand(away, B.setp("ne", "b64", rem, 0)))
    return up, rn, away


def _emit_toint(B, r):
    """softfloat.x_cvt_to_int with the mode and the destination's bounds in registers."""
    F, x, mode = r.F, r.args["x"], r.mode
    hi, lo_mag, nanv = r.args["hi"], r.args["lo"], r.args["nan"]
    sign, sig, e, mag = _fields(B, x, F)
    neg = B.setp("ne", f"b{F.w}", sign, 0)
    top = 63 - F.mbits
    k = B.sub(32, e, F.low)
    left = B.setp("ge", "s32", k, 0)
    big = B.setp("gt", "s32", k, top)
    sig64 = sig if F.w == 64 else B.cvt(64, 32, sig)
    whole = B.shl(64, sig64, B.umin(32, k, top))
    rs = B.umin(32, B.sub(32, 0, k), max(top, F.mbits + 2))
    q = B.shr(64, sig64, rs)
    rem = B.and_(64, sig64, B.sub(64, B.shl(64, 1, rs), 1))
    half = B.shl(64, 1, B.sub(32, rs, 1))
    up, _, _ = _up(B, mode, neg, rem, half, B.setp("ne", "b64", B.and_(64, q, 1), 0))
    m = B.sel(64, whole, B.add(64, q, B.sel(64, 1, 0, up)), left)
    over = B.pand(B.pnot(neg), B.por(big, B.setp("gt", "u64", m, hi)))
    # unsigned: lo_mag 0, so a negative value other than -0 saturates to 0
    under = B.pand(neg, B.por(big, B.setp("gt", "u64", m, lo_mag)))
    val = B.sel(64, B.sub(64, 0, m), m, neg)
    val = B.sel(64, hi, B.sel(64, B.sub(64, 0, lo_mag), val, under), over)
    val = B.sel(64, nanv, val, _is_nan(B, mag, F))
    B.emit(f"mov.b64 {r.out}, {val}")


def _emit_narrow(B, r):
    """softfloat.x_cvt_float's f64 -> f32 with the mode in a register (softfloat._round_pack's
    tiny and huge cases)."""
    G, F, x, mode = F32, F64, r.args["x"], r.mode
    sign, sig, e, mag = _fields(B, x, F)
    neg = B.setp("ne", "b64", sign, 0)
    n = B.clz(64, sig)
    R = B.shl(64, sig, n)
    ex = B.sub(32, B.add(32, e, G.bias - F.low + 62), n)
    low = 63 - G.mbits
    bc = B.smax(32, ex, 0)
    s = B.umin(32, B.add(32, B.sub(32, bc, ex), low), 65)
    q = B.cvt(32, 64, B.shr(64, R, s))
    rem = B.and_(64, R, B.sub(64, B.shl(64, 1, s), 1))
    half = B.shl(64, 1, B.sub(32, s, 1))
    up, rn, away = _up(B, mode, neg, rem, half, B.setp("ne", "b32", B.and_(32, q, 1), 0),
                       B.setp("ne", "u32", s, 65))
    bits = B.add(32, B.add(32, B.shl(32, bc, G.mbits), q), B.sel(32, 1, 0, up))
    over = B.por(B.setp("gt", "s32", ex, (G.inf >> G.mbits) - 2), B.setp("ge", "u32", bits, G.inf))
    bits = B.sel(32, B.sel(32, G.inf, G.max, B.por(rn, away)), bits, over)
    frac = B.and_(64, x, F.frac)
    payload = B.cvt(32, 64, B.shr(64, frac, F.mbits - G.mbits))
    spec = B.sel(32, B.or_(32, payload, G.inf | G.quiet), G.inf, _is_nan(B, mag, F))
    bits = B.sel(32, spec, bits, B.setp("ge", "u64", mag, F.inf))
    bits = B.sel(32, 0, bits, B.setp("eq", "b64", mag, 0))
    bits = B.or_(32, bits, B.sel(32, G.sign, 0, neg))
    B.emit(f"mov.b32 {r.out}, {bits}")


def _emit_widen(B, r):
    """softfloat.x_cvt_float's f32 -> f64 (exact: an f32 subnormal becomes a normal f64)."""
    G, F, x = F64, F32, r.args["x"]
    sign, sig, e, mag = _fields(B, x, F)
    neg = B.setp("ne", "b32", sign, 0)
    sig64 = B.cvt(64, 32, sig)
    n = B.clz(64, sig64)
    R = B.shl(64, sig64, n)
    ex = B.sub(32, B.add(32, e, G.bias - F.low + 62), n)
    bits = _round_pack(B, G, neg, R, ex, "rz")
    payload = B.shl(64, B.cvt(64, 32, B.and_(32, x, F.frac)), G.mbits - F.mbits)
    spec = B.sel(64, B.or_(64, payload, G.inf | G.quiet), G.inf, _is_nan(B, mag, F))
    bits = B.sel(64, spec, bits, B.setp("ge", "u32", mag, F.inf))
    bits = B.sel(64, 0, bits, B.setp("eq", "b32", mag, 0))
    bits = B.or_(64, bits, B.sel(64, G.sign, 0, neg))
    B.emit(f"mov.b64 {r.out}, {bits}")
