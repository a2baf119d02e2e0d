"""The LM head's greedy token on the machine core, two ways on the same residuals: every logit
scored (fast_kernels.head_argmax) and the bounded argmax that visits only the row groups that can
win (gpu_layers/craft/fast_head.py). Each case's whole token stream (prompt, trace, dump, from the
oracle) goes through the core token by token; at every position both heads pick a token from the
same final residual. Prints per case: tokens, milliseconds a token for each head, their ratio, and
positions where they differ (must be 0).

    .venv/bin/python scripts/bench_head.py [--names CASE ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.craft import fast_kernels as K  # noqa: E402
from gpu_layers.machine.backend import case_tokens, load_core  # noqa: E402
from gpu_layers.suite import with_gpu_truth  # noqa: E402

DEFAULT = ["vec_add_i32", "divergence", "scan_inclusive_i32"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", nargs="*", default=DEFAULT)
    args = ap.parse_args()
    cases = {c.name: c for c in with_gpu_truth()}
    fm, ids = load_core(lambda m: print(m, flush=True))
    bh = fm.bounded_head
    print(f"core: {len(fm.layers)} layers, W = {fm.W}, {fm.V} tokens; LM head {fm.head.size:,} entries in "
          f"{bh.groups} row groups")
    print(f"{'case':24s} {'tokens':>7s} {'full ms':>8s} {'bounded ms':>10s} {'ratio':>6s} {'differ':>6s}")
    total = [0, 0.0, 0.0, 0]
    for name in args.names:
        prompt, want = case_tokens(cases[name])
        st, tf, tb, bad = fm.new_state(), 0.0, 0.0, 0
        for tok in (ids[t] for t in prompt + want):
            x, ss = fm._forward(st, tok)
            a = (x, ss, float(fm.W), fm.eps, fm.head_cols, fm.final_w)
            t0 = time.perf_counter()
            full = int(K.head_argmax(*a, *fm.head.mv_args(), fm.V))
            t1 = time.perf_counter()
            bounded = bh.argmax(*a)
            tf, tb, bad = tf + t1 - t0, tb + time.perf_counter() - t1, bad + (full != bounded)
        n = len(prompt) + len(want)
        total = [total[0] + n, total[1] + tf, total[2] + tb, total[3] + bad]
        print(f"{name:24s} {n:7d} {tf / n * 1e3:8.3f} {tb / n * 1e3:10.3f} {tf / tb:6.1f} {bad:6d}")
    n, tf, tb, bad = total
    print(f"{'all':24s} {n:7d} {tf / n * 1e3:8.3f} {tb / n * 1e3:10.3f} {tf / tb:6.1f} {bad:6d}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
