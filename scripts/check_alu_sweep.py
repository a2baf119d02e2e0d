"""The long exactness sweep of the one-lane integer ALU block (gpu_layers.craft.blocks.alu), compiled
for the tiny host's shapes or Qwen3.5-2B's and driven through stock transformers: ROWS random rows
per op and width plus every edge pair (125,376 rows at the default 1,000), in one prefill (the
chunked path) and the first DECODE of them token by token with the cache (the recurrent path),
fp32. Prints a table (path, rows, wrong rows, outputs outside the 0.25 margin, seconds); exits 1
on any wrong row. tests/test_craft_alu.py checks 64 rows per op and width in CI.

    .venv/bin/python scripts/check_alu_sweep.py [--rows 1000] [--decode 8192] [--seed 5] [--shapes tiny|2b]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.craft.assemble import compile_circuit  # noqa: E402
from gpu_layers.craft.testing import TINY, alu_circuit, alu_rows, run_alu  # noqa: E402
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1000, help="random rows per op and width")
    ap.add_argument("--decode", type=int, default=8192, help="rows run token by token (multiple of 32)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--shapes", choices=("tiny", "2b"), default="tiny")
    args = ap.parse_args()
    shapes = TINY if args.shapes == "tiny" else {k: REAL_2B_TEXT_CONFIG[k] for k in TINY}
    c, blk = alu_circuit()
    comp = compile_circuit(c, shapes)
    vals, r, q = alu_rows(np.random.default_rng(args.seed), args.rows)
    n = len(r)
    paths = {"prefill": (n // 64, n // 64 * 64), "decode": (32, min(args.decode, n) // 32 * 32)}
    print(f"{'path':8s} {'rows':>8s} {'wrong':>6s} {'margin':>7s} {'seconds':>8s}")
    bad = 0
    for path, shape in paths.items():
        t0 = time.time()
        wrong, margin = run_alu(comp, blk, vals, r, q, {path: shape})[path]
        bad += wrong + margin
        print(f"{path:8s} {shape[1]:8d} {wrong:6d} {margin:7d} {time.time() - t0:8.1f}", flush=True)
    print("all exact" if bad == 0 else f"{bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
