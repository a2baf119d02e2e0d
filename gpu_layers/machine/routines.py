"""Sequences called instead of written out (part of `gpu_layers.machine.lower`,
`lower(call_sequences=True)`): local sub-word accesses and 32-bit divisions.

word_memory._local_sub_word writes each 1- or 2-byte local access out at its site (the range
check, the frame's mask word of which bytes were ever written, the word's read-modify-write: 22
machine instructions a byte load, 32 a byte store), and _x_divrem each 32-bit division (about 50).
A kernel that keeps a byte array in local memory and unrolls its loops (rc4_keystream: 104 byte
accesses, 8 remainders) then needs more PCs than the core holds, so `core.machine_kernel` lowers
such a kernel again with these routines, after every other way to fit has failed. Each kind (a
load of each element type, a store of each size, a division of each type and result) is emitted
once after the kernel; a site moves its operands into argument registers, names itself in a
return register (a constant) and branches to the entry, as the float routines' sites do
(softfloat._call); the return goes through softfloat.emit_returns' tree. A site costs about four
instructions and each run about seven steps more than the inline sequence.

Only unguarded sites call (a guarded one is written out as before). The routine runs exactly the
inline sequence on its argument registers, so it computes, reads and writes what the inline code
does, poison included (moves carry it); where the inline code relies on what is proven at its
site (a division skips steps for operands proven defined) the routine proves nothing. A range
check's fault names the lines of all the routine's sites.
"""
from __future__ import annotations

from dataclasses import replace

from gpu_layers.ptx.ir import TYPE_BITS, Reg, Sink, Vec


class _Sequence:
    """Argument registers, sites and return branches of one called sequence. `body(em, r)` emits
    it on r.args, leaving its result (if any) in r.out."""

    def __init__(self, em, args: dict, out: int | None, body):
        self.args = {name: em.tmp(w) for name, w in args.items()}
        self.ret = em.tmp(32)
        self.out = em.tmp(out) if out else None
        self.body = body
        self.entry = em.label()
        self.sites = []              # per call site: (index of its bra, entry label, return label)
        self.weights = []            # per call site: how often it runs, roughly (softfloat.site_weight)
        self.returns = []            # indices of the routine's return branches
        self.lines = []              # the source line of each site

    def branch(self, em, line):
        """The end of a site whose arguments are in place: its number, the branch, the return
        label."""
        from gpu_layers.machine.softfloat import site_weight

        back = em.label()
        em.emit(f"mov.b32 {self.ret}, {len(self.sites)}")
        self.sites.append((len(em.code), self.entry, back))
        self.weights.append(site_weight(em))
        self.lines.append(line)
        em.emit(f"bra {self.entry}")
        em.place(back)

    def where(self) -> str:
        lines = sorted(set(self.lines))
        return f"line {lines[0]}" if len(lines) == 1 else f"one of lines {', '.join(map(str, lines))}"

    def emit(self, em):
        """The sequence after the kernel (its lines the first site's), then the returns."""
        from gpu_layers.machine.softfloat import _B, emit_returns

        em.line = self.lines[0]
        em.place(self.entry)
        self.body(em, self)
        emit_returns(_B(em), self)


def _routine(em, key, args, out, body) -> _Sequence:
    from gpu_layers.machine.softfloat import _routines

    rs = _routines(em)
    r = rs.get(key)
    if r is None:
        r = rs[key] = _Sequence(em, args, out, body)
    return r


# ------------------------------------------------------------------------------- local accesses


def calls_local(em, ins, size) -> bool:
    """Whether the local access `ins` of `size` bytes calls a routine: when the lowering asks
    for them, for unguarded scalar sub-word accesses."""
    vals = ins.operands[0 if ins.opcode == "ld" else 1]
    return em.call_sequences and size < 4 and ins.guard is None \
        and not isinstance(vals, Vec)


def call_local(em, ins, size, aop):
    """The site of local access `ins` (calls_local holds) at address operand `aop`: the
    effective local address goes straight into the argument register, a store's value into
    another; a load's destination is written from the result after the return."""
    from gpu_layers.machine import word_memory as W

    load = ins.opcode == "ld"
    plain = replace(ins, guard=None)

    def body(em, r):
        what = "load" if load else "store"
        why = (f"a {size}-byte local {what} outside the thread's {em.local_size} bytes of local "
               f"memory (at {r.where()}: every such {what} calls one routine)")
        a = r.args["addr"]
        W.local_at(em, plain, Reg(r.out if load else r.args["value"]), size, a, a, why)

    key = ("local", "ld", ins.types[0]) if load else ("local", "st", size)
    r = _routine(em, key, {"addr": 64} if load else {"addr": 64, "value": 32}, 32 if load else None, body)
    W._effective(em, aop, 64, into=r.args["addr"])
    if not load:
        em.emit(f"mov.b32 {r.args['value']}, {W._as_bits(em, ins.operands[1], 32)}")
    r.branch(em, ins.line)
    if load and not isinstance(ins.operands[0], Sink):
        W._write_elem(em, ins, ins.operands[0], r.out, TYPE_BITS[ins.types[0]], ins.types[0][0] == "s")


# ------------------------------------------------------------------------------------ divisions


def calls_division(em, ins, w) -> bool:
    """Whether the division or remainder `ins` (w bits) calls a routine: when the lowering asks
    for them, for unguarded 32-bit ones."""
    return em.call_sequences and w == 32 and ins.guard is None


def call_division(em, ins, w, signed, is_rem, a, b) -> str:
    """The site of division `ins` (calls_division holds) of a by b; the result register."""
    from gpu_layers.machine.lower import _divrem

    def body(em, r):
        res = _divrem(em, w, signed, is_rem, r.args["a"], r.args["b"])
        em.emit(f"mov.b{w} {r.out}, {res}")

    r = _routine(em, ("div", ins.name), {"a": w, "b": w}, w, body)
    for name, v in (("a", a), ("b", b)):
        em.emit(f"mov.b{w} {r.args[name]}, {v}")
    r.branch(em, ins.line)
    return r.out
