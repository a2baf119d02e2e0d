"""Constant rematerialization: a constant is written again after each subroutine call instead of
being kept live across it.

Why: every register a float routine touches interferes with every value live across any of its
calls (regalloc's call model), so a kernel's register-file slots are at least what is live
across its busiest call plus what its routine holds at once. shfl_xor_allreduce keeps 18 values
across its f32 additions, 6 of them constants of its shuffles (`mov.u32 %r7, 4`), and the
routine holds 16: 34 slots for a register file of 32.

`rematerialize_constants(kernel)`: for every register that is a constant (written exactly once in
the whole kernel, by an unguarded `mov` of an immediate outside the routines, and never read
before that write: not live at the kernel's entry) and live across a call, a copy of its `mov` is
inserted at the call's return point. The register is then dead during the call. Every read
still sees the same bits: each path to a read passes the original write, and the copies write the
same immediate, so the kernel computes what it did, poison included (a constant is never poison).
Labels and a call's routine entry and return point keep landing on the same place (now the copies,
which every path through that point executes); the calls' own branches and the return branches
move with their instructions.
"""
from __future__ import annotations

from dataclasses import replace

from gpu_layers.machine.liveness import liveness
from gpu_layers.ptx.ir import FImm, Imm, Reg, in_own_module
from gpu_layers.ptx.validator import SUPPORTED, validate


def constants(kernel, lv=None) -> dict:
    """register -> index of its one defining `mov reg, immediate` (see the module docstring)."""
    lv = lv or liveness(kernel)
    in_routine = set().union(*lv.routines.values()) if lv.routines else set()
    calls = {c for c, _, _ in kernel.calls}
    writes = {}
    for i, d in enumerate(lv.defs):
        if i in calls:
            continue                    # a call's summary: its routine's writes, counted there
        for r in d:
            writes.setdefault(r, []).append(i)
    out = {}
    for r, idx in writes.items():
        if len(idx) != 1 or idx[0] in in_routine or r in lv.entry:
            continue
        ins = kernel.instructions[idx[0]]
        ops = ins.operands
        if (SUPPORTED[ins.name].kind == "mov" and ins.guard is None and len(ops) == 2
                and isinstance(ops[0], Reg) and ops[0].name == r and isinstance(ops[1], (Imm, FImm))):
            out[r] = idx[0]
    return out


def rematerialize_constants(kernel):
    """The kernel with every constant live across a call written again at the call's return point
    (module docstring); the input kernel is not changed. Returns (kernel, copies inserted)."""
    lv = liveness(kernel)
    consts = constants(kernel, lv)
    inserts = {}                                   # return index -> [mov to insert there]
    for c, _, ret in kernel.calls:
        across = (lv.live_in[ret] & lv.live_in[c]) - lv.defs[c] if ret < len(kernel.instructions) else set()
        for r in sorted(across):
            if r in consts:
                mov = kernel.instructions[consts[r]]
                here = inserts.setdefault(ret, [])
                if all(m.operands[0].name != r for m in here):
                    here.append(replace(mov, line=kernel.instructions[c].line))
    if not inserts:
        return kernel, 0
    assert not any(i + 1 in inserts for i in kernel.holds), "a copy inside a sequence that holds the turn"
    code, new_index = [], []                       # new_index[i]: where instruction i went
    for i, ins in enumerate(kernel.instructions):
        code += inserts.get(i, [])
        new_index.append(len(code))
        code.append(ins)
    landing = [new_index[i] - len(inserts.get(i, [])) for i in range(len(new_index))]
    landing.append(len(code))

    out = replace(kernel, instructions=code,
                  labels={name: landing[i] for name, i in kernel.labels.items()},
                  calls=[(new_index[c], landing[e], landing[r]) for c, e, r in kernel.calls],
                  returns=frozenset(new_index[i] for i in kernel.returns),
                  holds=frozenset(new_index[i] for i in kernel.holds),
                  warp_barriers=frozenset(new_index[i] for i in kernel.warp_barriers),
                  directives=list(kernel.directives), regs=list(kernel.regs), vars=list(kernel.vars))
    validate(in_own_module(out, kernel).module, out.name)
    return out, sum(len(v) for v in inserts.values())
