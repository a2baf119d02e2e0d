"""Which cases the machine core runs: for every suite and gpu-truth case, prepare the launch
(core.machine_kernel: flatten, lower for one warp, allocate) and build the core's whole token
sequence with the oracle (core.launch_tokens), checking that every token is in the core's
vocabulary; no model is involved. Prints the refusals grouped by reason (each names what the core
does not run) and, with --list, every accepted case with its prompt + stream tokens, the original
kernel's thread-instructions and the stream's tokens per thread-instruction (the speed metric of
docs/protocol.md; the stream includes the dump), with their mean and worst. With --outputs, every
accepted case's machine code also runs on the interpreter and its output buffers are compared
with the original kernel's, bit for bit (the oracle's dump is the machine code's outputs).

    .venv/bin/python scripts/machine_census.py [--list] [--outputs] [--step-budget N]
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_layers.errors import QwenGPUError  # noqa: E402
from gpu_layers.interp import launch, launch_args, module_for  # noqa: E402
from gpu_layers.machine.core import core_circuit, launch_tokens, machine_kernel  # noqa: E402
from gpu_layers.machine.protocol import thread_instructions  # noqa: E402
from gpu_layers.suite import with_gpu_truth  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print every accepted case and its tokens")
    ap.add_argument("--outputs", action="store_true",
                    help="also compare each accepted case's outputs with the original kernel's")
    ap.add_argument("--step-budget", type=int, default=500_000, help="the oracle's warp-instruction budget")
    args = ap.parse_args()
    cases = {c.name: c for c in with_gpu_truth()}
    vocab = {n for n, _ in core_circuit().tokens}
    ok, refused, differ = [], defaultdict(list), []
    for name in sorted(cases):
        c = cases[name]
        try:
            kargs = launch_args(c)
            mk, grid, block = machine_kernel(module_for(c.ptx()).kernel(c.kernel), c.grid, c.block, kargs)
            outs = [i for i, a in enumerate(c.args) if a.is_buffer and a.output]
            prompt, want, _, _ = launch_tokens(mk, grid, block, kargs, outs, c.dynamic_shared_bytes,
                                               step_budget=args.step_budget)
            missing = sorted(set(prompt + want) - vocab)
            if missing:
                raise QwenGPUError(f"tokens outside the core's vocabulary: {' '.join(missing[:3])}")
            tins = thread_instructions(module_for(c.ptx()).kernel(c.kernel), c.grid, c.block, kargs,
                                       c.dynamic_shared_bytes) if args.list else 1
            ok.append((name, len(prompt), len(want), tins))
            if args.outputs:
                k = module_for(c.ptx()).kernel(c.kernel)
                a = launch(k, c.grid, c.block, launch_args(c), c.dynamic_shared_bytes).buffers
                b = launch(mk, grid, block, launch_args(c), c.dynamic_shared_bytes).buffers
                if any(x is not None and x.tobytes() != y.tobytes() for x, y in zip(a, b)):
                    differ.append(name)
        except QwenGPUError as e:
            why = str(e).splitlines()
            refused[(why[-1] if why[0].startswith("unsupported PTX") else why[0])[:140]].append(name)
    print(f"the core runs {len(ok)} of {len(cases)} cases")
    if args.outputs:
        print(f"outputs equal to the original kernel's: {len(ok) - len(differ)} of {len(ok)}"
              + (f"; DIFFER: {' '.join(differ)}" if differ else ""))
    for why, names in sorted(refused.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(names):3d} refused: {why}\n      {' '.join(names)}")
    if args.list:
        print(f"\n{'case':28s} {'prompt':>7s} {'stream':>9s} {'thread-ins':>10s} {'per t-i':>8s}")
        for name, p, s, t in sorted(ok, key=lambda x: x[2]):
            print(f"{name:28s} {p:7d} {s:9d} {t:10d} {s / t:8.2f}")
        per = [s / t for _, _, s, t in ok]
        print(f"total: {sum(p + s for _, p, s, _ in ok):,} tokens; stream tokens per thread-instruction: "
              f"mean {sum(per) / len(per):.2f}, worst {max(per):.2f}")
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    main()
