"""The recycle pass: residual dims that a dead field held carry a later field.

A field is written once and read until some depth position; after its last read its dims only
cost width (W is the hidden size of every layer, host layers included, so it sets the spliced
checkpoint's size). The residual is a sum: a dead field's value stays unless something subtracts
it. This pass, run after the scheduler, gives each field physical dims (`Recycling.dmap`: circuit
dim -> physical dim): a field may take the dims of a field that died before it is born, once one
MLP stage between the two has subtracted the dead value (a *zeroing*: one linear neuron per dim,
`circuit.Linear`, in a layer with neurons to spare; the dead field's last reader's own MLP may do
it). The norms stop counting the dead field at its zeroing (`Layout.dies`), so every norm stays
data-independent.

The zeroing subtracts the value the dim holds, analog error and earlier residues included, up to
fp32 rounding at the scale of the neuron's lift: a recycled dim keeps a residue of about 2e-6
(bound: RESIDUE), whatever it held before. A field goes on a recycled dim only if it tolerates that:

* a quarter of every reading step's margin over the sum of the step's |coefficients| (the residue
  moves t by at most that sum times the residue);
* DATA_TOL for memory data rails and ENABLE_TOL for write enables, resets and blanks;
* nothing (fresh dims only) for memory addresses, read enables and what the LM head reads: a
  DeltaNet key needs its exact zeros (a one-hot key leaking 1e-6 spreads every write over all
  slots, an error that grows with the run) and a disabled read must add an exact 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .circuit import Circuit, Linear, MLPStage
from .fields import Field, Lin

LIFT = 21.0               # t + lift in [20, 22] for |t| <= 1: silu's identity, ulp 1.9e-6
RESIDUE = 1e-5            # a recycled dim's residue: rounding of t + lift, of the product and of the
#                           sum with the bias (each <= 1e-6 in fp32), and the norm's 1e-7 of the value
SAFETY = 0.25             # share of a step's margin the residue may take
DATA_TOL = 1e-4           # memory data rails: silu(100 r) ~ 50 r beside a rail of 100
ENABLE_TOL = 1e-3         # beta / reset / blank pre-activations saturate at +-200


@dataclass
class Recycling:
    dmap: np.ndarray                     # circuit dim -> physical dim
    width: int                           # physical dims (without the text flag)

    @classmethod
    def identity(cls, width: int) -> "Recycling":
        return cls(np.arange(width, dtype=np.int64), width)


def _owner(c: Circuit) -> dict[int, Field]:
    return {d: f for f in c.layout.fields.values() for d in range(f.start, f.stop)}


def last_reads(c: Circuit, plans: list, position: dict[str, int]) -> dict[str, int]:
    """Field -> the last depth position that reads it (a stage's position; 2 * len(plans) for
    what the LM head reads after the last layer); fields nothing reads are absent."""
    owner = _owner(c)
    last: dict[str, int] = {}
    for st in c.stages:
        for d in st.input_dims():
            n = owner[d].name
            last[n] = max(last.get(n, -2), position[st.name])
    for lin in c.logits.values():
        for d in lin.dims():
            last[owner[d].name] = 2 * len(plans)
    return last


def tolerances(c: Circuit) -> dict[str, float]:
    """The residue each field's dims may carry (0: fresh dims only)."""
    owner = _owner(c)
    tol = {n: float("inf") for n in c.layout.fields}

    def cap(lin, t):
        if lin is None:
            return
        names = {lin.name} if isinstance(lin, Field) else {owner[d].name for d in lin.dims()}
        for n in names:
            tol[n] = min(tol[n], t)

    for st in c.stages:
        if isinstance(st, MLPStage):
            for step in st.steps:
                s = sum(abs(v) for v in step.t.coef.values())
                if s:
                    cap(step.t, SAFETY * step.margin / s)
            for ln in st.linear:
                cap(ln.t, 0.0)
        else:
            for p in st.ports:
                for a in (p.waddr, p.raddr):
                    if isinstance(a, Field):
                        cap(a, 0.0)
                cap(p.re, 0.0)
                for lane in range(p.lanes):
                    for b, nb in p.data_bits(lane):
                        cap(b, DATA_TOL)
                        cap(nb, DATA_TOL)
                for lin in list(p.we or []) + list(p.blank or []) + [p.reset]:
                    cap(lin, ENABLE_TOL)
    for lin in c.logits.values():
        cap(lin, 0.0)
    tol["one"] = 0.0
    return tol


def zero_stage(f: Field, name: str) -> MLPStage:
    """An MLP stage that subtracts f's value: one linear neuron per dim."""
    return MLPStage(name, [], {}, [], linear=[Linear(Lin({d: 1.0}), LIFT, {d: -1.0})
                                              for d in range(f.start, f.stop)])


def recycle(c: Circuit, plans: list, position: dict[str, int], intermediate: int) -> Recycling:
    """Physical dims for every field (see the module docstring); adds the zeroing stages to
    `plans` and the zeroing positions to the layout (its norms stop counting the dead fields)."""
    L = c.layout
    final = 2 * len(plans)
    last = last_reads(c, plans, position)
    wlast = {n: max(position[w.name] for w in ws) for n, ws in c.writers.items()}
    born = {n: L.born.get(n, -1) for n in L.fields}
    tol = tolerances(c)
    used = [pl.neurons() for pl in plans]
    has_bias = [any(st.bias or st.linear for st in pl.mlp) for pl in plans]

    def free_at(n) -> int:          # the first MLP position that may subtract field n
        q = max(last.get(n, -2), wlast.get(n, born[n]) + 1, born[n] + 1)
        return q + (q % 2 == 0)

    dmap = np.full(L.width, -1, dtype=np.int64)
    rec = Recycling(dmap, 0)
    keep = {f.name for f in L.constants}
    dead = sorted((free_at(n), n) for n in L.fields if n not in keep and last.get(n, -2) < final)
    pool: list[int] = []            # recycled physical dims, free

    def zero_one(b: int) -> bool:
        """Zero the earliest-dead field whose subtraction fits an MLP in [its free_at, b]."""
        for i, (q, m) in enumerate(dead):
            if q > b:
                return False
            g = L.fields[m]
            for p in range(q, b + 1, 2):
                lay = p // 2
                need = g.dims + (0 if has_bias[lay] else 1)
                if used[lay] + need <= intermediate:
                    used[lay] += need
                    has_bias[lay] = True
                    plans[lay].mlp.append(zero_stage(g, f"zero_{m}"))
                    L.dies[m] = p
                    pool.extend(int(dmap[d]) for d in range(g.start, g.stop))
                    del dead[i]
                    return True
        return False

    width = 0
    for n in sorted(L.fields, key=lambda n: (born[n], L.fields[n].start)):
        f = L.fields[n]
        for d in range(f.start, f.stop):
            if tol[n] >= RESIDUE and (pool or zero_one(born[n])):
                dmap[d] = pool.pop()
            else:
                dmap[d] = width
                width += 1
    rec.width = width
    return rec
