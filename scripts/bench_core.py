"""Machine tokens per second of the fast executor on the machine core: each case's whole token
stream (prompt, trace and dump, from the oracle) fed token by token through `FastMachine.step`
(what run --backend model does, minus the checking), wall and CPU time, and a digest of the
greedy predictions (equal digests: the same tokens), with the projections' sums incremental (the
executor's default) and in full, alternating in one run. To compare two versions of the executor,
run it at each commit on the same cases, alternating; each commit compiles its own core on first
use ($QWENGPU_CACHE apart keeps both).

    .venv/bin/python scripts/bench_core.py [--names CASE ...] [--repeat N] [--sums full|incremental|both]
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.machine.backend import case_tokens, load_core  # noqa: E402
from gpu_layers.suite import with_gpu_truth  # noqa: E402

DEFAULT = ["vec_add_i32", "divergence", "early_return", "bitwise_ops", "scan_inclusive_i32"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", nargs="*", default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sums", choices=["full", "incremental", "both"], default="both",
                    help="the projections' sums: in full at every token, incremental (the default "
                         "state), or both alternating (same run: their ratio)")
    args = ap.parse_args()
    cases = {c.name: c for c in with_gpu_truth()}
    fm, ids = load_core(lambda m: print(m, flush=True))
    streams = {}
    for name in args.names:
        prompt, want = case_tokens(cases[name])
        streams[name] = [ids[t] for t in prompt + want]
    fm.step(fm.new_state(), streams[args.names[0]][0])          # numba's first call compiles
    print(f"core: {len(fm.layers)} layers, W = {fm.W}, {fm.V} tokens")
    print(f"{'case':24s} {'tokens':>7s} {'wall tok/s':>10s} {'cpu tok/s':>9s}  digest")
    modes = {"full": [False], "incremental": [True], "both": [False, True]}[args.sums]
    for r, inc in ((r, inc) for r in range(args.repeat) for inc in modes):
        total, wall, cpu, h = 0, 0.0, 0.0, hashlib.sha256()
        print(f"-- run {r + 1}, {'incremental' if inc else 'full'} sums")
        for name, seq in streams.items():
            st = fm.new_state(incremental=inc)
            t, c0 = time.perf_counter(), time.process_time()
            out = [fm.step(st, tok) for tok in seq]
            dw, dc = time.perf_counter() - t, time.process_time() - c0
            h.update(str(out).encode())
            total, wall, cpu = total + len(seq), wall + dw, cpu + dc
            print(f"{name:24s} {len(seq):7d} {len(seq) / dw:10.0f} {len(seq) / dc:9.0f}  "
                  f"{hashlib.sha256(str(out).encode()).hexdigest()[:12]}")
        print(f"{'all (run %d)' % (r + 1):24s} {total:7d} {total / wall:10.0f} {total / cpu:9.0f}  {h.hexdigest()[:12]}")


if __name__ == "__main__":
    main()
