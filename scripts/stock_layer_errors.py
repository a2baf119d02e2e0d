"""How far stock fp32 leaves each of the core's fields from its code, layer by layer: a core build
through stock transformers (one teacher-forced prefill of a case, every layer's hidden state)
against the fast executor run on the first k compiled layers (fp64 sums: the fields on their
codes). Checks the scales gpu_layers/craft/precision.py assumes (a step's output error against
range x 2^-24, a DeltaNet read's against MEMORY_READ_ERROR) on the real core.

    PYTHONPATH=. .venv/bin/python scripts/stock_layer_errors.py --checkpoint BUILD --case DIR/cases.json:vec_add_i32

Prints, per MLP stage, the largest |stock - fast| over the dims it writes, just after its layer,
and that error divided by the stage's scale (its widest step's range x 2^-24); then, per layer,
the largest error of the memory reads born there. CPU: the prefill of 773 tokens takes ~3-6
minutes, the 24 fast runs about one.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_layers.craft import assemble as A  # noqa: E402
from gpu_layers.craft import fast_kernels as K  # noqa: E402
from gpu_layers.craft.circuit import MLPStage  # noqa: E402
from gpu_layers.craft.precision import FP32_EPS, MEMORY_READ_ERROR, code_maxabs  # noqa: E402
from gpu_layers.craft.recycle import recycle  # noqa: E402
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG  # noqa: E402
from gpu_layers.machine.backend import load_core  # noqa: E402
from gpu_layers.machine.core import core_circuit  # noqa: E402
from gpu_layers.splice import load_spliced  # noqa: E402

F32 = np.float32


def fast_hidden(fm, ids, seq, k):
    """(T, W) the residual after the first k compiled layers at every position (fast executor)."""
    pk = fm.packed
    meta = np.ascontiguousarray(pk.meta[:k])
    st = fm.new_state()
    out = np.empty((len(seq), fm.W), dtype=F32)
    for i, t in enumerate(seq):
        tid = ids[t]
        x = np.zeros(fm.W, dtype=F32)
        a, b = fm.embed_ptr[tid], fm.embed_ptr[tid + 1]
        x[fm.embed_idx[a:b]] = fm.embed_val[a:b]
        ss = K.sum_squares(x, fm.embed_idx[a:b])
        p = st.pools
        full = len(st.tokens) % fm.RESYNC == 0
        K.forward_layers(x, ss, float(fm.W), fm.eps, F32(fm.dk ** 0.5), float(fm.dv), st.incremental, full,
                         meta, *pk.pools, p["S"], p["CV"], p["P"], p["A"], p["N"])
        st.tokens.append(int(tid))
        out[i] = x
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="a core build (build --machine core)")
    ap.add_argument("--case", required=True, help="CASES_JSON:NAME (gpu_core_stock.py export --cases-only)")
    ap.add_argument("--tokens", type=int, default=0, help="the first N tokens of the sequence (0: all)")
    args = ap.parse_args()
    path, name = args.case.rsplit(":", 1)
    d = json.load(open(path))[name]
    seq = d["prompt"] + d["stream"]
    if args.tokens:
        seq = seq[:args.tokens]

    c = core_circuit()
    s = A.Shapes.of(REAL_2B_TEXT_CONFIG)
    plans, pos = A.schedule(c, s)
    dmap = recycle(c, plans, pos, s.intermediate_size).dmap
    L = c.layout
    fm, ids = load_core()

    model = load_spliced(args.checkpoint)
    info = model.splice_info
    t0 = time.time()
    with torch.no_grad():
        out = model.model(input_ids=torch.tensor([[info.host_vocab + ids[t] for t in seq]]),
                          output_hidden_states=True, use_cache=False)
    H, scale = info.host_hidden, info.machine_residual_scale
    hs = [h[0, :, H:H + fm.W].double().numpy() / scale for h in out.hidden_states]
    print(f"stock prefill of {len(seq)} tokens: {time.time() - t0:.0f} s", flush=True)

    maxabs = code_maxabs(c)
    stages = [(st, pos[st.name]) for st in c.stages if isinstance(st, MLPStage) and st.steps]
    reads = [(st, pos[st.name]) for st in c.stages if not isinstance(st, MLPStage)]
    print(f"{'stage':<22} {'layer':>5} {'max|stock-fast|':>16} {'scale':>9} {'ratio':>6}")
    worst_ratio = 0.0
    for k in range(1, len(plans) + 1):
        fx = fast_hidden(fm, ids, seq, k).astype(np.float64)
        err = np.abs(hs[k] - fx).max(0)
        for st, p in stages:
            if p != 2 * k - 1:
                continue
            dims = [int(dmap[i]) for f in st.outputs for i in range(f.start, f.stop)]
            e = float(err[dims].max())
            sc = max(x.range(maxabs) for x in st.steps) * FP32_EPS
            worst_ratio = max(worst_ratio, e / sc)
            print(f"{st.name:<22} {k - 1:>5} {e:>16.2e} {sc:>9.1e} {e / sc:>6.2f}")
        rd = [(st.name, float(err[[int(dmap[i]) for f in st.outputs for i in range(f.start, f.stop)
                                    if L.dies.get(f.name, 10 ** 9) > p + 1]].max(initial=0.0)))
              for st, p in reads if p == 2 * k - 2 and st.outputs]
        if rd:
            n, e = max(rd, key=lambda r: r[1])
            print(f"{'  reads: ' + n:<22} {k - 1:>5} {e:>16.2e} {MEMORY_READ_ERROR:>9.1e} {e / MEMORY_READ_ERROR:>6.2f}",
                  flush=True)
    print(f"largest measured / scale over the MLP stages: {worst_ratio:.2f}")


if __name__ == "__main__":
    main()
