"""The control unit on every eligible suite and gpu-truth case: does the model predict every
control token of the oracle's stream? (gpu_layers/machine/control.py; stock transformers, fp32.)

Eligible: lowers to machine code, one warp per block of <= --threads threads, < 512 machine PCs,
no warp-synchronous instructions (barriers are in); longer streams than --max-tokens are skipped.
--engine fast (default) runs the compact exact executor (gpu_layers/craft/fast.py, thousands of
tokens/s), --engine stock one stock transformers prefill per case (~60 tokens/s here). Prints a
table (case, blocks, threads, tokens, control tokens, mismatches, seconds) and the totals; exit
status 1 on any mismatch.

    .venv/bin/python scripts/machine_control.py [--engine fast|stock] [--threads 16|32]
        [--max-tokens 60000] [--names ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from gpu_layers.craft.testing import TINY  # noqa: E402
from gpu_layers.errors import QwenGPUError  # noqa: E402
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG  # noqa: E402
from gpu_layers.interp import Scalar, module_for  # noqa: E402
from gpu_layers.machine import lower  # noqa: E402
from gpu_layers.machine.control import (CONTROL_KINDS, build_control_unit,  # noqa: E402
                                        check_predictions, control_stream, fast_rows)
from gpu_layers.suite import with_gpu_truth  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=60000)
    ap.add_argument("--engine", choices=("fast", "stock"), default="fast")
    ap.add_argument("--names", nargs="*")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    cases = with_gpu_truth()
    if args.names:
        cases = [c for c in cases if c.name in set(args.names)]
    shapes = {k: REAL_2B_TEXT_CONFIG[k] for k in TINY}
    cu = build_control_unit(shapes, threads=args.threads)
    m = cu.compiled.machine
    print(f"control unit: {len(m.layers)} layers, W = {m.width}, {m.vocab_size} tokens, "
          f"{args.threads} threads (Qwen3.5-2B layer shapes), engine {args.engine}")
    model = cu.model() if args.engine == "stock" else None
    fm = cu.fast() if args.engine == "fast" else None
    print(f"{'case':28s} {'blocks':>6s} {'thr':>4s} {'tokens':>7s} {'control':>7s} {'wrong':>6s} {'s':>6s}")
    done = wrong = skipped = 0
    for c in cases:
        try:
            mk = lower(module_for(c.ptx()).kernel(c.kernel))
            a = [x.data.copy() if x.is_buffer else Scalar(x.elem_type, x.value) for x in c.args]
            names, n0 = control_stream(cu, mk, c.grid, c.block, a, c.dynamic_shared_bytes,
                                       step_budget=50_000_000)
        except QwenGPUError as e:
            skipped += 1
            print(f"{c.name:28s} skipped: {str(e).splitlines()[0][:90]}")
            continue
        if len(names) > args.max_tokens:
            skipped += 1
            print(f"{c.name:28s} skipped: {len(names)} tokens > --max-tokens")
            continue
        t0 = time.time()
        if model is not None:
            with torch.no_grad():
                rows = model(torch.tensor([cu.encode(names)])).logits[0].numpy()
        else:
            rows = fast_rows(fm, cu.encode(names))
        bad = check_predictions(cu, names, n0, rows)
        ctl = sum(n.startswith(CONTROL_KINDS) for n in names[n0:])
        nb = c.grid[0] * c.grid[1] * c.grid[2]
        nt = c.block[0] * c.block[1] * c.block[2]
        print(f"{c.name:28s} {nb:6d} {nt:4d} {len(names):7d} {ctl:7d} {len(bad):6d} {time.time() - t0:6.1f}",
              flush=True)
        done += 1
        wrong += bool(bad)
    print(f"\n{done} cases checked, {wrong} with a mispredicted control token, {skipped} skipped")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
