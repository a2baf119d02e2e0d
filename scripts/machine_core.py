"""The machine core v0 (gpu_layers.machine.core) on real kernels, through the fast executor: at
every position of the oracle's stream the model's next token is compared with the oracle's (the
argmax over the whole vocabulary; memory instructions' data tokens are teacher-forced and counted
as skipped). Compiles the core layer by layer (gpu_layers.craft.assemble.compile_fast).

    .venv/bin/python scripts/machine_core.py [--names CASE ...] [--max-tokens N] [--no-check]

--no-check skips the validator's exactness pass (minutes); the compile is otherwise the same.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.cases import load_cases  # noqa: E402
from gpu_layers.craft.testing import TINY  # noqa: E402
from gpu_layers.errors import QwenGPUError  # noqa: E402
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG  # noqa: E402
from gpu_layers.interp import Scalar, module_for  # noqa: E402
from gpu_layers.machine import allocate, lower  # noqa: E402
from gpu_layers.machine.core import build_core_fast, check_core, prompt_tokens, stream_tokens  # noqa: E402
from gpu_layers.machine.datapath_program import datapath_program, register_slots  # noqa: E402
from gpu_layers.machine.protocol import trace_tokens  # noqa: E402
from gpu_layers.suite import load_suite  # noqa: E402

DEFAULT = ["divergence", "vec_add_i32", "early_return", "bitwise_ops", "scan_inclusive_i32"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", nargs="*", default=DEFAULT)
    ap.add_argument("--max-tokens", type=int, default=20_000)
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    truth = ROOT.parent / "shared" / "gpu-truth" / "cases.json"
    cases = {c.name: c for c in load_suite()}
    if truth.is_file():
        cases.update({c.name: c for c in load_cases(truth)})
    t0 = time.time()
    shapes = {k: REAL_2B_TEXT_CONFIG[k] for k in TINY}
    fm, ids = build_core_fast(shapes, check=not args.no_check)
    print(f"core v0: {len(fm.layers)} layers, W = {fm.W}, {fm.V} tokens, compiled in {time.time() - t0:.0f} s",
          flush=True)
    print(f"{'case':24s} {'tokens':>7s} {'checked':>8s} {'skipped':>8s} {'wrong':>6s} {'s':>6s}  first wrong")
    for name in args.names:
        c = cases[name]
        try:
            mk, _ = allocate(lower(module_for(c.ptx()).kernel(c.kernel)))
            kargs = [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in c.args]
            prompt = prompt_tokens(mk, c.grid, c.block, kargs)
            kinds = [op.kind for op in datapath_program(mk, register_slots(mk), c.grid, c.block, kargs)]
            tr = trace_tokens(mk, c.grid, c.block, kargs, c.dynamic_shared_bytes, outputs=[], step_budget=500_000)
            names = prompt + stream_tokens(tr.tokens)
        except QwenGPUError as e:
            print(f"{name:24s} refused: {e}")
            continue
        if len(names) > args.max_tokens:
            print(f"{name:24s} {len(names):7d} skipped: longer than --max-tokens")
            continue
        t = time.time()
        checked, skipped, bad = check_core(fm, ids, names, len(prompt), kinds)
        first = f"@{bad[0][0]} want {bad[0][1]} got {bad[0][2]}" if bad else ""
        print(f"{name:24s} {len(names):7d} {checked:8d} {skipped:8d} {len(bad):6d} {time.time() - t:6.0f}  {first}",
              flush=True)


if __name__ == "__main__":
    main()
