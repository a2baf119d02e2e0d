#!/usr/bin/env python3
"""Speed of the reference interpreter on a few suite kernels.

    python scripts/bench_interp.py                 # default kernels, best of 5, 4 lanes
    python scripts/bench_interp.py --repeat 10 --lanes 8 --cases rc4_keystream mandelbrot

For each case: warp-instruction steps and lane-group issues of one launch, the best wall time of
--repeat launches (after one warm-up launch, so PTX compile, parse and decode are excluded), and
the rates steps/s and issues/s. Also prints the Python, numpy and platform versions.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_CASES = ["bytecode_vm", "prime_trial", "rc4_keystream", "syracuse_u64", "mandelbrot", "bitonic_sort",
                 "conv2d_tile", "shfl_xor_allreduce", "matvec_f32", "isqrt_u32"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="interpreter speed on suite kernels")
    ap.add_argument("--cases", nargs="*", default=DEFAULT_CASES, help="suite case names")
    ap.add_argument("--repeat", type=int, default=5, help="timed launches per case (best is reported)")
    ap.add_argument("--lanes", type=int, default=4)
    args = ap.parse_args(argv)

    from gpu_layers.interp import run_case
    from gpu_layers.suite import load_suite

    suite = {c.name: c for c in load_suite()}
    unknown = [n for n in args.cases if n not in suite]
    if unknown:
        print(f"unknown case(s): {unknown}; known: {sorted(suite)}", file=sys.stderr)
        return 2

    print(f"Python {platform.python_version()} ({platform.python_implementation()}), numpy {np.__version__}, "
          f"{platform.system()} {platform.machine()}, {platform.processor() or 'cpu'}")
    print(f"lanes={args.lanes}, best of {args.repeat} launches after one warm-up (compile/parse/decode excluded)")
    hdr = (f"{'case':22} {'threads':>7} {'steps':>8} {'issues':>8} {'best ms':>9} "
           f"{'steps/s':>10} {'issues/s':>10}")
    print(hdr)
    print("-" * len(hdr))
    tot_steps = tot_issues = tot_time = 0.0
    for name in args.cases:
        case = suite[name]
        case.ptx()                                   # compile (cached) outside the timing
        first = run_case(case, lanes=args.lanes)     # warm-up: parse + decode
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = run_case(case, lanes=args.lanes)
            best = min(best, time.perf_counter() - t0)
            assert r.steps == first.steps and r.fingerprint == first.fingerprint
        threads = int(np.prod(case.grid) * np.prod(case.block))
        tot_steps += r.steps
        tot_issues += r.lane_issues
        tot_time += best
        print(f"{name:22} {threads:>7} {r.steps:>8} {r.lane_issues:>8} {best * 1000:>9.1f} "
              f"{r.steps / best:>10,.0f} {r.lane_issues / best:>10,.0f}")
    print("-" * len(hdr))
    print(f"{'all':22} {'':>7} {int(tot_steps):>8} {int(tot_issues):>8} {tot_time * 1000:>9.1f} "
          f"{tot_steps / tot_time:>10,.0f} {tot_issues / tot_time:>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
