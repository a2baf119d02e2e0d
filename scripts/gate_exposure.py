"""How much each MLP stage of the machine core leans on other stages' outputs: for every stage,
the largest sum over one step's coefficients on fields an MLP stage wrote, divided by the step's
margin. A step's true output is 1 + d, d the relative error of its layer's norm (the bias that
makes the step rides on the `one` dim, which the norm scales too), so a stage moves by about
this many margins per unit of d (docs/machine.md §33). No compile: the circuit and its schedule (a minute).

A second column bounds what fp32 arithmetic alone does to a step: its gate pre-activation G t is
a sum of terms up to max|t| / margin times the margin (Step.range), and an fp32 sum or difference
at that scale rounds by about 2^-24 of it, so the step's output (1 at saturation) is off by about
range x 2^-24 per rounding. The fast executor accumulates in fp64 and rounds once, so its digital
fields stay exact; stock transformers (fp32 BLAS) does not: docs/machine.md section 36 found the
cursor stage's outputs 4.8e-4 off its code in the stock fp32 prefill.

The last columns carry those errors to the readers (gpu_layers/craft/precision.py): the most any
step of the stage moves, in margins, from the errors of the fields it reads (direct) and from the
norm's error that all of them cause together (norm), and the field it reads that moves it most.

    .venv/bin/python scripts/gate_exposure.py [--top N] [--by exposure|range|total]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_layers.craft.circuit import MLPStage  # noqa: E402
from gpu_layers.craft import assemble as A  # noqa: E402
from gpu_layers.craft.precision import code_maxabs, step_margins  # noqa: E402
from gpu_layers.craft.recycle import recycle  # noqa: E402
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG  # noqa: E402
from gpu_layers.machine.core import core_circuit  # noqa: E402


def exposure(c) -> dict[str, float]:
    """{MLP stage name: max over its steps of sum |coef| on MLP-written dims / margin}."""
    owner = {d: f.name for f in c.layout.fields.values() for d in range(f.start, f.stop)}
    written = {o.name for st in c.stages if isinstance(st, MLPStage) for o in st.outputs}
    out = {}
    for st in c.stages:
        if isinstance(st, MLPStage):
            out[st.name] = max((sum(abs(v) for d, v in s.t.coef.items() if owner[d] in written) / s.margin
                                for s in st.steps), default=0.0)
    return out


def ranges(c) -> dict[str, float]:
    """{MLP stage name: the largest max|t| / margin of its steps} (inputs at their codes' size:
    0.5 for rail3 fields, else 1), as Compiled.step_ranges computes it."""
    maxabs = code_maxabs(c)
    return {st.name: max((s.range(maxabs) for s in st.steps), default=0.0)
            for st in c.stages if isinstance(st, MLPStage)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=20, help="stages to print, the most exposed first")
    ap.add_argument("--by", default="exposure", choices=["exposure", "range", "total"], help="sort column")
    args = ap.parse_args()
    c = core_circuit()
    ex, rg = exposure(c), ranges(c)
    shapes = A.Shapes.of(REAL_2B_TEXT_CONFIG)
    plans, pos = A.schedule(c, shapes)          # births, and the recycle pass's deaths: who is alive where
    if c.recycle:
        recycle(c, plans, pos, shapes.intermediate_size)
    worst = {}
    for b in step_margins(c, pos):
        if b.total > worst.get(b.stage, (None, -1.0))[1]:
            worst[b.stage] = (b, b.total)
    key = {"exposure": ex, "range": rg, "total": {n: w[1] for n, w in worst.items()}}[args.by]
    rows = sorted(ex, key=lambda n: -key[n])
    print(f"{'stage':<24} {'margins per unit of norm error':>32} {'max|t|/margin':>14} {'fp32 output error':>18}"
          f" {'direct':>8} {'norm':>8}  worst input")
    for name in rows[:args.top]:
        b = worst[name][0]
        print(f"{name:<24} {ex[name]:>32,.0f} {rg[name]:>14,.0f} {rg[name] * 2.0 ** -24:>18.1e}"
              f" {b.direct:>8.3f} {b.norm:>8.3f}  {b.worst_input}")


if __name__ == "__main__":
    main()
