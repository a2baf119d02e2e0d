"""Where a case's machine tokens go: for each named suite or gpu-truth case, the core's lowering
(core.machine_kernel) and the oracle's trace (core.launch_tokens), every trace token charged to
the source PTX line it was lowered from (the float routines' code to the line that called them),
the top lines printed with their tokens, share and tokens per thread-instruction of the whole
case; with --ops, the machine instructions' opcodes instead. No model is involved.

    .venv/bin/python scripts/machine_profile.py --names f64_round_modes lcg_jump [--top 12] [--ops]
    .venv/bin/python scripts/machine_profile.py --suite [--ops | --kinds] [--top 30]

--suite splits the census mean (machine_census.py: stream tokens per thread-instruction,
averaged over every case the core runs) into each key's share: the source PTX opcode a token
was lowered from (default), the machine opcode (--ops) or the token's kind (--kinds: <d>, <g>,
<wi>, ...); the shares add up to the mean of the trace tokens (the census counts the dump too).
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.errors import QwenGPUError  # noqa: E402
from gpu_layers.interp import launch_args, module_for  # noqa: E402
from gpu_layers.machine.core import launch_tokens, machine_kernel  # noqa: E402
from gpu_layers.machine.protocol import thread_instructions  # noqa: E402
from gpu_layers.suite import with_gpu_truth  # noqa: E402


def profile(case, ops: bool, kinds: bool = False):
    """(Counter of trace tokens by source line, machine opcode (ops) or token kind (kinds), the
    case's thread-instructions, stream tokens, machine instructions, {line: source text})."""
    args = launch_args(case)
    k = module_for(case.ptx()).kernel(case.kernel)
    mk, grid, block = machine_kernel(k, case.grid, case.block, args)
    outs = [i for i, a in enumerate(case.args) if a.is_buffer and a.output]
    _, stream, _, tr = launch_tokens(mk, grid, block, args, outs, case.dynamic_shared_bytes)
    routine_line = max(i.line for i in k.instructions)      # routine code carries the last line
    out, pc, line = Counter(), None, None
    for t in tr.tokens:
        if t[0] == "wi":
            pc = t[2]
            if mk.instructions[pc].line != routine_line:
                line = mk.instructions[pc].line
        if kinds:
            out[t[0]] += 1
        elif pc is not None:
            out[mk.instructions[pc].opcode if ops else line] += 1
    ti = thread_instructions(k, case.grid, case.block, args, case.dynamic_shared_bytes)
    return out, ti, len(stream), len(mk.instructions), {i.line: str(i) for i in k.instructions}


def suite_shares(ops: bool, kinds: bool) -> tuple[Counter, int]:
    """({key: share of the mean tokens per thread-instruction}, cases the core runs)."""
    total, n = Counter(), 0
    for case in with_gpu_truth():
        try:
            out, ti, _, _, src = profile(case, ops, kinds)
        except QwenGPUError:                   # refused by the core (machine_census lists why)
            continue
        n += 1
        for key, v in out.items():
            if not (ops or kinds):            # a source line: its opcode (the guard dropped)
                text = src.get(key)
                key = "(no source line)" if text is None else text.split()[1 if text.startswith("@") else 0]
            total[key] += v / ti
    return Counter({k: v / n for k, v in total.items()}), n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", nargs="+", help="suite or gpu-truth case names")
    ap.add_argument("--suite", action="store_true", help="every case the core runs: shares of the mean")
    ap.add_argument("--top", type=int, default=12, help="lines (or opcodes) to print per case")
    ap.add_argument("--ops", action="store_true", help="by machine opcode instead of source line")
    ap.add_argument("--kinds", action="store_true", help="--suite by token kind")
    a = ap.parse_args()
    if a.suite:
        shares, n = suite_shares(a.ops, a.kinds)
        what = "token kind" if a.kinds else "machine opcode" if a.ops else "source PTX opcode"
        print(f"{n} cases: trace tokens per thread-instruction, mean {sum(shares.values()):.2f}, by {what}")
        for key, v in shares.most_common(a.top):
            print(f"{v:8.2f}  {key}")
        return
    if not a.names:
        ap.error("--names or --suite")
    cases = {c.name: c for c in with_gpu_truth()}
    unknown = [n for n in a.names if n not in cases]
    if unknown:
        sys.exit(f"unknown case(s): {' '.join(unknown)}")
    for name in a.names:
        out, ti, stream, pcs, src = profile(cases[name], a.ops)
        total = sum(out.values())
        print(f"== {name}: {stream:,} stream tokens, {ti:,} thread-instructions "
              f"({stream / ti:.2f} a thread-instruction), {pcs} machine instructions")
        for key, n in out.most_common(a.top):
            what = key if a.ops else f"line {key}: {src.get(key, '?')}"
            print(f"{n:10,d} {100 * n / total:5.1f}% {n / ti:8.2f}  {what}")


if __name__ == "__main__":
    main()
