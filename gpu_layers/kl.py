"""KL(original || spliced) on real text, measured on what users load.

`python -m gpu_layers kl --host H --text FILE --machine NAME [--dtype float32|bfloat16] [--out DIR]`:
(`python -m gpu_layers kl --checkpoint DIR --text FILE` measures an existing build instead: step 4
only, against the host its manifest names, loaded again)

1-3. build exactly as `python -m gpu_layers build` does (`gpu_layers.build.splice_host`): compile
   the named machine for the host's layer budgets (`gpu_layers.craft.machines`; an unknown name or
   a machine that does not fit is an error, nothing falls back to another machine), load the host
   (`gpu_layers.hosts.load_host`) in `--dtype` (float32 by default: measurement), splice, the text
   flag sized from the host's residual measured on the built-in calibration text
   (`gpu_layers.splice.size_text_flag`), written in place into the checkpoint's shards (to `--out`
   or a temporary directory), then SAVE the rest (`gpu_layers.build.save_build`: configs,
   tokenizer files, manifest) and RELOAD it with stock `AutoModelForCausalLM.from_pretrained` (no
   custom code); the spliced model is dropped before the reload (the host is kept: it is the
   reference). On the CPU, from_pretrained maps float32 shards rather than copying them, so a
   checkpoint bigger than memory (the tiny-2b-layers host with `core`: about 36 GB) is measured
   with the page cache holding what the forward pass reads;
4. measure on the reloaded model, every position of the tokenized text.

Definition (per position t of the tokenized text, every position counted):

    P_t = softmax(original logits)            over the host vocabulary V_host
    Q_t = softmax(spliced logits)             over the full vocabulary V_host + V_machine
    KL_t = sum_{i in V_host} P_t(i) * (log P_t(i) - log Q_t(i))

i.e. the KL divergence between the original distribution extended with probability 0 on the
machine tokens and the spliced model's full distribution. The machine tokens' mass m_t =
sum_{j in V_machine} Q_t(j) is counted through Q's normalisation: KL_t = KL(P_t || Q_t restricted
to V_host and renormalised) - log(1 - m_t), so any mass leaking to machine tokens shows up in KL.
Both log-softmaxes are taken in float64 from the models' logits (cast up from the model dtype).

Reported: mean_kl and max_kl over positions, max_machine_mass (max_t m_t, float64),
max_machine_mass_fp32 (the same from a float32 softmax: what a user sampling in fp32 sees),
max_abs_logit_diff (max over positions and host tokens of |original - spliced| logit), tokens,
dtype, and the splice's text-flag sizing.
"""
from __future__ import annotations

import gc
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from gpu_layers.errors import QwenGPUError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@torch.no_grad()
def final_hidden(model, ids: torch.Tensor) -> torch.Tensor:
    """Last hidden state (after the final norm), shape (T, H); the logits are lm_head of it."""
    return model.model(input_ids=ids[None], use_cache=False).last_hidden_state[0]


@torch.no_grad()
def kl_stats(original, spliced, ids, chunk: int = 128) -> dict:
    """Statistics above for one token sequence `ids` (1-D, host token ids)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    Vh = original.config.vocab_size
    if spliced.config.vocab_size < Vh:
        raise QwenGPUError("spliced vocabulary is smaller than the host's")
    if int(ids.max()) >= Vh:
        raise QwenGPUError("text token id outside the host vocabulary")
    ho = final_hidden(original, ids)
    hs = final_hidden(spliced, ids)
    kls, masses, masses32, maxdiff = [], [], [], 0.0
    for s in range(0, ids.numel(), chunk):
        l32 = spliced.lm_head(hs[s:s + chunk]).float()
        masses32.append(l32.softmax(-1)[:, Vh:].sum(-1) if l32.shape[1] > Vh else torch.zeros(l32.shape[0]))
        lo = original.lm_head(ho[s:s + chunk]).double()
        ls = l32.double()
        del l32
        lse_o = torch.logsumexp(lo, -1, keepdim=True)
        lse_s = torch.logsumexp(ls, -1, keepdim=True)          # over the full spliced vocabulary
        if ls.shape[1] > Vh:
            masses.append((torch.logsumexp(ls[:, Vh:], -1, keepdim=True) - lse_s).exp()[:, 0])
        else:
            masses.append(torch.zeros(lo.shape[0], dtype=torch.float64))
        d = ls[:, :Vh].sub_(lo).neg_()                         # lo - ls over the host vocabulary
        maxdiff = max(maxdiff, float(d.abs().max()))
        p = lo.sub_(lse_o).exp_()                              # P (in place of lo)
        # sum_i P_i (log P_i - log Q_i) = sum_i P_i (lo_i - ls_i) - (lse_o - lse_s) sum_i P_i
        kls.append(((p * d).sum(-1, keepdim=True) - (lse_o - lse_s) * p.sum(-1, keepdim=True))[:, 0])
        del lo, ls, d, p
    kl = torch.cat(kls)
    return {
        "mean_kl": float(kl.mean()),
        "max_kl": float(kl.max()),
        "max_machine_mass": float(torch.cat(masses).max()),
        "max_machine_mass_fp32": float(torch.cat(masses32).max()),
        "max_abs_logit_diff": maxdiff,
        "tokens": int(ids.numel()),
    }


def run(host: str, text: str, machine: str, dtype: str = "float32", max_tokens: int = 4096,
        out: str | None = None) -> dict:
    """Build (gpu_layers.build.splice_host, keeping the host), save (gpu_layers.build.save_build:
    the same files `python -m gpu_layers build` writes), reload (stock transformers) and measure;
    returns the statistics and the setup."""
    from gpu_layers.build import check_out_dir, save_build, splice_host
    from gpu_layers.hosts import host_tokenizer
    from gpu_layers.splice import load_spliced

    if dtype not in DTYPES:
        raise QwenGPUError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    tdtype = DTYPES[dtype]
    ids = host_tokenizer(host).encode(text)[:max_tokens]
    if len(ids) < 2:
        raise QwenGPUError("the text has fewer than 2 tokens")
    with tempfile.TemporaryDirectory(prefix="qwengpu-kl-") as tmp:
        path = Path(tmp)
        if out:
            path = check_out_dir(out, force=True)       # new, empty, or a previous build: replaced
            if path.is_dir():
                shutil.rmtree(path)
        built = splice_host(host, machine, dtype=dtype, keep_host=True, out_dir=path)
        original, info = built.host, built.spliced.splice_info
        save_build(built, path)
        built.spliced = None
        gc.collect()
        reloaded = load_spliced(path, dtype=tdtype)  # stock AutoModelForCausalLM.from_pretrained
        if reloaded.splice_info is None or reloaded.splice_info.token_names != info.token_names:
            raise QwenGPUError(f"{path} does not hold the splice just saved")
        stats = kl_stats(original, reloaded, ids)
        stats["loaded_class"] = type(reloaded).__name__
        del reloaded
    return _with_setup(stats, host, dtype, built.description, str(out) if out else None, info)


def run_on_checkpoint(checkpoint, text: str, max_tokens: int = 4096) -> dict:
    """Measure a checkpoint `python -m gpu_layers build` wrote, against its host (named in its
    manifest and loaded again: a built-in host is the same seeded draw), in the build's dtype."""
    from gpu_layers.build import read_manifest
    from gpu_layers.hosts import host_tokenizer, load_host
    from gpu_layers.splice import load_spliced

    man = read_manifest(checkpoint)
    host, dtype = man["host"], man["dtype"]
    ids = host_tokenizer(host).encode(text)[:max_tokens]
    if len(ids) < 2:
        raise QwenGPUError("the text has fewer than 2 tokens")
    original = load_host(host, dtype=DTYPES[dtype])
    reloaded = load_spliced(checkpoint)              # stock AutoModelForCausalLM.from_pretrained
    info = reloaded.splice_info
    if info is None or info.token_names != man["token_names"]:
        raise QwenGPUError(f"{checkpoint}: its splice json does not match its manifest")
    stats = kl_stats(original, reloaded, ids)
    stats["loaded_class"] = type(reloaded).__name__
    desc = (f"{man['machine']}: {man['machine_description']}; {info.n_compiled_layers} compiled layers, "
            f"W={info.machine_width}, {info.machine_vocab} machine tokens")
    return _with_setup(stats, host, dtype, desc, str(checkpoint), info)


def _with_setup(stats: dict, host: str, dtype: str, machine: str, checkpoint, info) -> dict:
    stats.update({
        "host": host, "dtype": dtype, "machine": machine, "checkpoint": checkpoint,
        "machine_width": info.machine_width, "machine_vocab": info.machine_vocab,
        "compiled_layers": info.n_compiled_layers, "flag_location": info.flag_location,
        "flag_value": info.flag_value, "suppression": info.suppression, "norm_mode": info.norm_mode,
        "residual": info.residual,
    })
    return stats


def format_table(stats: dict) -> str:
    r = stats.get("residual") or {}
    rows = [("host", stats["host"]), ("dtype", stats["dtype"]), ("machine", stats["machine"]),
            ("checkpoint", (stats["checkpoint"] or "temporary") + f", reloaded as {stats['loaded_class']}"),
            ("tokens", stats["tokens"]),
            ("mean KL(original||spliced)", f"{stats['mean_kl']:.3e}"),
            ("max KL", f"{stats['max_kl']:.3e}"),
            ("max machine-token mass (float64)", f"{stats['max_machine_mass']:.3e}"),
            ("max machine-token mass (fp32)", f"{stats['max_machine_mass_fp32']:.3e}"),
            ("max |logit diff| (host vocab)", f"{stats['max_abs_logit_diff']:.3e}"),
            ("text flag", f"{stats['flag_location']}, value {stats['flag_value']:.3e}, "
                          f"suppression {stats['suppression']:.3e}"),
            ("host residual (calibration)", f"min rms {r.get('min_rms', float('nan')):.3e}, final rms max "
                                            f"{r.get('max_final_rms', float('nan')):.3e}")]
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def main(args) -> int:
    path = Path(args.text)
    if not path.is_file():
        raise FileNotFoundError(f"no text file {args.text}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise QwenGPUError(f"{args.text} is not UTF-8 text: {e}") from e
    if args.max_tokens < 2:
        raise QwenGPUError("--max-tokens must be at least 2")
    if args.checkpoint:
        if args.out:
            raise QwenGPUError("--out writes a new build; --checkpoint measures an existing one: give one of them")
        stats = run_on_checkpoint(args.checkpoint, text, max_tokens=args.max_tokens)
    elif not (args.host and args.machine):
        raise QwenGPUError("give --host and --machine (build, then measure), or --checkpoint DIR (measure a build)")
    else:
        stats = run(args.host, text, args.machine, dtype=args.dtype, max_tokens=args.max_tokens, out=args.out)
    print(json.dumps(stats) if args.json else format_table(stats))
    sys.stdout.flush()
    return 0
