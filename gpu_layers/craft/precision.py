"""How far stock fp32 arithmetic can move each threshold step of a circuit, in margins.

The fast executor sums in fp64 and rounds once, so with its inputs on their codes every step is
exact. Stock transformers sums each gate row in fp32, and a step's gate pre-activation G t / m is
a sum of terms as large as the step's `range` (max|t| / margin), so the step's output (1 at
saturation) comes out off its code by about range x 2^-24 (docs/machine.md section 36 measured
4.8e-4 where this scale says 3.0e-3). That error reaches the steps that read the output twice:

* directly: a reader weighing the output by coef moves by coef x error / its margin;
* through the norm: the errors move the residual's sum of squares S, every output written after
  them is scaled by the relative error d = dS / 2S, and a reader moves by (its weight on written
  dims) x d / margin. The ballast field (fields.BALLAST) makes S large, so d small.

`step_margins` bounds both for every step (DeltaNet reads count MEMORY_READ_ERROR, the embedding
nothing); the sum must stay far below one margin for the stock path to be exact. A scale, not a
proof: the rounding's sign and size depend on the BLAS, but no measured error has exceeded it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .circuit import MLPStage

FP32_EPS = 2.0 ** -24
MEMORY_READ_ERROR = 1e-5        # a DeltaNet read's distance from its code (measured 7.3e-6 in the core)
# The most a step of the core may move by these scales, in margins. A step stays exact while its
# t keeps its side: the true side's silu identity holds down to 0.085 margins (G t / m >= 17),
# the false side's exact zero up to -0.944 margins and its practical zero (|silu| < 1e-8) up
# to about -0.6. The scale overstates what was measured about 6x (3.0e-3 against 4.8e-4), so
# 0.6 of scale is about 0.1 margins of error.
STOCK_FP32_BUDGET = 0.6


@dataclass
class StepBound:
    stage: str
    step: int
    direct: float               # margins, from the error of the fields it reads
    norm: float                 # margins, from the norm's error
    worst_input: str            # the field contributing most to `direct`

    @property
    def total(self) -> float:
        return self.direct + self.norm


def _maxabs(c) -> dict[int, float]:
    return {d: 0.5 if f.enc == "rail3" else 1.0 for f in c.layout.fields.values() for d in range(f.start, f.stop)}


def output_errors(c) -> dict[int, float]:
    """{dim: fp32 error scale of the value written there}: a step's output error is its weight
    times range x 2^-24; a DeltaNet read's is MEMORY_READ_ERROR; embedding dims have none."""
    maxabs = _maxabs(c)
    err: dict[int, float] = {}
    for st in c.stages:
        if isinstance(st, MLPStage):
            for s in st.steps:
                r = s.range(maxabs) * FP32_EPS
                for d, v in s.out.items():
                    err[d] = err.get(d, 0.0) + abs(v) * r
        else:
            for f in st.outputs:
                for d in range(f.start, f.stop):
                    err[d] = MEMORY_READ_ERROR
    return err


def norm_error(c, err: dict[int, float], pos: int | None = None) -> float:
    """A bound on the norm's relative error d = dS / 2S in front of depth position `pos`: every
    written dim of the fields alive there at its error at once, against S there (the layout's
    births and deaths: after assemble.schedule and recycle). pos None: every written dim against
    the smallest S the residual can have (the constants' and inputs')."""
    maxabs = _maxabs(c)
    L = c.layout
    if pos is None:
        dims = err.keys()
        s = sum(f.sumsq for f in [*L.constants, *c.inputs] if f.sumsq is not None)
    else:
        dims = [i for f in L.alive_before(pos) for i in range(f.start, f.stop) if i in err]
        s = L.sumsq_at(pos)
    return sum(2.0 * maxabs[i] * err[i] for i in dims) / (2.0 * s)


def step_margins(c, positions: dict[str, int] | None = None) -> list[StepBound]:
    """Every MLP step's bound (see the module docstring); positions: {stage name: depth position}
    from assemble.schedule, for the norm's error where each stage reads (else the worst case)."""
    err = output_errors(c)
    d_any = norm_error(c, err) if positions is None else None
    owner = {i: f.name for f in c.layout.fields.values() for i in range(f.start, f.stop)}
    out = []
    for st in c.stages:
        if not isinstance(st, MLPStage):
            continue
        d = d_any if positions is None else norm_error(c, err, positions[st.name])
        for k, s in enumerate(st.steps):
            per: dict[str, float] = {}
            written = 0.0
            for i, v in s.t.coef.items():
                e = err.get(i)
                if e is not None:
                    per[owner[i]] = per.get(owner[i], 0.0) + abs(v) * e / s.margin
                    written += abs(v)
            worst = max(per, key=per.get) if per else ""
            out.append(StepBound(st.name, k, sum(per.values()), written * d / s.margin, worst))
    return out
