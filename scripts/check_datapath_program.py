"""The datapath program against the reference interpreter, on every lowerable case.

For each case of the suite and of gpu-truth: lower (gpu_layers.machine.lower), allocate
(gpu_layers.machine.allocate), decode the datapath program (gpu_layers/machine/datapath_program.py)
and run `check_program`: at every step of an ALU instruction, for every lane that executed it,
alu_ref(op, width, A, B, P) must equal what the interpreter wrote; the executed lanes must be
exactly the issued lanes whose guard holds. Prints one row per case (ALU warp-steps checked, lanes
checked, lanes skipped because an operand was poison, steps of instructions the ALU does not
compute, match), the cases refused by name (DatapathError), the unsupported forms and the lanes
checked per ALU op.

    .venv/bin/python scripts/check_datapath_program.py [--lanes 4] [--names CASE ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.errors import UnsupportedPTX  # noqa: E402
from gpu_layers.interp import Scalar, module_for  # noqa: E402
from gpu_layers.machine import allocate, lower  # noqa: E402
from gpu_layers.machine.datapath_program import (  # noqa: E402
    DatapathError, check_program, datapath_problems, register_slots,
)
from gpu_layers.suite import with_gpu_truth  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--names", nargs="*")
    args = ap.parse_args()
    cases = with_gpu_truth()
    if args.names:
        cases = [c for c in cases if c.name in set(args.names)]
    t0 = time.time()
    print(f"{'case':26s} {'threads':>7s} {'ALU steps':>10s} {'lanes':>10s} {'poison':>7s} "
          f"{'unsupp':>6s}  match")
    rows, refused, lowered_not = [], [], 0
    by_op, forms = Counter(), Counter()
    for c in cases:
        kernel = module_for(c.ptx()).kernel(c.kernel)
        try:
            mk = lower(kernel)
        except UnsupportedPTX:
            lowered_not += 1
            continue
        ak, _ = allocate(mk)

        def mkargs():
            return [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in c.args]
        nt = c.block[0] * c.block[1] * c.block[2]
        try:
            st = check_program(ak, c.grid, c.block, mkargs(), c.dynamic_shared_bytes, lanes=args.lanes,
                               step_budget=50_000_000)
        except DatapathError as e:
            refused.append((c.name, str(e)))
            continue
        for p in datapath_problems(ak, register_slots(ak), c.grid, c.block, mkargs()):
            text, why = p.split("`", 1)[1].rsplit("`: ", 1)
            words = text.split()
            forms[f"{words[1] if words[0].startswith('@') else words[0]}: {why}"] += 1
        by_op.update(st.by_op)
        rows.append((c.name, st))
        print(f"{c.name:26s} {nt:7d} {st.alu_steps:10d} {st.lanes:10d} {st.poison:7d} "
              f"{st.unsupported_steps:6d}  {'yes' if st.ok else 'NO'}", flush=True)
        for m in st.mismatches[:5]:
            print("    " + m)
    n_ok = sum(st.ok for _, st in rows)
    print(f"\n{len(rows)} cases checked ({lowered_not} not lowerable: floating point), {n_ok} match; "
          f"ALU steps {sum(st.alu_steps for _, st in rows)}, lanes checked "
          f"{sum(st.lanes for _, st in rows)}, poison lanes skipped {sum(st.poison for _, st in rows)}, "
          f"guard-checked steps {sum(st.guard_steps for _, st in rows)}, unsupported steps "
          f"{sum(st.unsupported_steps for _, st in rows)}; {time.time() - t0:.0f} s")
    if refused:
        print(f"\nrefused by name ({len(refused)}):")
        for name, why in refused:
            print(f"  {name}: {why}")
    if forms:
        print("\nnot computed by the ALU (instruction form: reason, instructions):")
        for f, n in sorted(forms.items()):
            print(f"  {f}  x{n}")
    print("\nlanes checked per ALU op:")
    print("  " + ", ".join(f"{k} {v}" for k, v in sorted(by_op.items())))
    return 0 if n_ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
