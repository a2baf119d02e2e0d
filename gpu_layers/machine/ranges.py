"""Upper bounds of registers, for shorter multiplies: a multiplier known to be below 2^k takes
k / 2 multiply steps instead of w / 2 (lower._mul_lo, _mul_wide).

Only registers written exactly once (unguarded, outside the routines, never read before that
write: remat's single writes) get a bound, so every read sees the value the bound is about.
Sources: immediates, %tid.x (below the block's threads: the launch is one-dimensional),
%laneid, and integer operations of bounded operands whose result provably does not wrap: mov,
add, mul.lo, mad.lo, shl / shr by an immediate, and, or, xor, rem and div (unsigned), min,
max, selp and widening or narrowing cvt. A bound is on the register's bits read as an unsigned
number; a value below 2^(w-1) is also a nonnegative signed one.
"""
from __future__ import annotations

from gpu_layers.ptx.ir import Imm, Reg

from .liveness import liveness
from .remat import _single_writes


def bounds(kernel, threads: int = 1024) -> dict:
    """register -> the largest value it can hold, for the registers this analysis bounds."""
    lv = liveness(kernel)
    single = _single_writes(kernel, lv)
    code = kernel.instructions
    out, changed = {}, True
    while changed:
        changed = False
        for r, i in single.items():
            ins = code[i]
            if r in out or ins.guard is not None or not ins.operands or not isinstance(ins.operands[0], Reg) \
                    or ins.operands[0].name != r:
                continue
            b = _bound(ins, out, threads)
            if b is not None:
                out[r] = b
                changed = True
    return out


def _width(t) -> int | None:
    return int(t[1:]) if t[0] in "bsu" and t[1:] in ("8", "16", "32", "64") else None


def _of(op, known, threads, w):
    """The bound of a source operand (w-bit), or None."""
    if isinstance(op, Imm):
        return op.value & ((1 << w) - 1)
    if not isinstance(op, Reg):
        return None
    if op.name == "%tid.x":
        return threads - 1
    if op.name == "%laneid":
        return 31
    return known.get(op.name)


def _bound(ins, known, threads):
    if not ins.types:
        return None
    w = _width(ins.types[0])
    if w is None:
        return None
    op, mods = ins.opcode, set(ins.modifiers)
    if op == "cvt":
        src = _width(ins.types[1]) if len(ins.types) > 1 else None
        if src is None or mods - {"u32", "u64"}:
            return None
        b = _of(ins.operands[1], known, threads, src)
        if b is None or b >> (min(w, src) - (1 if ins.types[1][0] == "s" else 0)):
            return None                      # (a signed source must be nonnegative to extend)
        return b
    vals = [_of(o, known, threads, w) for o in ins.operands[1:]]
    top = (1 << w) - 1

    def fits(v):
        return v if v <= top else None
    if op == "mov" and len(vals) == 1:
        return vals[0]
    if op == "and" and len(vals) == 2:
        have = [v for v in vals if v is not None]
        return min(have) if have else None
    if op in ("rem", "div") and ins.types[0][0] == "u" and len(vals) == 2:
        a, b = vals
        if op == "rem":
            have = [v for v in (a, None if b is None else b - 1) if v is not None]
            return max(0, min(have)) if have else None
        return a
    if op == "min" and ins.types[0][0] == "u":
        have = [v for v in vals if v is not None]
        return min(have) if have else None
    if op == "selp" and len(vals) == 3:
        return max(vals[0], vals[1]) if vals[0] is not None and vals[1] is not None else None
    if any(v is None for v in vals):
        return None
    if op == "add" and not mods and len(vals) == 2:
        return fits(vals[0] + vals[1])
    if op == "mul" and mods == {"lo"}:
        return fits(vals[0] * vals[1])
    if op == "mad" and mods == {"lo"} and len(vals) == 3:
        return fits(vals[0] * vals[1] + vals[2])
    if op == "shl" and isinstance(ins.operands[2], Imm):
        return fits(vals[0] << min(vals[1], w)) if vals[1] < w else 0
    if op == "shr" and (ins.types[0][0] != "s" or vals[0] >> (w - 1) == 0):
        return vals[0] >> min(vals[1], w) if isinstance(ins.operands[2], Imm) else vals[0]
    if op in ("or", "xor"):
        return (1 << max(v.bit_length() for v in vals)) - 1
    if op == "max" and ins.types[0][0] == "u":
        return max(vals)
    return None


def bits_below(known, x, w, threads=1024) -> int:
    """How many bits operand x (a register name or a number, as lower passes them) needs: k with
    x < 2^k, w when nothing smaller is known."""
    if x.lstrip("-").isdigit():
        v = int(x) & ((1 << w) - 1)
    elif x == "%tid.x":
        v = threads - 1
    elif x == "%laneid":
        v = 31
    else:
        v = known.get(x)
    return w if v is None else min(w, max(1, v.bit_length()))
