"""The machine core through stock transformers: the machine-only model built on a machine with
room for it (a GPU: the core's dense fp32 model is about 21.5 GB), or a spliced checkpoint that
`python -m gpu_layers build --machine core` wrote, loaded with stock from_pretrained (on the CPU it
maps the shards, so a checkpoint bigger than memory runs, slowly).

Two steps, the first on the machine that compiles the core, the second where the model fits:

    .venv/bin/python scripts/gpu_core_stock.py export DIR [--names CASE ...]
        DIR/core.npz: the core's nonzero weights (gpu_layers.craft.sparse_file, a few MB);
        DIR/cases.json: each case's prompt and oracle stream (backend.case_tokens).
    python3 scripts/gpu_core_stock.py check DIR [--device cuda] [--dtypes fp32 bf16]
                                      [--generate CASE ...] [--json FILE]
        builds the stock Qwen3_5ForCausalLM of the core from DIR/core.npz and, per dtype, feeds
        each case's whole token sequence in ONE teacher-forced prefill (the chunked delta rule)
        and compares the greedy token at every position from the last prompt token on with the
        oracle's; then runs stock `generate` (greedy, the recurrent rule with the cache) from each
        --generate case's prompt and compares its tokens with the oracle's stream. Prints a table
        (case, tokens, positions checked, mismatches, first mismatch, seconds, tokens/s). Sequences
        longer than --segment tokens are prefilled in segments that carry the cache.

    python3 scripts/gpu_core_stock.py check DIR --checkpoint BUILD [--device cpu] ...
        the same checks on the spliced checkpoint BUILD (host + core, `gpu_layers.splice`): the
        machine tokens by their ids there, the greedy token over the whole vocabulary (host
        tokens included, as stock generate picks it); DIR/cases.json only is read (`export
        --cases-only`).

TF32 is switched off (matmul and cuDNN): the circuits are built for IEEE float32 products.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_CASES = ["vec_add_i32", "divergence", "early_return", "bitwise_ops", "scan_inclusive_i32"]


def export(args):
    from gpu_layers.craft.sparse_file import write_circuit
    from gpu_layers.craft.testing import TINY
    from gpu_layers.hosts import REAL_2B_TEXT_CONFIG
    from gpu_layers.machine.backend import case_tokens
    from gpu_layers.machine.core import core_circuit
    from gpu_layers.suite import with_gpu_truth

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    cases = {c.name: c for c in with_gpu_truth()}
    unknown = [n for n in args.names if n not in cases]
    if unknown:
        sys.exit(f"unknown case(s): {', '.join(unknown)}")
    streams = {}
    for name in args.names:
        prompt, want = case_tokens(cases[name])
        streams[name] = {"prompt": prompt, "stream": want}
        print(f"{name}: {len(prompt)} prompt + {len(want)} stream tokens", flush=True)
    (out / "cases.json").write_text(json.dumps(streams))
    if not args.cases_only:
        t = time.time()
        print("compiling the core into core.npz (minutes) ...", flush=True)
        n = write_circuit(core_circuit(), {k: REAL_2B_TEXT_CONFIG[k] for k in TINY}, out / "core.npz")
        print(f"{n} layers, {(out / 'core.npz').stat().st_size / 1e6:.1f} MB in {time.time() - t:.0f} s")


def _greedy_prefill(model, ids, first: int, segment: int, chunk: int = 2048):
    """Teacher-forced forwards of `ids` (one, or segments of `segment` tokens carrying the cache:
    still the chunked delta rule, from the carried state); the argmax token at positions
    first .. len-2."""
    import torch
    from transformers.cache_utils import DynamicCache

    dev = model.lm_head.weight.device
    one = len(ids) <= segment
    cache = None if one else DynamicCache(config=model.config)
    pred = []
    with torch.no_grad():
        for s0 in range(0, len(ids), segment):
            seg = ids[s0:s0 + segment]
            h = model.model(input_ids=torch.tensor([seg], device=dev), cache=cache,
                            use_cache=not one).last_hidden_state[0]
            for s in range(max(first, s0), min(s0 + len(seg), len(ids) - 1), chunk):
                e = min(s + chunk, s0 + len(seg), len(ids) - 1)
                pred.append(model.lm_head(h[s - s0:e - s0]).argmax(-1).cpu())
            del h
    return torch.cat(pred).tolist()


def _sync(dev):
    import torch

    if str(dev).startswith("cuda"):
        torch.cuda.synchronize()


def _record(args, results, path, dtype_name, case, got, want, first, names, seconds, **extra):
    """One table row and one result (written to --json at once: a run cut short keeps what it
    has): `got` vs `want`, the greedy tokens at positions first, first + 1, ..."""
    wrong = [(first + p, names[g]) for p, (g, w) in enumerate(zip(got, want)) if g != w]
    tokens = extra.pop("tokens", len(got))
    fw = f"@{wrong[0][0]} {wrong[0][1]}" if wrong else "-"
    print(f"{path:9s} {dtype_name:5s} {case:22s} {tokens:7d} {len(got):7d} {len(wrong):6d} "
          f"{fw[:28]:>28s} {seconds:7.2f} {tokens / seconds:8.1f}", flush=True)
    results.append({"path": path, "dtype": dtype_name, "case": case, "tokens": tokens, "checked": len(got),
                    "wrong": len(wrong), "first_wrong": wrong[:5], "seconds": seconds, **extra})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


class _Names(list):
    """Token names by id for a spliced model: machine tokens by name, host tokens as <host:ID>."""

    def __init__(self, first: int, machine: list[str]):
        super().__init__(machine)
        self.first = first

    def __getitem__(self, i):
        return super().__getitem__(i - self.first) if i >= self.first else f"<host:{i}>"

    @property
    def ids(self) -> dict[str, int]:
        return {n: self.first + k for k, n in enumerate(super().__iter__())}


def _load_spliced(path, dtype, device):
    """A build of `python -m gpu_layers build --machine core`, loaded with stock from_pretrained."""
    from gpu_layers.build import read_manifest
    from gpu_layers.splice import load_spliced

    man = read_manifest(path)
    if man["machine"] != "core":
        sys.exit(f"{path} holds machine {man['machine']!r}, not the core")
    model = load_spliced(path, dtype=dtype).to(device)
    info = model.splice_info
    return model, _Names(info.host_vocab, info.token_names)


def check(args):
    import torch

    from gpu_layers.craft.sparse_file import load_model

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    d = Path(args.dir)
    streams = json.loads((d / "cases.json").read_text())
    results = []
    for dtype_name in args.dtypes:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
        t = time.time()
        if args.checkpoint:
            model, names = _load_spliced(args.checkpoint, dtype, args.device)
        else:
            model, names = load_model(d / "core.npz", dtype=dtype, device=args.device)
        _sync(args.device)
        ids = names.ids if isinstance(names, _Names) else {n: i for i, n in enumerate(names)}
        print(f"[{dtype_name}] stock model built in {time.time() - t:.1f} s: {len(model.model.layers)} layers "
              f"(one inert full-attention), hidden {model.config.hidden_size}, vocab {model.config.vocab_size}, "
              f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} G parameters", flush=True)
        print(f"{'path':9s} {'dtype':5s} {'case':22s} {'tokens':>7s} {'checked':>7s} {'wrong':>6s} "
              f"{'first wrong':>28s} {'s':>7s} {'tok/s':>8s}", flush=True)
        for name in args.names or list(streams):
            s = streams[name]
            seq = [ids[x] for x in s["prompt"] + s["stream"]]
            first = len(s["prompt"]) - 1
            _sync(args.device)
            t = time.time()
            pred = _greedy_prefill(model, seq, first, args.segment)
            _sync(args.device)
            _record(args, results, "prefill", dtype_name, name, pred, seq[first + 1:], first, names,
                    time.time() - t, tokens=len(seq), segments=-(-len(seq) // args.segment))
        for name in args.generate if dtype_name in args.generate_dtypes else []:
            s = streams[name]
            prompt, want = [ids[x] for x in s["prompt"]], [ids[x] for x in s["stream"]]
            n = min(len(want), args.max_new)
            _sync(args.device)
            t = time.time()
            with torch.no_grad():
                out = model.generate(torch.tensor([prompt], device=model.lm_head.weight.device), max_new_tokens=n,
                                     min_new_tokens=n, do_sample=False)[0, len(prompt):].tolist()
            _sync(args.device)
            _record(args, results, "generate", dtype_name, name, out, want[:n], 0, names, time.time() - t,
                    prompt_tokens=len(prompt))
        del model
        if str(args.device).startswith("cuda"):
            torch.cuda.empty_cache()
    bad = [r for r in results if r["wrong"] and r["dtype"] == "fp32"]
    sys.exit(1 if bad else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="write DIR/core.npz and DIR/cases.json")
    e.add_argument("dir")
    e.add_argument("--names", nargs="*", default=DEFAULT_CASES)
    e.add_argument("--cases-only", action="store_true", help="rewrite cases.json only")
    c = sub.add_parser("check", help="build the stock model from DIR and compare with the oracle")
    c.add_argument("dir")
    c.add_argument("--device", default="cuda")
    c.add_argument("--checkpoint", help="a spliced build (python -m gpu_layers build --machine core) to check "
                                        "instead of DIR/core.npz")
    c.add_argument("--dtypes", nargs="*", default=["fp32"], choices=["fp32", "bf16"])
    c.add_argument("--names", nargs="*", help="prefill these cases only (default: all of cases.json)")
    c.add_argument("--generate", nargs="*", default=[], help="cases to run through stock generate too")
    c.add_argument("--generate-dtypes", nargs="*", default=["fp32"])
    c.add_argument("--segment", type=int, default=10_000,
                   help="longer sequences are prefilled in segments of this many tokens, carrying the cache")
    c.add_argument("--max-new", type=int, default=3000, help="generate at most this many tokens a case")
    c.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    (export if args.cmd == "export" else check)(args)


if __name__ == "__main__":
    main()
