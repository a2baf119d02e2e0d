"""How much each MLP stage of the machine core leans on other stages' outputs: for every stage,
the largest sum over one step's coefficients on fields an MLP stage wrote, divided by the step's
margin. A step's true output is 1 + d, d the relative error of its layer's norm (the bias that
makes the step rides on the `one` dim, which the norm scales too), so a stage moves by about
this many margins per unit of d (docs/machine.md §33). No compile: the circuit alone (seconds).

    .venv/bin/python scripts/gate_exposure.py [--top N]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_layers.craft.circuit import MLPStage  # noqa: E402
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=20, help="stages to print, the most exposed first")
    args = ap.parse_args()
    rows = sorted(exposure(core_circuit()).items(), key=lambda kv: -kv[1])
    print(f"{'stage':<24} {'margins per unit of norm error':>32}")
    for name, x in rows[:args.top]:
        print(f"{name:<24} {x:>32,.0f}")


if __name__ == "__main__":
    main()
