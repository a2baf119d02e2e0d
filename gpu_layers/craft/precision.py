"""How far stock fp32 arithmetic can move each threshold step of a circuit, in margins.

The fast executor sums in fp64 and rounds once, so with its inputs on their codes every step is
exact. Stock transformers sums each gate row in fp32, and a step's gate pre-activation G t / m is
a sum of terms as large as the step's `range` (max|t| / margin), so the step's output (1 at
saturation) comes out off its code by up to OUTPUT_SCALE x range x 2^-24, plus RESIDUE (measured
on a core build: scripts/stock_layer_errors.py). That error reaches the steps that read it twice:

* directly: a reader weighing the output by coef moves by coef x error / its margin;
* through the norm: the errors move the residual's sum of squares S, every output written after
  them is scaled by the relative error d = dS / 2S, and a reader moves by (its weight on written
  dims) x d / margin. The ballast field (fields.BALLAST) makes S large, so d small.

`step_margins` bounds both for every step (DeltaNet reads count MEMORY_READ_ERROR, the embedding
nothing), adding every input's error at its largest with the same sign. The constants are the
largest errors measured on one case through one BLAS, with some room: the rounding's size and
sign depend on both, so this is a calibrated bound, not a proof.
"""
from __future__ import annotations

from dataclasses import dataclass

from .circuit import MLPStage

FP32_EPS = 2.0 ** -24
OUTPUT_SCALE = 2.0              # measured step output errors / (range x 2^-24): up to 1.8 (lane_diff)
RESIDUE = 1e-5                  # what every written dim may carry besides (recycled dims keep their
                                # zeroing's rounding at the scale of its lift): measured up to 4.6e-6
MEMORY_READ_ERROR = 3e-5        # a DeltaNet read's distance from its code (measured up to 2.3e-5 in the core)
# The most a step of the core may move by these bounds, in margins: a regression guard, not a
# proof. A step stays exact while its t keeps its side: the true side's silu identity holds down
# to 0.085 margins (G t / m >= 17), the false side's exact zero up to -0.944 margins and its
# practical zero (|silu| < 1e-8) up to about -0.6. The bound adds every input's largest measured
# error with the same sign (scripts/stock_layer_errors.py); the core's worst steps reach 1.3
# (dump_next, the cursor: docs/machine.md section 37), where a GPU run of every case decides.
STOCK_FP32_BUDGET = 1.5


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


def code_maxabs(c) -> dict[int, float]:
    """{dim: the largest |value| of its codes}: 0.5 for memory reads (rail3), else 1 (the ballast
    is read by no step); what Step.range takes. assemble.Compiled.step_ranges has its twin."""
    return {d: 0.5 if f.enc == "rail3" else 1.0 for f in c.layout.fields.values() for d in range(f.start, f.stop)}


def output_errors(c) -> dict[int, float]:
    """{dim: fp32 error scale of the value written there}: a step's output error is its weight
    times range x 2^-24; a DeltaNet read's is MEMORY_READ_ERROR; embedding dims have none."""
    maxabs = code_maxabs(c)
    err: dict[int, float] = {}
    for st in c.stages:
        if isinstance(st, MLPStage):
            for s in st.steps:
                r = OUTPUT_SCALE * s.range(maxabs) * FP32_EPS
                for d, v in s.out.items():
                    err[d] = err.get(d, RESIDUE) + abs(v) * r
        else:
            for f in st.outputs:
                for d in range(f.start, f.stop):
                    err[d] = MEMORY_READ_ERROR
    return err


def norm_error(c, err: dict[int, float], pos: int | None = None, maxabs=None) -> float:
    """A bound on the norm's relative error d = dS / 2S in front of depth position `pos`: every
    written dim of the fields alive there at its error at once, against S there (the layout's
    births and deaths: after assemble.schedule and recycle). pos None: every written dim against
    the smallest S the residual can have (the constants' and inputs'). maxabs: code_maxabs(c)."""
    maxabs = maxabs or code_maxabs(c)
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
    maxabs = code_maxabs(c)
    d_at: dict[int | None, float] = {}      # the norm's error at each position, computed once
    owner = {i: f.name for f in c.layout.fields.values() for i in range(f.start, f.stop)}
    out = []
    for st in c.stages:
        if not isinstance(st, MLPStage):
            continue
        p = None if positions is None else positions[st.name]
        if p not in d_at:
            d_at[p] = norm_error(c, err, p, maxabs)
        d = d_at[p]
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
