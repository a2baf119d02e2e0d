"""Rematerialization: a thread invariant (a constant, a parameter, %tid.x, a short pure chain of
them) is computed again after each subroutine call, or before each instruction that reads it,
instead of being kept live across the calls.

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

`rematerialize(kernel, longest, only)` generalizes it to `invariants` (written once, unguarded,
by an immediate, a symbol's address, a fixed special register, an ld.param, or a pure integer
operation of invariants: one value, never poison, from its write on), each computed again by its
`chain` (its write after its operands') either after every call it is live across or before
every instruction that reads it, whichever takes fewer copies (`candidates`); copies inside a
sequence that holds the turn hold it too. f64_reduce keeps its three buffer pointers, block
offset and length across eleven calls: computed again where read, it fits the 32 slots.
"""
from __future__ import annotations

from dataclasses import replace

from gpu_layers.machine.liveness import liveness
from gpu_layers.ptx.ir import FImm, Imm, Reg, in_own_module
from gpu_layers.ptx.validator import SUPPORTED, validate


def _single_writes(kernel, lv) -> dict:
    """register -> index of its one write, for registers written exactly once outside the
    routines and not live at the kernel's entry (never read before that write)."""
    in_routine = set().union(*lv.routines.values()) if lv.routines else set()
    calls = {c for c, _, _ in kernel.calls}
    writes = {}
    for i, d in enumerate(lv.defs):
        if i in calls:
            continue                    # a call's summary: its routine's writes, counted there
        for r in d:
            writes.setdefault(r, []).append(i)
    return {r: idx[0] for r, idx in writes.items()
            if len(idx) == 1 and idx[0] not in in_routine and r not in lv.entry}


def constants(kernel, lv=None) -> dict:
    """register -> index of its one defining `mov reg, immediate` (see the module docstring)."""
    lv = lv or liveness(kernel)
    out = {}
    for r, i in _single_writes(kernel, lv).items():
        ins = kernel.instructions[i]
        ops = ins.operands
        if (SUPPORTED[ins.name].kind == "mov" and ins.guard is None and len(ops) == 2
                and isinstance(ops[0], Reg) and ops[0].name == r and isinstance(ops[1], (Imm, FImm))):
            out[r] = i
    return out


# specials that hold one value for a thread's whole life (not %clock and the like)
_FIXED_SPECIALS = ("%tid.", "%ntid.", "%ctaid.", "%nctaid.", "%laneid", "%warpid", "%nwarpid")
_PURE_KINDS = ("mov", "cvta", "cvt", "add", "sub", "shl", "shr", "and", "or", "xor", "not")


def invariants(kernel, lv=None) -> dict:
    """register -> (index of its one write, the registers that write reads): the thread's
    invariants, written exactly once (outside the routines, unguarded, not live at the kernel's
    entry) by a mov of an immediate, a symbol's address or a fixed special register (%tid.x,
    %ctaid.x, ...), an ld.param, or a pure operation (mov, cvta, cvt, integer add, shifts,
    logic) of invariants. Each holds one value, never poison, from its write on; `chain` gives
    the writes that compute it again."""
    from gpu_layers.machine.liveness import _regs

    lv = lv or liveness(kernel)
    out, todo = {}, _single_writes(kernel, lv)
    changed = True
    while changed:                      # operands first: an invariant of invariants is one
        changed = False
        for r, i in list(todo.items()):
            ins = kernel.instructions[i]
            kind = SUPPORTED[ins.name].kind
            ops = ins.operands
            if ins.guard is not None or not ops or not isinstance(ops[0], Reg) or ops[0].name != r:
                continue
            srcs = ops[1:]
            if kind == "ld" and "param" in ins.modifiers:
                regs = []
            elif ins.opcode in _PURE_KINDS and kind not in ("ld", "st", "atom"):
                regs = [n for o in srcs for n in _regs(o)]
                specials = [n for n in regs if n.startswith("%") and n not in lv.width]
                if any(not n.startswith(_FIXED_SPECIALS) for n in specials):
                    continue
                regs = [n for n in regs if n not in specials]
                if any(n not in out for n in regs):
                    continue
            else:
                continue
            out[r] = (i, regs)
            del todo[r]
            changed = True
    return out


def chain(inv: dict, regs) -> list:
    """The write indices that compute `regs` (invariants) again, operands before their users."""
    order, seen = [], set()

    def visit(r):
        if r in seen:
            return
        seen.add(r)
        i, srcs = inv[r]
        for s in srcs:
            visit(s)
        order.append(i)
    for r in sorted(regs):
        visit(r)
    return order


def rematerialize_constants(kernel):
    """The kernel with every constant live across a call written again at the call's return point
    (module docstring); the input kernel is not changed. Returns (kernel, copies inserted)."""
    return rematerialize(kernel, 1)


def _across(kernel, lv, c, ret) -> set:
    return (lv.live_in[ret] & lv.live_in[c]) - lv.defs[c] if ret < len(kernel.instructions) else set()


def _readers(kernel, lv) -> dict:
    """register -> indices of the instructions outside the routines (and calls) that read it."""
    skip = set().union(*lv.routines.values()) if lv.routines else set()
    skip |= {c for c, _, _ in kernel.calls}
    out = {}
    for i, u in enumerate(lv.uses):
        if i not in skip:
            for r in u:
                out.setdefault(r, []).append(i)
    return out


def _chain_lengths(inv: dict) -> dict:
    return {r: len(chain(inv, [r])) for r in inv}


def candidates(kernel, longest: int = 4) -> list:
    """[(register, where)]: invariants live across some call with a chain of at most `longest`
    writes, each computed again where that takes fewer copies ("returns": after each call it is
    live across; "uses": before each instruction that reads it), the fewest copies first."""
    lv = liveness(kernel)
    length = _chain_lengths(invariants(kernel, lv))
    calls = {}
    for c, _, ret in kernel.calls:
        for r in _across(kernel, lv, c, ret):
            if length.get(r, longest + 1) <= longest:
                calls[r] = calls.get(r, 0) + 1
    readers = _readers(kernel, lv)
    out = []
    for r, n in calls.items():
        uses = len(readers.get(r, ()))
        out.append((length[r] * min(n, uses), r, "uses" if uses < n else "returns"))
    return [(r, where) for _, r, where in sorted(out)]


def rematerialize(kernel, longest: int = 1, only=None):
    """The kernel with every invariant live across a call whose chain (`chain`: its write and
    its operands') is at most `longest` writes computed again at the call's return point
    (longest 1: the constants, ld.param and fixed specials), or with `only` ({register: "returns"
    or "uses"}) those, each where it says (before every instruction reading it: then it is live
    only from there); the input kernel is not changed. Returns (kernel, copies inserted)."""
    lv = liveness(kernel)
    inv = invariants(kernel, lv)
    length = _chain_lengths(inv)
    inserts = {}                                   # index -> [writes to insert before it]
    for c, _, ret in kernel.calls:
        across = _across(kernel, lv, c, ret)
        pick = [r for r in sorted(across) if length.get(r, longest + 1) <= longest
                and (only is None or only.get(r) == "returns")]
        if pick:
            inserts.setdefault(ret, []).extend(chain(inv, pick))
    readers = _readers(kernel, lv)
    for r in sorted(r for r, where in (only or {}).items() if where == "uses"):
        for i in readers.get(r, ()):
            inserts.setdefault(i, []).extend(chain(inv, [r]))
    inserts = {i: [replace(kernel.instructions[j], line=kernel.instructions[i if i < len(kernel.instructions)
                                                                              else -1].line)
                   for j in dict.fromkeys(idx)] for i, idx in inserts.items()}
    if not inserts:
        return kernel, 0
    held = {i + 1 for i in kernel.holds}           # a copy inside a sequence that holds the turn
    holds = set()                                  # holds it too
    code, new_index = [], []                       # new_index[i]: where instruction i went
    for i, ins in enumerate(kernel.instructions):
        if i in held:
            holds.update(range(len(code), len(code) + len(inserts.get(i, []))))
        code += inserts.get(i, [])
        new_index.append(len(code))
        code.append(ins)
    landing = [new_index[i] - len(inserts.get(i, [])) for i in range(len(new_index))]
    landing.append(len(code))

    out = kernel.renumbered(code, new_index.__getitem__, landing.__getitem__)
    out = replace(out, holds=out.holds | holds, directives=list(kernel.directives), regs=list(kernel.regs),
                  vars=list(kernel.vars))
    validate(in_own_module(out, kernel).module, out.name)
    return out, sum(len(v) for v in inserts.values())
