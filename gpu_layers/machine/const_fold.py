"""Constant folding before the lowering: a register written exactly once (unguarded, outside the
routines, never read before that write: remat's single writes) by an integer add, sub, mul.lo,
mad.lo, shl, shr, and, or, xor or mov whose operands are immediates or such constants becomes
`mov.bW r, value`.

Why: the machine multiplies by steps, but by a known constant with shifts and adds
(lower._mul_const). Launch shapes are immediates (flatten.launch_constants), so a grid-stride
loop's `blockDim.x * gridDim.x` or a 2-D index's row width `gridDim.x * blockDim.x` are products
of constants: folded, the multiply that uses them (`py * w`) is a shift. Every read sees the same
bits: the write is the register's only one, unguarded, and computes a number from numbers.
"""
from __future__ import annotations

from dataclasses import replace

from gpu_layers.ptx.ir import Imm, Reg
from gpu_layers.ptx.parser import parse_instruction

from .liveness import liveness
from .remat import _single_writes

_OPS = ("add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "mov")


def _value(ins, consts):
    """The instruction's result as a w-bit pattern, or None when it is not a foldable form of
    numbers."""
    if ins.opcode not in _OPS or ins.guard is not None or not ins.types:
        return None
    t = ins.types[0]
    if t[0] not in "bsu" or t[1:] not in ("16", "32", "64"):
        return None
    mods = set(ins.modifiers)
    if ins.opcode in ("mul", "mad"):
        if mods != {"lo"}:
            return None
    elif mods:
        return None                     # .cc, .sat, ...
    w = int(t[1:])
    mask = (1 << w) - 1
    vals = []
    for op in ins.operands[1:]:
        if isinstance(op, Imm):
            vals.append(op.value & mask)
        elif isinstance(op, Reg) and op.name in consts:
            vals.append(consts[op.name] & mask)
        else:
            return None
    op = ins.opcode
    if op == "mov":
        return vals[0] if len(vals) == 1 else None
    if op in ("add", "sub", "and", "or", "xor", "mul") and len(vals) != 2:
        return None
    if op == "add":
        return (vals[0] + vals[1]) & mask
    if op == "sub":
        return (vals[0] - vals[1]) & mask
    if op == "mul":
        return (vals[0] * vals[1]) & mask
    if op == "mad":
        return (vals[0] * vals[1] + vals[2]) & mask if len(vals) == 3 else None
    if op == "and":
        return vals[0] & vals[1]
    if op == "or":
        return vals[0] | vals[1]
    if op == "xor":
        return vals[0] ^ vals[1]
    if len(vals) != 2:
        return None
    a, n = vals[0], min(vals[1] & 0xFFFFFFFF, w)        # PTX clamps shift amounts to the width
    if op == "shl":
        return (a << n) & mask
    if t[0] == "s" and a >> (w - 1):                    # shr.s: the sign fills
        return ((a | ~mask) >> n) & mask
    return a >> n


def fold_constants(kernel):
    """The kernel with each foldable single write a `mov` of its number (the kernel itself when
    there is none)."""
    lv = liveness(kernel)
    single = _single_writes(kernel, lv)
    regnames = {n for d in kernel.regs for n in d.names if not n.startswith("%")}
    code = list(kernel.instructions)
    consts, changed = {}, True
    while changed:
        changed = False
        for r, i in single.items():
            ins = code[i]
            if r in consts or not ins.operands or not isinstance(ins.operands[0], Reg) \
                    or ins.operands[0].name != r:
                continue
            v = _value(ins, consts)
            if v is None:
                continue
            consts[r] = v
            changed = True
            if ins.opcode != "mov" or not isinstance(ins.operands[1], Imm):
                w = ins.types[0][1:]
                code[i] = parse_instruction(f"mov.b{w} {r}, {v};", ins.line, regnames)
    if code == list(kernel.instructions):
        return kernel
    return replace(kernel, instructions=code)
