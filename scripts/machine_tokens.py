"""Token cost of the compiled machine's v1 protocol on every lowerable case (no model involved).

For each case of the suite and of gpu-truth: lower to machine code, run the machine-level oracle
(gpu_layers.machine.protocol), decode the output buffers from the token stream alone and compare
them with the reference interpreter's, and count tokens per thread-instruction of the original
kernel, the most registers a thread keeps live, and the machine registers the register allocator
maps the kernel onto (gpu_layers/machine/regalloc.py: `regs` in every pool, `rbits` = sum of count
x width; the register file's real demand). Prints a table and the suite mean / worst.

    .venv/bin/python scripts/machine_tokens.py [--lanes 4] [--names CASE ...]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.errors import UnsupportedPTX  # noqa: E402
from gpu_layers.interp import Scalar, launch, module_for  # noqa: E402
from gpu_layers.machine import lower  # noqa: E402
from gpu_layers.machine.liveness import pressure  # noqa: E402
from gpu_layers.machine.regalloc import allocate  # noqa: E402
from gpu_layers.machine.protocol import decode_outputs, thread_instructions, trace_tokens  # noqa: E402
from gpu_layers.suite import with_gpu_truth  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--names", nargs="*")
    args = ap.parse_args()
    cases = with_gpu_truth()
    if args.names:
        cases = [c for c in cases if c.name in set(args.names)]
    print(f"{'case':28s} {'warp-ins':>9s} {'m-steps':>9s} {'issues':>9s} {'tokens':>10s} "
          f"{'thread-ins':>10s} {'tok/t-ins':>9s} {'live':>5s} {'regs':>5s} {'rbits':>6s}  match")
    rows, refused = [], []
    for c in cases:
        kernel = module_for(c.ptx()).kernel(c.kernel)
        try:
            mk = lower(kernel)
        except UnsupportedPTX:
            refused.append(c.name)
            continue

        def mkargs():
            return [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in c.args]
        ref = launch(kernel, c.grid, c.block, mkargs(), c.dynamic_shared_bytes)
        outs = [i for i, a in enumerate(c.args) if a.is_buffer and (a.output or not any(
            b.output for b in c.args))]
        tr = trace_tokens(mk, c.grid, c.block, mkargs(), c.dynamic_shared_bytes, lanes=args.lanes,
                          outputs=outs, step_budget=50_000_000)
        like = {i: c.args[i].data for i in outs}
        dec = decode_outputs(tr.tokens, like)
        match = all(dec[i].tobytes() == ref.buffers[i].tobytes() for i in outs)
        tins = thread_instructions(kernel, c.grid, c.block, mkargs(), c.dynamic_shared_bytes)
        ntok = sum(t[0] not in ("dump", "x") for t in tr.tokens)
        r = ntok / tins
        live = pressure(mk)
        _, alloc = allocate(mk)
        rows.append((c.name, r, match, live, alloc))
        print(f"{c.name:28s} {ref.steps:9d} {tr.steps:9d} {tr.issues:9d} {ntok:10d} "
              f"{tins:10d} {r:9.2f} {live.max_regs:5d} {alloc.total:5d} {alloc.bits:6d}  "
              f"{'yes' if match else 'NO'}", flush=True)
    if rows:
        mean = sum(r[1] for r in rows) / len(rows)
        worst = max(rows, key=lambda x: x[1])
        most = max(rows, key=lambda x: x[3].max_bits)
        print(f"\n{len(rows)} cases lowered, {len(refused)} refused (not lowered: "
              f"{', '.join(refused) or 'none'}); tokens per thread-instruction: mean {mean:.2f}, worst {worst[1]:.2f} "
              f"({worst[0]}); outputs decoded from tokens match: "
              f"{sum(r[2] for r in rows)}/{len(rows)}; most live registers per thread: "
              f"{max(r[3].max_regs for r in rows)}, most live bits: {most[3].max_bits} ({most[0]})")
        regs = max(rows, key=lambda x: x[4].total)
        rbits = max(rows, key=lambda x: x[4].bits)
        pools = {w: max(r[4].counts.get(w, 0) for r in rows) for w in (1, 16, 32, 64)}
        print(f"allocated machine registers per thread: most {regs[4].total} ({regs[0]}), most bits "
              f"{rbits[4].bits} ({rbits[0]}); most per pool: "
              + ", ".join(f"{n} x {w}-bit" for w, n in pools.items()))
    return 0 if all(r[2] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
