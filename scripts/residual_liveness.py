"""How much of the machine core's circuit width is live at once: the lower bound for the recycle
pass (gpu_layers/craft/recycle.py), which reuses a dead field's dims for a later field once an
MLP stage has subtracted the dead value (a field is written once, at its stage's half-layer, and
dead after the last stage or logit that reads it). Runs on the circuit's own dims, before
recycling.

    .venv/bin/python scripts/residual_liveness.py [--top 15]

Prints, per depth position (-1: the embedding; 2L: layer L's mixer, 2L + 1: its MLP), the dims
born there and the dims live after it, then the peak and the largest fields with their spans.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.craft.assemble import Shapes, schedule  # noqa: E402
from gpu_layers.craft.recycle import last_reads  # noqa: E402
from gpu_layers.craft.testing import TINY  # noqa: E402
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG  # noqa: E402
from gpu_layers.machine.core import core_circuit  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    c = core_circuit()
    plans, position = schedule(c, Shapes.of({k: REAL_2B_TEXT_CONFIG[k] for k in TINY}))
    last = defaultdict(lambda: -2, last_reads(c, plans, position))   # -2: never read
    final = 2 * len(plans)                         # the LM head reads after the last layer
    L = c.layout
    born = {n: L.born.get(n, -1) for n in L.fields}
    print(f"core: {len(plans)} layers, W = {L.width}, {len(L.fields)} fields")
    print(f"{'position':>8s} {'born':>6s} {'live':>6s}")
    peak = (0, None)
    for p in range(-1, final):
        b = sum(f.dims for n, f in L.fields.items() if born[n] == p)
        live = sum(f.dims for n, f in L.fields.items() if born[n] <= p < last[n])
        peak = max(peak, (live, p))
        print(f"{p:8d} {b:6d} {live:6d}")
    never = sum(f.dims for n, f in L.fields.items() if last[n] == -2)
    print(f"peak live: {peak[0]} dims after position {peak[1]} ({peak[0] / L.width:.0%} of W); "
          f"dims never read: {never}")
    print("largest fields (dims, name, born, last read):")
    for dims, n in sorted(((f.dims, n) for n, f in L.fields.items()), reverse=True)[:args.top]:
        print(f"  {dims:5d} {n:24s} {born[n]:4d} {last[n]:4d}")


if __name__ == "__main__":
    main()
