"""The machine core (gpu_layers.machine.core) runs real kernels inside the model, through the fast
executor: the prompt (program, launch, global memory) goes in, and the model generates the whole
trace and the dump itself, greedy, one token at a time. The run checks every generated token
against the oracle's stream (it stops at the first difference) and decodes the output buffers
from the generated dump alone, compared bit for bit with the reference interpreter running the
original kernel. Compiles the core layer by layer (gpu_layers.craft.assemble.compile_fast).

    .venv/bin/python scripts/machine_core.py [--names CASE ...|--all] [--max-tokens N] [--check]
                                             [--engine fast|stock|both] [--checkpoint DIR]

The compiled core comes from run --backend model's cache (gpu_layers/machine/backend.py: compiled
on first use); --check compiles it afresh with the validator's exactness pass (minutes).
--engine stock runs each case through a spliced checkpoint of the core (--checkpoint, or the
cached tiny-host build: gpu_layers.machine.stock_engine) with stock transformers generate instead;
--engine both runs each case on both, one row each, so their tokens/s compare in one run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.craft.testing import TINY  # noqa: E402
from gpu_layers.errors import QwenGPUError  # noqa: E402
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG  # noqa: E402
from gpu_layers.interp import launch, launch_args, module_for  # noqa: E402
from gpu_layers.machine import memory_map as MM  # noqa: E402
from gpu_layers.machine.backend import load_core  # noqa: E402
from gpu_layers.machine.core import build_core_fast, launch_tokens, machine_kernel, run_core  # noqa: E402
from gpu_layers.machine.protocol import thread_instructions  # noqa: E402
from gpu_layers.suite import with_gpu_truth  # noqa: E402

DEFAULT = ["vec_add_i32", "divergence", "early_return", "bitwise_ops", "scan_inclusive_i32"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", nargs="*", default=DEFAULT)
    ap.add_argument("--max-tokens", type=int, default=20_000)
    ap.add_argument("--all", action="store_true", help="every suite and gpu-truth case")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--engine", default="fast", choices=["fast", "stock", "both"])
    ap.add_argument("--checkpoint", help="the core build --engine stock runs (default: the cached tiny-host build)")
    args = ap.parse_args()
    engines = ["fast", "stock"] if args.engine == "both" else [args.engine]
    stock = None
    if "stock" in engines:
        from gpu_layers.machine.stock_engine import shared_engine

        t0 = time.time()
        stock = shared_engine(args.checkpoint, lambda m: print(m, flush=True))
        print(f"stock: {stock.path}, {len(stock.model.model.layers)} layers, hidden {stock.model.config.hidden_size}, "
              f"ready in {time.time() - t0:.0f} s", flush=True)
    cases = {c.name: c for c in with_gpu_truth()}
    t0 = time.time()
    if "fast" not in engines:
        fm = ids = None
    elif args.check:
        fm, ids = build_core_fast({k: REAL_2B_TEXT_CONFIG[k] for k in TINY}, check=True)
    else:
        fm, ids = load_core(lambda m: print(m, flush=True))
    if fm is not None:
        print(f"core: {len(fm.layers)} layers, W = {fm.W}, {fm.V} tokens, ready in {time.time() - t0:.0f} s",
              flush=True)
    names = sorted(cases) if args.all else args.names
    totals = {"cases": 0, "equal": 0, "tokens": 0, "seconds": 0.0, "per_tins": []}
    print(f"{'case':24s} {'engine':6s} {'warp-ins':>8s} {'thr-ins':>8s} {'prompt':>7s} {'stream':>7s} {'tok/t-ins':>9s} "
          f"{'ticks':>6s} {'trace':>6s} {'outputs':>8s} {'seconds':>7s} {'tok/s':>6s}  first wrong")
    for name in names:
        c = cases[name]
        try:
            kargs = launch_args(c)
            mk, grid, block = machine_kernel(module_for(c.ptx()).kernel(c.kernel), c.grid, c.block, kargs)
            outs = [i for i, a in enumerate(c.args) if a.is_buffer and a.output]
            prompt, want, lay, _ = launch_tokens(mk, grid, block, kargs, outs, c.dynamic_shared_bytes)
        except QwenGPUError as e:
            print(f"{name:24s} refused: {e}")
            continue
        if len(prompt) + len(want) > args.max_tokens:
            print(f"{name:24s} {len(prompt):7d} {len(want):7d} skipped: longer than --max-tokens")
            continue
        kernel = module_for(c.ptx()).kernel(c.kernel)
        ref = launch(kernel, c.grid, c.block, launch_args(c), c.dynamic_shared_bytes)
        tins = thread_instructions(kernel, c.grid, c.block, launch_args(c), c.dynamic_shared_bytes)
        for engine in engines:
            t = time.time()
            if engine == "fast":
                got, bad = run_core(fm, ids, prompt, want, max_tokens=len(want) + 1)  # past the oracle's stream: wrong
            else:
                got = stock.run(prompt, len(want) + 1)
                bad = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w),
                           None if len(got) == len(want) else min(len(got), len(want)))
            report(c.name, engine, ref, tins, prompt, want, got, bad, lay, kargs, outs, time.time() - t, totals)
    if totals["cases"]:
        print(f"{totals['equal']}/{totals['cases']} runs: trace and outputs equal; {totals['tokens']} tokens "
              f"in {totals['seconds']:.0f} s ({totals['tokens'] / totals['seconds']:.0f} tokens/s); generated tokens "
              f"per thread-instruction: mean {np.mean(totals['per_tins']):.2f}, worst {max(totals['per_tins']):.2f}")


def report(name, engine, ref, tins, prompt, want, got, bad, lay, kargs, outs, dt, totals):
    """One row: the run's trace and decoded outputs against the oracle and the interpreter's
    launch `ref` (tins: its thread-instructions)."""
    dec = MM.decode_dump(got, lay, {i: kargs[i] for i in outs}) if bad is None else {}
    same = bad is None and all(np.array_equal(dec[i].view(np.uint8), ref.buffers[i].view(np.uint8))
                               for i in outs)
    ticks = sum(1 for x in want if x.startswith("<mt "))
    first = "" if bad is None else (f"@{bad} want {want[bad] if bad < len(want) else '(end)'} "
                                    f"got {got[bad] if bad < len(got) else '(end)'}")
    print(f"{name:24s} {engine:6s} {ref.steps:8d} {tins:8d} {len(prompt):7d} {len(want):7d} {len(want) / tins:9.2f} "
          f"{ticks:6d} {'equal' if bad is None else 'DIFF':>6s} {'equal' if same else 'DIFF':>8s} {dt:7.1f} "
          f"{(len(prompt) + len(got)) / dt:6.0f}  {first}", flush=True)
    totals["cases"] += 1
    totals["equal"] += int(same)
    totals["tokens"] += len(prompt) + len(got)
    totals["seconds"] += dt
    totals["per_tins"].append(len(want) / tins)


if __name__ == "__main__":
    main()
