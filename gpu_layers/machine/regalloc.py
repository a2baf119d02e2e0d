"""Register allocation: every register of a kernel mapped onto a few machine registers per width.

The register file lives in DeltaNet heads, one slot per machine register per thread (docs/machine.md
§4), so what a kernel costs is the number of machine registers it needs, not the number it
declares. `allocate(kernel)` renames every register onto machine registers, one pool per width
class, so every instruction reads and writes exactly the bits it did (the interpreter truncates
sources and extends destinations by the *declared register width*; the type name does not matter,
so f32 registers share the 32-bit pool and f64 the 64-bit one):

    pool    declared as   names
    1 bit   .pred         %mp0, %mp1, ...
    16 bit  .b16          %mh0, ...
    32 bit  .b32          %mr0, ...
    64 bit  .b64          %md0, ...

Special registers (%tid.x, ...) are not registers of the file and stay as they are.

Interference (from liveness.py): a register written at instruction i interferes with every
register of its pool live after i (a guarded write counts as a write: the old value of the others
must survive it); the destinations of one instruction interfere with each other. Registers live at
the kernel's entry (read before any write on some path: possibly undefined, the interpreter's
poison) are treated as written by the entry, so they interfere with each other and, through the
rule above, with everything written while they are live: a possibly-undefined register never
shares a machine register with a value that could be read in place of its poison. With that
entry rule every set of registers live at one point is a clique, so the most registers of a pool
live at once (`bound`, liveness.py's measure) is a lower bound on that pool's count; so is
`floor`, the same over what is live after each instruction plus what it writes (a write nothing
reads still needs a register). Greedy coloring in program order of first appearance (then DSATUR,
then reverse order, if it misses the floor) reaches the floor on every lowered suite case but
one. Without live-range splitting the floor is not always reachable: the interference graph of
registers that are rewritten (not SSA) need not be chordal (grid_stride, original or lowered,
needs 13 32-bit registers for a maximum of 12 live).

Two more rules keep a destination out of a source's machine register where one instruction could
otherwise read the value it has just written: `mov {a, b}, x` with element registers as wide as x
(the interpreter writes a in every lane before it reads x for b), and the operand a warp exchange
reads from *other* lanes (shfl's source, vote's predicate, match's value: the interpreter reads
every lane before it writes, but the machine issues a warp-instruction lane group by lane group,
docs/machine.md §3, so a later group would read an earlier group's new value). On the lowered
suite these cost one predicate register in two cases (a vote whose predicate dies at the vote),
the only counts above `bound`. Every other instruction reads its sources in a lane before it
writes that lane's destinations (a load into its own address register included: the
interpreter's scalar global fast path, which restarts on the general path, is not used for it).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpu_layers.machine.liveness import _regs, liveness
from gpu_layers.ptx.ir import Addr, Guard, Pair, Reg, RegDecl, Vec, in_own_module
from gpu_layers.ptx.validator import SPECIAL_REGS, SUPPORTED, validate

# width in bits -> (declared type, name prefix) of the machine registers of that pool
POOLS = {1: ("pred", "%mp"), 16: ("b16", "%mh"), 32: ("b32", "%mr"), 64: ("b64", "%md")}

# kinds whose operand 1 is read in other lanes (warp exchanges, module docstring)
_CROSS_LANE_KINDS = frozenset({"shfl", "vote", "match"})


@dataclass
class Allocation:
    counts: dict                                   # width -> machine registers used
    mapping: dict                                  # original register -> machine register
    bound: dict = field(default_factory=dict)      # width -> most registers live at once (lower bound)
    floor: dict = field(default_factory=dict)      # width -> largest clique found (lower bound >= bound)
    joint: bool = False                            # colored across widths (`allocate`'s docstring)

    @property
    def total(self) -> int:
        """Machine registers per thread, every pool."""
        return sum(self.counts.values())

    @property
    def bits(self) -> int:
        """Register-file bits per thread: sum over pools of count x width."""
        return sum(w * n for w, n in self.counts.items())

    @property
    def slack(self) -> dict:
        """Per pool, machine registers used beyond the liveness bound (0: optimal)."""
        return {w: self.counts[w] - self.bound.get(w, 0) for w in self.counts}


def interference(kernel, lv=None, cross_width: bool = False) -> dict:
    """register -> set of registers (same width; any width with cross_width) it must not share a
    machine register (a register-file slot) with."""
    lv = lv or liveness(kernel)
    width = lv.width
    graph = {}

    def edge(a, b):
        if a != b and (cross_width or width[a] == width[b]):
            graph[a].add(b)
            graph[b].add(a)

    for i, ins in enumerate(kernel.instructions):
        for r in lv.uses[i] | lv.defs[i]:
            graph.setdefault(r, set())
    for r in lv.entry:
        graph.setdefault(r, set())
    calls = {c for c, _, _ in kernel.calls}
    entry = sorted(lv.entry)
    for k, a in enumerate(entry):         # the entry "writes" every register live there
        for b in entry[k + 1:]:
            edge(a, b)
    for i, ins in enumerate(kernel.instructions):
        defs = lv.defs[i]
        if not defs:
            continue
        call = i in calls           # a call's writes are its routine's, ordered inside it
        for d in defs:
            for r in lv.live_out[i]:
                if not (call and r in defs):
                    edge(d, r)
            if not call:
                for e in defs:
                    edge(d, e)
        for s in _hazard_sources(ins, width):
            for d in defs:
                edge(d, s)
    return graph


def _hazard_sources(ins, width) -> list:
    """Sources an instruction's destinations must not share a machine register with."""
    kind = SUPPORTED[ins.name].kind
    ops = ins.operands
    if (kind == "mov" and isinstance(ops[0], Vec)) or kind in _CROSS_LANE_KINDS:
        return [n for n in _regs(ops[1]) if n in width]
    return []


def _floor(kernel, lv, w) -> int:
    """Most registers of width w that must hold distinct values at one point: those live after an
    instruction with its destinations (and the sources they must not share with), or live before it.
    At a subroutine call: the values live across it, and the most its routine holds at once (every
    register the routine touches interferes with every value live across a call)."""
    width = lv.width
    calls = {c for c, _, _ in kernel.calls}
    at = []
    for i, ins in enumerate(kernel.instructions):
        after = lv.live_out[i] | (lv.defs[i] if i not in calls else set())
        if lv.defs[i] and i not in calls:
            after |= set(_hazard_sources(ins, width))
        at.append(max(sum(1 for r in after if width[r] == w),
                      sum(1 for r in lv.live_in[i] if width[r] == w)))
    best = max(at, default=0)
    for c, routine in lv.routines.items():
        across = sum(1 for r in lv.live_out[c] - lv.defs[c] if width[r] == w)
        best = max(best, across + max(at[j] for j in routine))
    return best


def _order(kernel, lv, graph) -> list:
    """Registers in program order of first appearance (entry-live ones first)."""
    seen, order = set(), []
    for r in sorted(lv.entry):
        seen.add(r)
        order.append(r)
    for i in range(len(kernel.instructions)):
        for r in sorted(lv.defs[i]) + sorted(lv.uses[i]):
            if r not in seen and r in graph:
                seen.add(r)
                order.append(r)
    return order


def _greedy(order, graph, related=None) -> dict:
    """First-fit coloring in `order`; with `related` ({register: registers a mov copies it to or
    from}), a register takes a related one's color where it is free (never a new color), so the
    copy between them becomes a `mov %x, %x` that drop_self_moves removes."""
    color = {}
    for r in order:
        taken = {color[n] for n in graph[r] if n in color}
        c = next((color[m] for m in (related or {}).get(r, ()) if m in color and color[m] not in taken), None)
        if c is None:
            c = 0
            while c in taken:
                c += 1
        color[r] = c
    return color


def _moves(kernel, graph) -> dict:
    """{register: the registers a plain register-to-register mov copies it to or from}."""
    related = {}
    for ins in kernel.instructions:
        ops = ins.operands
        if ins.opcode == "mov" and len(ops) == 2 and all(isinstance(x, Reg) and x.name in graph for x in ops):
            a, b = ops[0].name, ops[1].name
            if a != b:
                related.setdefault(a, []).append(b)
                related.setdefault(b, []).append(a)
    return related


def _dsatur(nodes, graph) -> dict:
    """Brelaz: color next the register whose neighbours use the most distinct colors."""
    color, sat = {}, {r: set() for r in nodes}
    left = set(nodes)
    rank = {r: i for i, r in enumerate(nodes)}
    while left:
        r = max(left, key=lambda x: (len(sat[x]), len(graph[x]), -rank[x]))
        c = 0
        while c in sat[r]:
            c += 1
        color[r] = c
        left.discard(r)
        for n in graph[r]:
            sat[n].add(c)
    return color


def _color_pool(nodes, graph, bound, related=None) -> dict:
    best = None
    for attempt in (lambda: _greedy(nodes, graph, related), lambda: _greedy(nodes, graph), lambda: _dsatur(nodes, graph),
                    lambda: _greedy(list(reversed(nodes)), graph)):
        col = attempt()
        used = 1 + max(col.values(), default=-1)
        if best is None or used < best[0]:
            best = (used, col)
        if used <= bound:
            break
    return best[1]


def shared_slots(kernel) -> dict:
    """{machine register: slot} for a kernel already on machine registers, where registers of
    different widths share a register-file slot when their live ranges never meet (the same
    interference rules across widths: a slot holds one 64-bit word, and a commit replaces it
    whole). A joint allocation (`allocate`: %mr7 and %md7 never live together) keeps its
    numbers as slots; otherwise the machine registers are colored across widths."""
    lv = liveness(kernel, through_returns=True)
    graph = interference(kernel, lv, cross_width=True)
    prefixes = {prefix for _, prefix in POOLS.values()}
    by_index = {r: int(r[3:]) for r in graph if r[:3] in prefixes and r[3:].isdigit()}
    if len(by_index) == len(graph) and all(by_index[a] != by_index[b] for a in graph for b in graph[a]):
        return by_index
    return _color_pool(_order(kernel, lv, graph), graph, lv.max_live())


def register_slots(kernel, limit: int = 32) -> dict:
    """{register: register-file slot}: the interpreter's register table's order (predicates, then
    16-, 32-, 64-bit registers) while there are at most `limit`, else `shared_slots` (a
    register nothing touches gets slot 0). The one slot map of the register file and the
    datapath (slots >= limit mean the kernel does not fit)."""
    from gpu_layers.interp.machine import program_for

    names = list(program_for(kernel).regbits)
    if len(names) <= limit:
        return {n: i for i, n in enumerate(names)}
    shared = shared_slots(kernel)
    return {n: shared.get(n, 0) for n in names}


def allocate(kernel, slots: int = 32):
    """(the kernel on machine registers, the Allocation). The input kernel is not changed.
    When the pools together need more than `slots` machine registers (a register file of that
    many 64-bit slots per thread), the registers are colored once across every width instead
    (a joint allocation): register r of width w becomes the machine register of w numbered by
    its color, so %mr7 and %md7 share slot 7 and are never live together
    (Allocation.joint; `shared_slots` reads the slots back). The pools peak at different
    instructions: an f64 routine's kernels need 34-40 machine registers by pool, 27-33 slots
    jointly."""
    lv = liveness(kernel)
    graph = interference(kernel, lv)
    order = _order(kernel, lv, graph)
    related = _moves(kernel, graph)
    odd = sorted(r for r in order if lv.width[r] not in POOLS)
    if odd:
        raise ValueError(f"registers of a width without a pool: {odd}")
    mapping, counts, bound, floor = {}, {}, {}, {}
    for w, (_, prefix) in POOLS.items():
        nodes = [r for r in order if lv.width[r] == w]
        if not nodes:
            continue
        bound[w] = lv.max_live(w)
        floor[w] = _floor(kernel, lv, w)
        col = _color_pool(nodes, graph, floor[w], related)
        counts[w] = 1 + max(col.values())
        for r, c in col.items():
            mapping[r] = f"{prefix}{c}"
    names = {w: [f"{POOLS[w][1]}{i}" for i in range(n)] for w, n in counts.items()}
    joint = False
    if sum(counts.values()) > slots:
        lvx = liveness(kernel, through_returns=True)      # a routine's results, live to its returns
        gx = interference(kernel, lvx, cross_width=True)
        col = _color_pool(_order(kernel, lvx, gx), gx, lvx.max_live(), _moves(kernel, gx))
        if max(col.values()) < slots:
            joint = True
            mapping = {r: f"{POOLS[lv.width[r]][1]}{c}" for r, c in col.items()}
            used = {w: sorted({c for r, c in col.items() if lv.width[r] == w}) for w in counts}
            names = {w: [f"{POOLS[w][1]}{c}" for c in used[w]] for w in counts}
            counts = {w: len(used[w]) for w in counts}
    out = replace(kernel, regs=[RegDecl(type=POOLS[w][0], names=names[w], line=0) for w in sorted(counts)],
                  instructions=[_rename(ins, mapping) for ins in kernel.instructions],
                  labels=dict(kernel.labels), directives=list(kernel.directives))
    out = drop_self_moves(out)
    validate(in_own_module(out, kernel).module, out.name)
    return out, Allocation(counts, mapping, bound, floor, joint)


def is_register_copy(ins) -> bool:
    """`mov %a, %b` of two registers: what coloring may turn into `mov %x, %x` (drop_self_moves),
    so the most a kernel's allocation can shorten it by (core.machine_kernel's fit)."""
    return ins.opcode == "mov" and len(ins.operands) == 2 and all(isinstance(x, Reg) for x in ins.operands)


def drop_self_moves(kernel):
    """The kernel without its `mov %x, %x` instructions: the coloring gives an argument copy and
    the register it copies one machine register when their live ranges only touch, and such a
    copy is a step (and its value's <d> tokens) that changes nothing, poison included. Kept:
    moves whose index means more than a place (a held turn, a warp barrier, a check, a return);
    a label or a call's return point on a dropped move names the next instruction."""
    pinned = set(kernel.holds) | set(kernel.warp_barriers) | set(kernel.checks) | set(kernel.returns)
    drop = {i for i, ins in enumerate(kernel.instructions)
            if i not in pinned and is_register_copy(ins) and ins.operands[0] == ins.operands[1]}
    if not drop:
        return kernel
    new, kept = [], 0                   # new[i]: instruction i's index, or the next kept one's
    for i in range(len(kernel.instructions) + 1):
        new.append(kept)
        if i < len(kernel.instructions) and i not in drop:
            kept += 1
    return kernel.renumbered([ins for i, ins in enumerate(kernel.instructions) if i not in drop],
                             new.__getitem__, new.__getitem__)


def _rename(ins, mapping):
    def reg(x):
        if isinstance(x, Reg) and x.name not in SPECIAL_REGS and x.name in mapping:
            return Reg(mapping[x.name])
        return x

    def op(x):
        if isinstance(x, Reg):
            return reg(x)
        if isinstance(x, Vec):
            return Vec(tuple(reg(e) for e in x.elems))
        if isinstance(x, Pair):
            return Pair(reg(x.first), reg(x.second))
        if isinstance(x, Addr) and isinstance(x.base, Reg):
            return Addr(reg(x.base), x.offset)
        return x

    guard = ins.guard
    if guard is not None and guard.reg in mapping:
        guard = Guard(mapping[guard.reg], guard.negated)
    return replace(ins, guard=guard, operands=[op(x) for x in ins.operands])
