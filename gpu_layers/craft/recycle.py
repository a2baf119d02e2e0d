"""The recycle pass: residual dims that a dead field held carry a later field.

A field is written once and read until some depth position; after its last read its dims only
cost width (W is the hidden size of every layer, host layers included, so it sets the spliced
checkpoint's size). The residual is a sum: a dead field's value stays unless something subtracts
it. This pass, run after the scheduler, gives each field physical dims (`Recycling.dmap`: circuit
dim -> physical dim): a field may take the dims of a field that died before it is born, once one
MLP stage between the two has subtracted the dead value (a *zeroing*: one step per dim, 2 neurons,
in a layer with neurons to spare; the dead field's last reader's own MLP may do it). The norms
stop counting the dead field at its zeroing (`Layout.dies`), so every norm stays data-independent.

The subtraction is not exact: a step's output is 1 up to fp32 rounding of its pre-activation, so a
recycled dim keeps a *residue* (measured up to 2.4e-4 on the core's ALU carry fields). Bounds:

* a field's write error: 5e-7 x (its writer step's |t|/m + 1) x |the value it adds| (calibrated on
  the compiled core: measured errors stay at or below a quarter of it); a memory read's 2e-5.
* a field's tolerance: a quarter of every reading step's margin over the sum of its |coefficients|
  (the residue moves t by at most that sum times the residue); 1e-4 for memory data rails, 1e-3 for
  write enables, resets and blanks; 0 (fresh dims only) for memory addresses and read enables
  (DeltaNet keys and the z gate need exact zeros: a one-hot key with a 1e-6 leak spreads every
  write over all slots) and for what the LM head reads.

A field goes on recycled dims only where the residue of each dim stays within its tolerance.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field as dc_field

import numpy as np

from .circuit import Circuit, MLPStage, Step
from .fields import Field, Lin

WRITE_ERR = 2e-6          # per unit of |t|/m + 1 and of the value added (one fp32 rounding of the
#                         sum of |terms|, times 4 for long sums and the norm's scale)
READ_ERR = 2e-5           # a memory read's rail3 field
SAFETY = 0.25             # share of a step's margin the residue may take
DATA_TOL = 1e-4           # memory data rails: silu(100 r) ~ 50 r beside a rail of 100
ENABLE_TOL = 1e-3         # beta / reset / blank pre-activations saturate at +-200
_CODES = {"bits": (-1.0, 1.0), "dual": (0.0, 1.0), "onehot": (0.0, 1.0), "rail3": (-0.5, 0.5)}


@dataclass
class Recycling:
    dmap: np.ndarray                     # circuit dim -> physical dim
    width: int                           # physical dims (without the text flag)
    zeroings: dict[str, int] = dc_field(default_factory=dict)   # field -> MLP position of its zeroing
    residue: dict[str, float] = dc_field(default_factory=dict)  # field -> residue bound on its dims

    @classmethod
    def identity(cls, width: int) -> "Recycling":
        return cls(np.arange(width, dtype=np.int64), width)


def _owner(c: Circuit) -> dict[int, Field]:
    return {d: f for f in c.layout.fields.values() for d in range(f.start, f.stop)}


def _maxabs(c: Circuit) -> dict[int, float]:
    return {d: (0.5 if f.enc == "rail3" else 1.0) for f in c.layout.fields.values()
            for d in range(f.start, f.stop)}


def tolerances(c: Circuit) -> dict[str, float]:
    """The residue each field's dims may carry (0: fresh dims only)."""
    owner = _owner(c)
    tol = {n: float("inf") for n in c.layout.fields}

    def cap(lin, t):
        if lin is None:
            return
        if isinstance(lin, Field):
            for d in range(lin.start, lin.stop):
                tol[lin.name] = min(tol[lin.name], t)
            return
        for d in lin.dims():
            n = owner[d].name
            tol[n] = min(tol[n], t)

    for st in c.stages:
        if isinstance(st, MLPStage):
            for step in st.steps:
                s = sum(abs(v) for v in step.t.coef.values())
                if s:
                    cap(step.t, SAFETY * step.margin / s)
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


def write_errors(c: Circuit) -> dict[str, float]:
    """A bound on each field's own analog error (see the module docstring)."""
    owner, maxabs = _owner(c), _maxabs(c)
    err = {f.name: 0.0 for f in c.inputs}
    err["one"] = 0.0
    for st in c.stages:
        if isinstance(st, MLPStage):
            for step in st.steps:
                e = WRITE_ERR * (step.range(maxabs) + 1.0)
                for d, v in step.out.items():
                    n = owner[d].name
                    err[n] = max(err.get(n, 0.0), e * abs(v))
            for d, v in st.bias.items():
                n = owner[d].name
                err[n] = max(err.get(n, 0.0), WRITE_ERR * abs(v))
        else:
            for p in st.ports:
                for f in p.out or []:
                    err[f.name] = max(err.get(f.name, 0.0), READ_ERR)
    return err


def _zero_stage(f: Field, name: str) -> MLPStage:
    """Subtract f's value: per dim, [x > mid] adds -(hi - lo) and the bias -lo."""
    lo, hi = _CODES[f.enc]
    steps = [Step(Lin({d: 1.0}, -(lo + hi) / 2), (hi - lo) / 2, {d: -(hi - lo)}) for d in range(f.start, f.stop)]
    bias = {d: -lo for d in range(f.start, f.stop)} if lo else {}
    return MLPStage(name, steps, bias, [])


def recycle(c: Circuit, plans: list, position: dict[str, int], intermediate: int) -> Recycling:
    """Physical dims for every field (see the module docstring); adds the zeroing stages to
    `plans` and the zeroing positions to the layout (its norms stop counting the dead fields)."""
    L = c.layout
    owner = _owner(c)
    final = 2 * len(plans)
    last: dict[str, int] = {}
    for st in c.stages:
        for d in st.input_dims():
            n = owner[d].name
            last[n] = max(last.get(n, -2), position[st.name])
    for lin in c.logits.values():
        for d in lin.dims():
            last[owner[d].name] = final
    wlast = {n: max(position[w.name] for w in ws) for n, ws in c.writers.items()}
    born = {n: L.born.get(n, -1) for n in L.fields}
    tol, err = tolerances(c), write_errors(c)
    used = [pl.neurons() for pl in plans]
    has_bias = [any(st.bias for st in pl.mlp) for pl in plans]

    def free_at(n) -> int:          # the first MLP position that may subtract field n
        q = max(last.get(n, -2), wlast.get(n, born[n]) + 1, born[n] + 1)
        return q + (q % 2 == 0)

    dmap = np.full(L.width, -1, dtype=np.int64)
    rec = Recycling(dmap, 0)
    dead = sorted((free_at(n), n) for n, f in L.fields.items()
                  if n != "one" and f.enc in _CODES and last.get(n, -2) < final)
    pool: list[tuple[float, int]] = []      # (residue bound, physical dim), sorted

    def zero_one(b: int) -> bool:
        """Zero the earliest-dead field whose subtraction fits an MLP in [its free_at, b]."""
        for i, (q, m) in enumerate(dead):
            if q > b:
                return False
            g = L.fields[m]
            bias = g.enc not in ("dual", "onehot")
            for p in range(q, b + 1, 2):
                lay = p // 2
                need = 2 * g.dims + (1 if bias and not has_bias[lay] else 0)
                if used[lay] + need <= intermediate:
                    used[lay] += need
                    has_bias[lay] = has_bias[lay] or bias
                    plans[lay].mlp.append(_zero_stage(g, f"zero_{m}"))
                    rec.zeroings[m] = p
                    L.dies[m] = p
                    r = rec.residue.get(m, 0.0) + err.get(m, 0.0) + 4.0 * WRITE_ERR * (_span(g) + 1.0)
                    for d in range(g.start, g.stop):
                        bisect.insort(pool, (r, int(dmap[d])))
                    del dead[i]
                    return True
        return False

    width = 0
    for n in sorted(L.fields, key=lambda n: (born[n], L.fields[n].start)):
        f, t = L.fields[n], tol[n]
        for d in range(f.start, f.stop):
            k = bisect.bisect_right(pool, (t, float("inf")))
            while t > 0 and k == 0 and zero_one(born[n]):
                k = bisect.bisect_right(pool, (t, float("inf")))
            if t > 0 and k:
                r, pd = pool.pop(k - 1)         # the dirtiest dim that still fits
                dmap[d] = pd
                rec.residue[n] = max(rec.residue.get(n, 0.0), r)
            else:
                dmap[d] = width
                width += 1
    rec.width = width
    return rec


def _span(f: Field) -> float:
    lo, hi = _CODES[f.enc]
    return hi - lo
