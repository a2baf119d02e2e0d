"""Register pressure of machine code: how many registers (and bits) a thread keeps live at once.

The register file lives in DeltaNet heads (docs/machine.md §4): its capacity per thread is what a
block's threads can hold, so the number that matters is the largest set of registers live at any
instruction, not the number the PTX declares. Standard backward liveness over the control-flow
graph: an unguarded write kills the register, a guarded one does not (the old value may survive),
the guard predicate is read.

    liveness(kernel) -> Liveness   uses, defs, successors, live-in / live-out sets per instruction
    pressure(kernel) -> Pressure   the most registers / bits live at once (also per width)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpu_layers.ptx.ir import TYPE_BITS, Addr, Pair, Reg, Vec
from gpu_layers.ptx.validator import SPECIAL_REGS, SUPPORTED

_DST_LETTERS = {"d", "q", "D", "V", "M"}


@dataclass
class Pressure:
    max_regs: int           # most registers live at one instruction
    max_bits: int           # most register bits live at one instruction
    declared: int           # registers the kernel declares
    by_width: dict = field(default_factory=dict)   # bits -> most live registers of that width


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


@dataclass
class Liveness:
    """Backward liveness of one kernel: per instruction, the registers it reads and writes and
    those live on entry to it and on exit from it (special registers excluded)."""
    width: dict             # register -> bits (TYPE_BITS of its declared type)
    uses: list              # per instruction: registers read (a guarded write also reads its destination)
    defs: list              # per instruction: registers written
    succ: list              # per instruction: successor indices
    live_in: list           # per instruction: registers live before it
    live_out: list          # per instruction: registers live after it
    routines: dict = field(default_factory=dict)   # per call's bra index: its routine's instructions

    @property
    def entry(self) -> set:
        """Registers live at the kernel's entry: read before any write on some path (possibly
        undefined, the interpreter's poison)."""
        return self.live_in[0] if self.live_in else set()

    def max_live(self, bits: int | None = None) -> int:
        """Most registers (of width `bits`, or of every width) live before one instruction."""
        return max((sum(1 for r in s if bits is None or self.width[r] == bits) for s in self.live_in),
                   default=0)


def successors(kernel) -> list:
    """Per instruction, the indices control can reach next. A subroutine call (Kernel.calls) goes
    on at its return point, and the routine's return branches end it: the routine is a region of
    its own, entered only through the call's summary (`liveness`)."""
    out = []
    n = len(kernel.instructions)
    calls = {c: r for c, _, r in kernel.calls}
    for i, ins in enumerate(kernel.instructions):
        s = []
        kind = SUPPORTED[ins.name].kind
        if i in calls:
            s.append(calls[i])
        elif i in kernel.returns:
            if ins.guard is not None:
                s.append(i + 1)
        elif kind == "bra":
            s.append(kernel.labels[ins.operands[0].name])
            if ins.guard is not None:
                s.append(i + 1)
        elif kind == "exit":
            if ins.guard is not None:
                s.append(i + 1)
        else:
            s.append(i + 1)
        out.append([j for j in s if j < n])
    return out


def liveness(kernel, through_returns: bool = False) -> Liveness:
    """Live registers before and after every instruction. through_returns: a routine's results
    (registers it writes that its caller reads after a return) stay live up to the return
    branch, which goes on at its site's return point; the per-width allocator does without it
    (a routine's return chain writes only predicates), a register-file slot shared across
    widths needs it."""
    width = {n: TYPE_BITS[d.type] for d in kernel.regs for n in d.names if n not in SPECIAL_REGS}
    code = kernel.instructions
    n = len(code)
    ud = [_uses_defs(ins, width) for ins in code]
    succ = successors(kernel)
    entry_of = {c: e for c, e, _ in kernel.calls}
    routines = {}
    for c, e in entry_of.items():       # a call writes every register its routine writes
        seen, todo = set(), [e]
        while todo:
            j = todo.pop()
            if j not in seen:
                seen.add(j)
                todo += succ[j]
        routines[c] = seen
        ud[c] = (ud[c][0], ud[c][1].union(*(ud[j][1] for j in seen)))
    ret = {}                            # return branch -> (its target, what its routine writes)
    if through_returns:                 # (for the calls that return there: the union)
        back_of = {c: r for c, _, r in kernel.calls}
        for c, body in routines.items():
            for j in body & set(kernel.returns):
                t = kernel.labels[code[j].operands[0].name]
                if t == back_of[c]:
                    ret[j] = (t, ud[c][1] | ret.get(j, (t, set()))[1])
    live_in = [set() for _ in range(n)]

    def live_out_of(i):
        out = set()
        for j in succ[i]:
            out |= live_in[j]
        if i in ret:
            out |= live_in[ret[i][0]] & ret[i][1]
        return out

    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            out = live_out_of(i)
            uses, defs = ud[i]
            if i in entry_of:           # and reads what its routine reads before writing
                uses = uses | live_in[entry_of[i]]
            new = uses | (out - defs)
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    live_out = [live_out_of(i) for i in range(n)]
    uses = [u | live_in[entry_of[i]] if i in entry_of else u for i, (u, _) in enumerate(ud)]
    return Liveness(width, uses, [d for _, d in ud], succ, live_in, live_out, routines)


def pressure(kernel) -> Pressure:
    lv = liveness(kernel)
    width = lv.width
    best_regs = max((len(s) for s in lv.live_in), default=0)
    best_bits = max((sum(width[r] for r in s) for s in lv.live_in), default=0)
    by_width = {w: lv.max_live(w) for w in sorted(set(width.values()))}
    return Pressure(best_regs, best_bits, len(width), by_width)
