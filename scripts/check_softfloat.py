"""The soft-float lowering (gpu_layers/machine/softfloat.py) against the reference interpreter's
IEEE binary32 arithmetic, bit for bit, on special values and random operands. Each form runs as
a one-instruction kernel over N threads (operands a, b, c per thread), original and lowered, on
the interpreter; prints a table (form, inputs, mismatches, machine steps per thread).

    .venv/bin/python scripts/check_softfloat.py [--n 2048] [--seed 0] [--forms fma.rn.f32 ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.machine.float_forms import FORMS, compare, operands  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--forms", nargs="*", default=FORMS)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    A, B, C = operands(args.n, rng)
    print(f"{'form':20s} {'inputs':>7s} {'wrong':>6s} {'steps/thread':>13s} {'seconds':>8s}")
    bad = 0
    for form in args.forms:
        t0 = time.time()
        want, got, steps = compare(form, A, B, C)
        wrong = np.nonzero(want != got)[0]
        bad += wrong.size
        print(f"{form:20s} {A.size:7d} {wrong.size:6d} {steps:13.1f} {time.time() - t0:8.1f}",
              flush=True)
        for i in wrong[:5]:
            j = i % A.size         # results: the out word, then the word written over c
            print(f"    a={A[j]:08X} b={B[j]:08X} c={C[j]:08X}: want {want[i]:08X}, got {got[i]:08X}"
                  f"{' (high word)' if i >= A.size else ''}")
    print("all equal" if bad == 0 else f"{bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
