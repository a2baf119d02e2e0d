"""Register pressure of machine code: how many registers (and bits) a thread keeps live at once.

The register file lives in DeltaNet heads (docs/machine.md §4): its capacity per thread is what a
block's threads can hold, so the number that matters is the largest set of registers live at any
instruction, not the number the PTX declares. Standard backward liveness over the control-flow
graph: an unguarded write kills the register, a guarded one does not (the old value may survive),
the guard predicate is read.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpu_layers.ptx.ir import TYPE_BITS, Addr, Pair, Reg, Vec
from gpu_layers.ptx.validator import SPECIAL_REGS, SUPPORTED

_DST_LETTERS = {"d", "q", "D", "V", "M"}


@dataclass
class Pressure:
    max_regs: int           # most registers live at one instruction
    max_bits: int           # most register bits live at one instruction
    declared: int           # registers the kernel declares


def _regs(op):
    """Register names inside an operand (vector elements, pairs, address bases)."""
    if isinstance(op, Reg):
        return [op.name]
    if isinstance(op, Vec):
        return [e.name for e in op.elems if isinstance(e, Reg)]
    if isinstance(op, Pair):
        return [x.name for x in (op.first, op.second) if isinstance(x, Reg)]
    if isinstance(op, Addr) and isinstance(op.base, Reg):
        return [op.base.name]
    return []


def _uses_defs(ins, declared):
    sig = [s for s in SUPPORTED[ins.name].sig.split(",") if s]
    uses, defs = set(), set()
    for s, op in zip(sig, ins.operands):
        names = [n for n in _regs(op) if n in declared]
        if s in _DST_LETTERS and not isinstance(op, Addr):
            defs.update(names)
        else:
            uses.update(names)
    if ins.guard is not None and ins.guard.reg in declared:
        uses.add(ins.guard.reg)
        uses |= defs            # a guarded write keeps the old value where the guard is false
    return uses, defs


def pressure(kernel) -> Pressure:
    width = {n: TYPE_BITS[d.type] for d in kernel.regs for n in d.names if n not in SPECIAL_REGS}
    code = kernel.instructions
    n = len(code)
    ud = [_uses_defs(ins, width) for ins in code]
    succ = []
    for i, ins in enumerate(code):
        s = []
        kind = SUPPORTED[ins.name].kind
        if kind == "bra":
            s.append(kernel.labels[ins.operands[0].name])
            if ins.guard is not None:
                s.append(i + 1)
        elif kind == "exit":
            if ins.guard is not None:
                s.append(i + 1)
        else:
            s.append(i + 1)
        succ.append([j for j in s if j < n])
    live_in = [set() for _ in range(n)]
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            out = set()
            for j in succ[i]:
                out |= live_in[j]
            uses, defs = ud[i]
            new = uses | (out - defs)
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    best_regs = max((len(s) for s in live_in), default=0)
    best_bits = max((sum(width[r] for r in s) for s in live_in), default=0)
    return Pressure(best_regs, best_bits, len(width))
