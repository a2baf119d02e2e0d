"""The soft-float lowering (gpu_layers/machine/softfloat.py) against the reference interpreter's
IEEE binary32 (or, with --f64, binary64) arithmetic, bit for bit, on special values and random
operands. Each form runs as a one-instruction kernel over N threads (operands a, b, c per
thread), original and lowered, on the interpreter; prints a table (form, inputs, mismatches,
machine steps per thread).

    .venv/bin/python scripts/check_softfloat.py [--n 2048] [--seed 0] [--forms fma.rn.f32 ...]
    .venv/bin/python scripts/check_softfloat.py --f64 [--n 2048] [--forms min.f64 ...]
    .venv/bin/python scripts/check_softfloat.py [--f64] --cvt-routines   (conversions as routines)
    .venv/bin/python scripts/check_softfloat.py [--f64] --normal   (normal operands: the fast entries)
    .venv/bin/python scripts/check_softfloat.py [--f64] --inline   (the core's first lowering:
        fast entries written out at the site, straight steps)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.errors import UnsupportedPTX  # noqa: E402
from gpu_layers.machine.cvt_routines import routine_form as ROUTINE_CVT  # noqa: E402
from gpu_layers.machine.float_forms import FORMS, FORMS64, compare, normal_operands, operands, operands64  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--f64", action="store_true", help="binary64 forms (FORMS64) and operands")
    ap.add_argument("--forms", nargs="*", default=None)
    ap.add_argument("--normal", action="store_true",
                    help="normal operands only (float_forms.normal_operands: the fast entries' domain)")
    ap.add_argument("--cvt-routines", action="store_true",
                    help="the conversions that can, through gpu_layers.machine.cvt_routines' routines")
    ap.add_argument("--inline", action="store_true",
                    help="lower with inline_floats and straight_steps (the core's first lowering)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.normal:
        A, B, C = normal_operands(args.n, rng, args.f64)
    else:
        A, B, C = (operands64 if args.f64 else operands)(args.n, rng)
    forms = args.forms or (FORMS64 if args.f64 else FORMS)
    if args.cvt_routines:
        forms = [f for f in forms if ROUTINE_CVT(f)]
    hx = 16 if args.f64 else 8
    print(f"{'form':20s} {'inputs':>7s} {'wrong':>6s} {'steps/thread':>13s} {'seconds':>8s}")
    bad = refused = 0
    for form in forms:
        t0 = time.time()
        try:
            want, got, steps = compare(form, A, B, C, cvt_routines=args.cvt_routines, inline_floats=args.inline)
        except UnsupportedPTX:
            print(f"{form:20s} {A.size:7d} {'refused by the lowering':>28s}", flush=True)
            refused += 1
            continue
        wrong = np.nonzero(want != got)[0]
        bad += wrong.size
        print(f"{form:20s} {A.size:7d} {wrong.size:6d} {steps:13.1f} {time.time() - t0:8.1f}",
              flush=True)
        for i in wrong[:5]:
            j = i % A.size         # f32 results: the out word, then the word written over c
            print(f"    a={A[j]:0{hx}X} b={B[j]:0{hx}X} c={C[j]:0{hx}X}: want {want[i]:0{hx}X}, "
                  f"got {got[i]:0{hx}X}{' (high word)' if i >= A.size else ''}")
    print(("all equal" if bad == 0 else f"{bad} mismatches")
          + (f"; {refused} forms refused" if refused else ""))
    return 1 if bad or refused else 0


if __name__ == "__main__":
    sys.exit(main())
