"""Peak memory of `python -m gpu_layers build` from a Qwen3.5-2B-shaped host, and of running the build.

    .venv/bin/python scripts/bench_build_memory.py [--machine regfile-prefix] [--dtype bfloat16]
                                                   [--shape 2b|tiny] [--dir DIR] [--keep]

1. writes a random host with REAL_2B_TEXT_CONFIG (gpu_layers.hosts) into a temporary directory,
   laid out like the release: a vision-language config.json (the text config under `text_config`),
   bf16 safetensors shards of ~1 GiB with the text weights under `model.language_model.` (tied
   embeddings: no lm_head), one small vision and one MTP tensor that the loader must skip, and an
   index. Weights are drawn tensor by tensor with gpu_layers.hosts.random_param (tiny_host's scales),
   never a whole model in memory;
2. runs the build in a subprocess (`python -m gpu_layers build --host DIR ...`);
3. in another subprocess loads the build with stock AutoModelForCausalLM.from_pretrained (bf16) and
   runs one forward over ordinary text followed by a few machine tokens;
and prints a table: each step's peak resident memory (VmHWM, which counts file pages mapped by
safetensors too) and peak anonymous memory (RssAnon sampled every 20 ms: the memory the process
really owns), wall time, sizes on disk and the splice's own parameter estimate.

`--shape tiny` runs the same pipeline on the tiny host's shapes (a quick check of the script).
The machine this was written on has 24 GB shared with other jobs: run the 2B measurement alone.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARD_BYTES = 1 << 30

# Runs in each measured subprocess: samples RssAnon / RssFile while the payload runs, then prints
# one JSON line with the peaks on stderr.
SAMPLER = r"""
import json, os, sys, threading, time
peak = {"RssAnon": 0, "RssFile": 0}
def status():
    out = {}
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("RssAnon", "RssFile", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out
def sample():
    while True:
        s = status()
        for k in peak:
            peak[k] = max(peak[k], s.get(k, 0))
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
t0 = time.time()
rc = 0
try:
    exec(compile(PAYLOAD, "payload", "exec"))
except SystemExit as e:
    rc = e.code or 0
s = status()
for k in peak:
    peak[k] = max(peak[k], s.get(k, 0))
print("BENCH " + json.dumps({"rc": rc, "wall_s": time.time() - t0, "VmHWM": s["VmHWM"], **{"peak_" + k: v for k, v in peak.items()}}), file=sys.stderr, flush=True)
sys.exit(rc)
"""

BUILD = """
from gpu_layers.cli import main
rc = main(["build", "--host", HOST, "--machine", MACHINE, "--out", OUT, "--dtype", DTYPE])
if rc:
    raise SystemExit(rc)
"""

RUN = """
import json, torch
from pathlib import Path
from transformers import AutoModelForCausalLM
from gpu_layers.hosts import CALIBRATION_TEXT, tiny_tokenizer
torch.set_num_threads(2)
model = AutoModelForCausalLM.from_pretrained(OUT, dtype=getattr(torch, DTYPE)).eval()
man = json.loads((Path(OUT) / "qwengpu_build.json").read_text())
ids = tiny_tokenizer().encode(CALIBRATION_TEXT)[:96]
ids += [man["first_machine_token_id"] + k for k in range(8)]
with torch.no_grad():
    logits = model(torch.tensor([ids]), use_cache=False).logits
assert logits.shape[-1] == model.config.vocab_size and torch.isfinite(logits[0, :96]).all()
print("forward over", len(ids), "tokens ok", file=__import__("sys").stderr)
"""


def write_host(d: Path, shape: str) -> dict:
    """The release-layout random host in `d`; returns facts about it."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3_5ForCausalLM

    from gpu_layers.hosts import REAL_2B_TEXT_CONFIG, TINY_CONFIG, random_param, tiny_config

    text = dict(REAL_2B_TEXT_CONFIG) if shape == "2b" else dict(TINY_CONFIG, model_type="qwen3_5_text")
    cfg = tiny_config({k: v for k, v in text.items() if k != "model_type"})
    with torch.device("meta"):
        meta = Qwen3_5ForCausalLM(cfg)
    params = [(n, tuple(p.shape)) for n, p in meta.named_parameters()]   # tied lm_head listed once
    del meta
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
        "tie_word_embeddings": True, "text_config": text,
        "vision_config": {"model_type": "qwen3_5_vision", "depth": 24, "hidden_size": 1024, "out_hidden_size": 2048},
    }, indent=1))
    g = torch.Generator().manual_seed(0)
    shards, cur, cur_bytes, n_params = [], {}, 0, 0

    def flush():
        nonlocal cur, cur_bytes
        if cur:
            shards.append(cur)
            name = f"model-{len(shards):05d}.safetensors"
            save_file(cur, str(d / name), metadata={"format": "pt"})
            shards[-1] = (name, list(cur))
            cur, cur_bytes = {}, 0
    extra = [("model.visual.blocks.0.attn.qkv.weight", (64, 16)), ("mtp.fc.weight", (16, 16))]
    for name, shape_ in sorted(params) + extra:
        if name.startswith("lm_head."):
            continue
        if name.startswith("model."):
            key = "model.language_model." + name[len("model."):] if not name.startswith("model.visual.") else name
            t = random_param(name, shape_, g).to(torch.bfloat16)
            n_params += t.numel()
        else:
            key, t = name, torch.zeros(shape_, dtype=torch.bfloat16)
        cur[key] = t
        cur_bytes += t.numel() * 2
        if cur_bytes >= SHARD_BYTES:
            flush()
    flush()
    total = len(shards)
    weight_map = {}
    for k, (name, keys) in enumerate(shards):
        final = f"model-{k + 1:05d}-of-{total:05d}.safetensors"
        os.replace(d / name, d / final)
        weight_map.update({key: final for key in keys})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return {"text_params": n_params, "shards": total, "config": cfg}


def measure(payload: str, env_vars: dict, log_path: Path) -> dict:
    code = "".join(f"{k} = {v!r}\n" for k, v in env_vars.items()) + f"PAYLOAD = {payload!r}\n" + SAMPLER
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(log_path, "w") as log:
        p = subprocess.run([sys.executable, "-c", code], stderr=subprocess.PIPE, stdout=log, text=True, env=env,
                           cwd=str(ROOT))
    line = [l for l in p.stderr.splitlines() if l.startswith("BENCH ")]
    for l in p.stderr.splitlines():
        if not l.startswith("BENCH ") and "falling back" not in l and "Writing model shards" not in l:
            print("    " + l, file=sys.stderr)
    if not line:
        raise SystemExit(f"measurement subprocess failed (rc {p.returncode})")
    return json.loads(line[-1][len("BENCH "):])


def du(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def disk_bytes(d: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in d.rglob("*") if f.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machine", default="regfile-prefix")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--shape", default="2b", choices=["2b", "tiny"])
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed afterwards)")
    ap.add_argument("--keep", action="store_true", help="keep the host and the build")
    a = ap.parse_args()

    from gpu_layers.craft.machines import build_machine
    from gpu_layers.splice import estimate_spliced_bytes, expected_layer_shapes

    tmp = None if a.dir else tempfile.TemporaryDirectory(prefix="qwengpu-bench-", dir=os.environ.get("TMPDIR"))
    work = Path(a.dir or tmp.name)
    host, out = work / "host", work / "build"
    try:
        t0 = time.time()
        print(f"[bench] writing a random {a.shape}-shaped host (bf16, release layout) to {host}", file=sys.stderr)
        facts = write_host(host, a.shape)
        t_host = time.time() - t0
        m = build_machine(a.machine, facts["config"])
        est = estimate_spliced_bytes(facts["config"], m.width, len(m.layers), m.vocab_size,
                                     bytes_per_param=2 if a.dtype == "bfloat16" else 4)
        n_machine = len(m.layers) * sum(math.prod(s) for s in expected_layer_shapes(facts["config"], m.width).values()) \
            + 2 * m.vocab_size * m.width                # shapes only: a streamed machine's layers are not written here
        del m
        print(f"[bench] building ({a.machine}, {a.dtype}) in a subprocess", file=sys.stderr)
        vars_ = {"HOST": str(host), "MACHINE": a.machine, "OUT": str(out), "DTYPE": a.dtype}
        b = measure(BUILD, vars_, work / "build.log")
        if b["rc"]:
            raise SystemExit(f"build failed (rc {b['rc']})")
        print("[bench] loading the build with stock from_pretrained and running one forward", file=sys.stderr)
        r = measure(RUN, vars_, work / "run.log")
        if r["rc"]:
            raise SystemExit(f"run failed (rc {r['rc']})")
        G = 2 ** 30
        rows = [
            ("host", f"{a.shape}-shaped random Qwen3.5, {facts['text_params'] / 1e9:.3f} B text params, "
                     f"{facts['shards']} bf16 shards, {du(host) / G:.2f} GiB on disk (written in {t_host:.0f} s)"),
            ("machine", f"{a.machine}, {a.dtype}; compiled tensors {n_machine / 1e6:.0f} M values (float32 while building)"),
            ("spliced params (estimate)", f"{est['total'] / G:.2f} GiB: " + ", ".join(
                f"{k} {v / G:.2f}" for k, v in est.items() if k != "total")),
            ("build on disk", f"{du(out) / G:.2f} GiB of files, {disk_bytes(out) / G:.2f} GiB of blocks (zeros are holes)"),
            ("build: peak RSS (VmHWM)", f"{b['VmHWM'] / G:.2f} GiB"),
            ("build: peak anonymous RSS", f"{b['peak_RssAnon'] / G:.2f} GiB (file-backed peak {b['peak_RssFile'] / G:.2f})"),
            ("build: wall time", f"{b['wall_s']:.0f} s"),
            ("load + forward: peak RSS (VmHWM)", f"{r['VmHWM'] / G:.2f} GiB"),
            ("load + forward: peak anonymous RSS", f"{r['peak_RssAnon'] / G:.2f} GiB (file-backed peak {r['peak_RssFile'] / G:.2f})"),
            ("load + forward: wall time", f"{r['wall_s']:.0f} s"),
        ]
        w = max(len(k) for k, _ in rows)
        print("\n".join(f"{k:<{w}}  {v}" for k, v in rows))
    finally:
        if tmp is not None and not a.keep:
            tmp.cleanup()
        elif a.keep:
            print(f"[bench] kept {work}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
