"""Measure every library block (alone in its own circuit) and the memory ports in fp32 and bf16 on
both transformers paths (prefill = chunked, decode = recurrent with the cache).

Prints one row per block: wrong decoded outputs / outputs outside the 0.25 margin, per dtype and
path, over 10,240 random inputs (or all inputs when fewer) / random memory programs.
    .venv/bin/python scripts/measure_blocks_bf16.py [--quick]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

from gpu_layers.craft.testing import (BLOCK_CASES, TINY, alu_circuit, alu_rows, run_alu, run_block,  # noqa: E402
                                      run_memory)

MEMORY_CASES = {
    "memory 1 lane x32b, 16 slots": dict(slots=16, wbits=32, lanes=1),
    "memory 4 lanes x16b masked": dict(slots=32, wbits=16, lanes=4, waddr_enc="onehot", raddr_enc="bits",
                                       data_enc="dual"),
    "memory 48b word (2 heads)": dict(slots=8, wbits=48, lanes=1, read_enable=False, reset=False),
}


def fmt(res):
    return " ".join(f"{p[:3]}:{w}/{m}" for p, (w, m) in res.items())


def demo_row(quick, adder="lookahead"):
    """The register-file demo, teacher forced: wrong emitted tokens (argmax) per path."""
    import numpy as np
    from transformers.cache_utils import DynamicCache
    from gpu_layers.craft.demo_regfile import build_regfile, random_program
    d = build_regfile(TINY, adder=adder)
    toks, expect, mask = random_program(np.random.default_rng(0), 60 if quick else 200)
    ids = d.encode(toks)
    res = {}
    for dt in (torch.float32, torch.bfloat16):
        model = d.model(dtype=dt)
        with torch.no_grad():
            pre = d.decode(model(torch.tensor([ids])).logits[0].argmax(-1))
            cache, dec = DynamicCache(config=model.config), []
            for t in ids:
                dec.append(int(model(torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1].argmax()))
            dec = d.decode(dec)
        res[dt] = {p: (sum(1 for i in range(len(ids)) if mask[i] and pr[i] != expect[i]), 0)
                   for p, pr in (("prefill", pre), ("decode", dec))}
    print(f"{'demo regfile, ' + adder + ' (tokens)':32} {fmt(res[torch.float32]):28} {fmt(res[torch.bfloat16]):28} "
          f"{sum(mask):>6}", flush=True)


def alu_row(quick):
    """The one-lane ALU (every op and width; rows: gpu_layers.craft.testing.alu_rows): wrong rows."""
    import numpy as np
    from gpu_layers.craft.assemble import compile_circuit
    c, blk = alu_circuit()
    comp = compile_circuit(c, TINY)
    vals, r, q = alu_rows(np.random.default_rng(0), 8 if quick else 64)
    n = 2048 if quick else len(r) // 64 * 64
    shapes = {"prefill": (n // 64, n), "decode": (32, min(n, 2048))}
    res = {dt: run_alu(comp, blk, vals, r, q, shapes, dtype=dt) for dt in (torch.float32, torch.bfloat16)}
    print(f"{'alu (1 lane, 64b, 36 ops)':32} {fmt(res[torch.float32]):28} {fmt(res[torch.bfloat16]):28} "
          f"{n:>6}  {blk.cost.row()}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1,024 inputs per block")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    N = 1024 if args.quick else 10_240
    print(f"{'block':32} {'fp32 wrong/margin':28} {'bf16 wrong/margin':28} {'N':>6}  cost (neurons, ports, vdims, slots, depth)")
    t0 = time.time()
    for label in BLOCK_CASES:
        r32, blk, _ = run_block(label, N=N, dtype=torch.float32)
        r16, _, _ = run_block(label, N=N, dtype=torch.bfloat16)
        n = r32.pop("N")
        r16.pop("N")
        print(f"{label:32} {fmt(r32):28} {fmt(r16):28} {n:>6}  {blk.cost.row()}", flush=True)
    for label, kw in MEMORY_CASES.items():
        B, T = (8, 128) if args.quick else (40, 256)
        res = {}
        for dt in (torch.float32, torch.bfloat16):
            r, _ = run_memory(B=B, T=T, dtype=dt, **kw)
            res[dt] = {p: (sum(w for w, _ in per.values()), sum(m for _, m in per.values())) for p, per in r.items()}
        print(f"{label:32} {fmt(res[torch.float32]):28} {fmt(res[torch.bfloat16]):28} {B * T:>6}", flush=True)
    alu_row(args.quick)
    demo_row(args.quick)
    demo_row(args.quick, adder="prefix")
    print(f"({time.time() - t0:.0f} s; wrong = decoded output fields that differ from the Python reference)")


if __name__ == "__main__":
    main()
