"""Upper bounds of registers, for shorter multiplies: a multiplier known to be below 2^k takes
k / 2 multiply steps instead of w / 2 (lower._mul_lo, _mul_wide).

A register gets a bound when it is never read before a write (not live at the kernel's entry)
and every write of it has one (the largest is its bound; a guarded write that does not happen
leaves a value of another write), so every read sees a value the bound is about.
Sources: immediates, %tid.x (below the block's threads: the launch is one-dimensional),
%laneid, and integer operations of bounded operands whose result provably does not wrap: mov,
add, mul.lo, mad.lo, shl / shr by an immediate, and, or, xor, rem and div (unsigned), min,
max, selp and widening or narrowing cvt. A bound is on the register's bits read as an unsigned
number; a value below 2^(w-1) is also a nonnegative signed one.
"""
from __future__ import annotations

from gpu_layers.ptx.ir import Imm, Reg

from .liveness import liveness


def bounds(kernel, threads: int = 1024) -> dict:
    """register -> the largest value it can hold, for the registers this analysis bounds: every
    write of the register (it is not read before one: not live at the kernel's entry) a form
    with a bound, the largest of them. A write that reads the register itself (a loop counter)
    needs its own bound first, so it never gets one."""
    lv = liveness(kernel)
    code = kernel.instructions
    writes = {}
    for i, d in enumerate(lv.defs):
        for r in d:
            writes.setdefault(r, []).append(i)
    out, changed = {}, True
    while changed:
        changed = False
        for r, idx in writes.items():
            if r in out or r in lv.entry:
                continue
            got = []
            for i in idx:
                ins = code[i]
                if not ins.operands or not isinstance(ins.operands[0], Reg) or ins.operands[0].name != r:
                    break
                b = _bound(ins, out, threads)
                if b is None:
                    break
                got.append(b)
            else:
                out[r] = max(got)
                changed = True
    return out


def _width(t) -> int | None:
    return int(t[1:]) if t[0] in "bsu" and t[1:] in ("8", "16", "32", "64") else None


def _of(op, known, threads, w):
    """The bound of a w-bit source operand: a register nothing bounds holds at most 2^w - 1
    (a 32-bit value widened is below 2^32); None for what is not a number (an address)."""
    if isinstance(op, Imm):
        return op.value & ((1 << w) - 1)
    if not isinstance(op, Reg):
        return None
    if op.name == "%tid.x":
        return threads - 1
    if op.name == "%laneid":
        return 31
    return min(known.get(op.name, 1 << w), (1 << w) - 1)


def _bound(ins, known, threads):
    if not ins.types:
        return None
    w = _width(ins.types[0])
    if w is None:
        return None
    op, mods = ins.opcode, set(ins.modifiers)
    if op == "cvt":
        src = _width(ins.types[1]) if len(ins.types) > 1 else None
        if src is None or mods:
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
    v = _of(Imm(int(x)) if x.lstrip("-").isdigit() else Reg(x), known, threads, w)
    return min(w, max(1, v.bit_length()))
