"""Registers that hold a defined value in every thread, before every instruction.

The interpreter's undefined values (poison, docs: interp/machine.py) come from registers read
before any write, loads of memory nothing has written and integer division by zero; everything
else computes a defined result from defined inputs. The lowering may branch on data only where
that data is defined (a branch on poison raises where the original instruction would just give
an undefined result), and needs no taint term for operands that are (softfloat.py). This is the
forward "must" analysis that proves it: a register is defined before an instruction when every
path from the kernel's entry to it ends in a write of a defined value.

    defined(kernel) -> list[frozenset]   per instruction: the registers defined before it

Sound, not complete: a load is defined only from .global (every global byte is a buffer's, each
initialised whole: interp/memory.py) or .param; shared and local memory, generic addresses,
division, and a guarded write over a register that was not already defined are taken as
possibly undefined. Special registers and immediates are always defined.
"""
from __future__ import annotations

from gpu_layers.machine.liveness import _uses_defs, successors
from gpu_layers.ptx.validator import SPECIAL_REGS, SUPPORTED

_CLEAN_SPACES = ("global", "param")
_MAY_POISON = frozenset({"idiv", "irem"})


def _writes_defined(ins) -> bool:
    """Whether the instruction's results are defined whenever its inputs are."""
    kind = SUPPORTED[ins.name].kind
    if kind in _MAY_POISON:
        return False
    if kind in ("ld", "atom"):
        return any(m in _CLEAN_SPACES for m in ins.modifiers)
    return True


def defined(kernel) -> list:
    """Per instruction, the frozenset of (declared) registers defined in every thread before it."""
    declared = {n for d in kernel.regs for n in d.names if n not in SPECIAL_REGS}
    code = kernel.instructions
    n = len(code)
    if n == 0:
        return []
    ud = [_uses_defs(ins, declared) for ins in code]
    clean = [_writes_defined(ins) for ins in code]
    succ = successors(kernel)
    before = [None] * n             # None: not reached yet (the analysis' top element)
    before[0] = frozenset()
    work = [0]
    while work:
        i = work.pop()
        s = before[i]
        uses, defs = ud[i]          # a guarded write also reads its destination (liveness)
        if defs:
            s = s | defs if clean[i] and uses <= s else s - defs
        for j in succ[i]:
            new = s if before[j] is None else before[j] & s
            if new != before[j]:
                before[j] = new
                work.append(j)
    return [frozenset() if s is None else s for s in before]

