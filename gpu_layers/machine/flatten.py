"""Flattening a launch: a multi-dimensional grid or block becomes the equivalent 1-D launch.

Why: the machine's datapath has only the thread's linear index (%tid.x in a 1-D block) and the
block's (%ctaid.x in a 1-D grid). The reference interpreter (gpu_layers/interp/machine.py)
linearises thread and block ids x fastest (id = x + X*(y + Y*z)), makes warps of 32 consecutive
linear thread ids and runs blocks in linear order, so a launch of gx*gy*gz blocks of bx*by*bz
threads runs the very same threads, warps and blocks in the same order. Only what the kernel reads
of the launch's shape changes:

  * every read of %tid.*, %ctaid.*, %ntid.*, %nctaid.* whose value differs under the flat launch
    reads a fresh register instead, computed (unguarded) right before the reading instruction:
    the component from the flat %tid.x / %ctaid.x, or the original launch's constant. Division
    and modulo by a constant use shifts, ands, adds and subs only (the machine turns a
    data-dependent multiply into a 32-step loop): q = (t * m) >> s, m = ceil(2^s / d), checked
    exact for every t below the flat count; r = t - q * d;
  * `.reqntid X, Y, Z` becomes `.reqntid X*Y*Z` (.maxntid bounds the thread count only: it stays).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from math import prod

import numpy as np

from gpu_layers.interp.machine import _check_launch
from gpu_layers.ptx.ir import Addr, Imm, Kernel, Reg, RegDecl, Vec, in_own_module
from gpu_layers.ptx.validator import validate

from .lower import _Emitter, _mul_const, _op

_COMP = "xyz"
_SHAPE_REGS = {f"%{k}.{c}" for k in ("tid", "ntid", "ctaid", "nctaid") for c in _COMP}
_TMP = {32: ("b32", ""), 64: ("b64", "d")}


def flatten_launch(kernel: Kernel, grid, block) -> tuple[Kernel, tuple, tuple]:
    """(kernel, grid, block) of the 1-D launch equivalent to launching `kernel` on grid x block.

    A launch already 1-D returns `kernel` itself; otherwise a new Kernel (the input is unchanged).
    Raises LaunchError for a launch the interpreter would refuse."""
    cfg = _check_launch(kernel, grid, block, lanes=4, dynamic_shared_bytes=0, step_budget=None)
    grid, block = cfg.grid, cfg.block
    flat_grid, flat_block = (prod(grid), 1, 1), (prod(block), 1, 1)
    if grid == flat_grid and block == flat_block:
        return kernel, grid, block
    if kernel.calls or kernel.returns:
        raise ValueError(f"kernel {kernel.name} is machine code: flatten the PTX before lowering it")
    if kernel.module is not None:
        validate(kernel.module, kernel.name)
    dims = {"tid": block, "ntid": block, "ctaid": grid, "nctaid": grid}
    em = _FlatEmitter(kernel)
    starts = []
    for ins in kernel.instructions:
        starts.append(len(em.code))
        em.line = ins.line
        names = [name for name in _reads(ins) if _changes(name, dims)]
        if _plain_mov(ins) and names and _constant(names[0], dims) is not None:
            # `mov r, %ntid.x`: r = the launch's number itself, so that the lowering sees a
            # constant register (remat.constants: a multiply by it becomes shifts and adds)
            em.code.append(replace(ins, operands=[ins.operands[0], Imm(_constant(names[0], dims))]))
            continue
        fresh = {name: _value(em, name, dims) for name in names}
        em.code.append(replace(ins, operands=[_renamed(op, fresh) for op in ins.operands])
                       if fresh else ins)
    starts.append(len(em.code))
    out = replace(kernel, regs=list(kernel.regs) + em.decls(), instructions=em.code,
                  labels={name: starts[i] for name, i in kernel.labels.items()},
                  directives=[_directive(line, text, block) for line, text in kernel.directives],
                  vars=list(kernel.vars), params=list(kernel.params), calls=[], returns=frozenset())
    validate(in_own_module(out, kernel).module, out.name)
    return out, flat_grid, flat_block


def launch_constants(kernel, grid, block):
    """A 1-D launch's kernel with its shape registers (%ntid.*, %nctaid.*) read as immediates:
    the machine code is made for this launch, and a multiply by blockDim.x then becomes shifts
    and adds when lowering instead of a loop (the datapath reads them as constants anyway).
    Returns `kernel` itself when it reads none."""
    values = {f"%ntid.{c}": n for c, n in zip(_COMP, block)}
    values.update({f"%nctaid.{c}": n for c, n in zip(_COMP, grid)})

    def imm(op):
        return Imm(values[op.name]) if isinstance(op, Reg) and op.name in values else op
    code = [replace(ins, operands=[imm(op) for op in ins.operands]) for ins in kernel.instructions]
    if all(a.operands == b.operands for a, b in zip(code, kernel.instructions)):
        return kernel
    out = replace(kernel, instructions=code, labels=dict(kernel.labels), regs=list(kernel.regs),
                  directives=list(kernel.directives), vars=list(kernel.vars), params=list(kernel.params))
    validate(in_own_module(out, kernel).module, out.name)
    return out


def _reads(ins) -> list:
    """Names of the special registers of the launch's shape that `ins` reads, in order."""
    names = []
    for op in ins.operands:
        elems = op.elems if isinstance(op, Vec) else (op.base,) if isinstance(op, Addr) else (op,)
        names += [e.name for e in elems if isinstance(e, Reg) and e.name in _SHAPE_REGS
                  and e.name not in names]
    return names


def _split(name, dims):
    """(kind, component index, the original dims) of a special register name."""
    kind, c = name[1:].split(".")
    return kind, _COMP.index(c), dims[kind]


def _changes(name, dims) -> bool:
    """Whether `name` reads differently under the flat launch."""
    kind, c, d = _split(name, dims)
    flat = (prod(d), 1, 1)
    if kind in ("ntid", "nctaid"):
        return d[c] != flat[c]
    return d[c] != (flat[0] if c == 0 else 1)       # x: the whole flat index; y, z: 0


def _constant(name, dims) -> int | None:
    """What `name` reads under the original launch where that is a number: a dimension of the
    block or grid, or an index along a dimension of size 1 (0); else None."""
    kind, c, d = _split(name, dims)
    if kind in ("ntid", "nctaid"):
        return d[c]
    return 0 if d[c] == 1 else None


def _plain_mov(ins) -> bool:
    return (ins.opcode == "mov" and ins.guard is None and len(ins.operands) == 2
            and isinstance(ins.operands[0], Reg) and isinstance(ins.operands[1], Reg))


def _value(em, name, dims) -> str:
    """A register holding what `name` reads under the original launch (fresh, or the flat
    index itself where that is the value)."""
    kind, c, d = _split(name, dims)
    k = _constant(name, dims)
    if k is not None:
        t = em.tmp(32)
        em.emit(f"mov.u32 {t}, {k}")
        return t
    n, stride = prod(d), prod(d[:c])
    q = _div(em, f"%{kind}.x", stride, n)
    if stride * d[c] == n:              # the outermost dimension: no modulo
        return q
    return _rem(em, q, d[c], n // stride)


def _div(em, x, d, n) -> str:
    """A register holding x / d (unsigned 32-bit x < n, d a constant): x itself for d = 1."""
    if d == 1:
        return x
    if d & (d - 1) == 0:
        return _op(em, 32, "shr", x, d.bit_length() - 1, "u32")
    m, s = _magic(d, n)
    if (n - 1) * m < 1 << 32:
        return _op(em, 32, "shr", _mul_const(em, 32, x, m), s, "u32")
    wide = em.tmp(64)
    em.emit(f"cvt.u64.u32 {wide}, {x}")
    q = _op(em, 64, "shr", _mul_const(em, 64, wide, m), s, "u64")
    out = em.tmp(32)
    em.emit(f"cvt.u32.u64 {out}, {q}")
    return out


def _rem(em, x, d, n) -> str:
    """A fresh register holding x mod d (unsigned 32-bit x < n, d a constant)."""
    if d & (d - 1) == 0:
        return _op(em, 32, "and", x, d - 1)
    qd = _mul_const(em, 32, _div(em, x, d, n), d)
    return _op(em, 32, "sub", x, qd, "u32")


@lru_cache(maxsize=None)
def _magic(d: int, n: int) -> tuple[int, int]:
    """(m, s) with (t * m) >> s == t // d for every 0 <= t < n, m = ceil(2^s / d): the cheapest
    (32-bit arithmetic where any fits, then the fewest set bits of m), checked on every t.

    s = bit length of (n-1)(d-1) is always exact (t * (m*d - 2^s) < 2^s), so the search ends."""
    if d < 1 or not 1 <= n <= 1 << 20:
        raise ValueError(f"division by {d} of values below {n}: d >= 1 and 1 <= n <= 2^20 required")
    cands = [(-(-(1 << s) // d), s) for s in range(((n - 1) * (d - 1)).bit_length() + 1)]
    cands.sort(key=lambda ms: ((n - 1) * ms[0] >= 1 << 32, bin(ms[0]).count("1"), ms[1]))
    m, s = next((m, s) for m, s in cands if _exact(m, s, d, n))
    t = np.arange(n, dtype=np.uint64)
    if not np.array_equal((t * np.uint64(m)) >> np.uint64(s), t // np.uint64(d)):
        raise ArithmeticError(f"(t * {m}) >> {s} is not t / {d} for every t < {n}")
    return m, s


def _exact(m, s, d, n) -> bool:
    """Whether (t * m) >> s == t // d for every t < n: t = q*d + r is exact iff
    t * (m*d - 2^s) < (d - r) * 2^s, tightest at the largest t of each residue r."""
    r = np.arange(min(d, n), dtype=np.int64)
    top = r + (n - 1 - r) // d * d
    return bool(np.all(top * (m * d - (1 << s)) < (d - r) << s))


def _renamed(op, fresh):
    """op with each special register in `fresh` replaced by its fresh register."""
    if isinstance(op, Reg):
        return Reg(fresh.get(op.name, op.name))
    if isinstance(op, Vec):
        return Vec(tuple(_renamed(e, fresh) for e in op.elems))
    if isinstance(op, Addr) and isinstance(op.base, Reg):
        return Addr(_renamed(op.base, fresh), op.offset)
    return op


def _directive(line, text, block):
    """(line, text) of a kernel directive under the flat launch: .reqntid names its thread count."""
    if text.split()[0] == ".reqntid":
        return line, f".reqntid {prod(block)}"
    return line, text


class _FlatEmitter(_Emitter):
    """lower's emitter, its temporaries named apart from lower's (%mq...) and the kernel's."""

    def __init__(self, kernel):
        super().__init__(kernel)
        taken = {n for d in kernel.regs for n in d.names}
        self.prefix = "%fq"
        while any(n.startswith(self.prefix) for n in taken):
            self.prefix += "q"

    def tmp(self, bits: int) -> str:
        self.count[bits] += 1
        return f"{self.prefix}{_TMP[bits][1]}{self.count[bits]}"

    def decls(self) -> list:
        return [RegDecl(type=t, names=[f"{self.prefix}{p}{i}" for i in range(1, self.count[w] + 1)],
                        line=0) for w, (t, p) in _TMP.items() if self.count[w]]
