"""KL(original || spliced) on real text: does the spliced checkpoint still talk exactly like its host?

Definition (per position t of the tokenized text, every position counted):

    P_t = softmax(original logits)            over the host vocabulary V_host
    Q_t = softmax(spliced logits)             over the full vocabulary V_host + V_machine
    KL_t = sum_{i in V_host} P_t(i) * (log P_t(i) - log Q_t(i))

i.e. the KL divergence between the original distribution extended with probability 0 on the
machine tokens and the spliced model's full distribution. The machine tokens' mass m_t =
sum_{j in V_machine} Q_t(j) is counted through Q's normalisation: KL_t = KL(P_t || Q_t restricted
to V_host and renormalised) - log(1 - m_t), so any mass leaking to machine tokens shows up in KL.
Both log-softmaxes are taken in float64 from the models' logits (cast up from the model dtype).

Reported: mean_kl and max_kl over positions, max_abs_logit_diff (max over positions and host
tokens of |original - spliced| logit), max_machine_mass (max_t m_t), positions.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from gpu_layers.errors import QwenGPUError


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
    kls, masses, maxdiff = [], [], 0.0
    for s in range(0, ids.numel(), chunk):
        lo = original.lm_head(ho[s:s + chunk]).double()
        ls = spliced.lm_head(hs[s:s + chunk]).double()
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
    mass = torch.cat(masses)
    return {
        "mean_kl": float(kl.mean()),
        "max_kl": float(kl.max()),
        "max_abs_logit_diff": maxdiff,
        "max_machine_mass": float(mass.max()),
        "positions": int(ids.numel()),
    }


def demo_machine(host_cfg, prefer_compiler: bool = True):
    """(CompiledMachine, description): the layer compiler's demo circuit (gpu_layers.craft.demo_regfile,
    compiled for this host's layer budgets) when it is available and compiles, else the hand-built
    memory layer of gpu_layers.splice.memory_machine."""
    note = ""
    if prefer_compiler:
        try:
            from gpu_layers.craft.demo_regfile import build_regfile

            m = build_regfile(host_cfg).compiled.machine
            return m, (f"compiler demo circuit regfile4x4x32 (gpu_layers.craft.demo_regfile): "
                       f"{len(m.layers)} compiled layers, W={m.width}, {m.vocab_size} machine tokens")
        except Exception as e:  # not there yet / does not fit this host: say so, use the hand-built one
            note = f" (compiler demo unavailable: {type(e).__name__}: {e})"[:300]
    from gpu_layers.splice import memory_machine

    m = memory_machine(host_cfg)
    return m, (f"hand-built machine: 1 compiled layer, dual-rail DeltaNet memory (4 slots x 4 bits) + "
               f"re-digitising MLP, W={m.width}, {m.vocab_size} machine tokens (gpu_layers.splice.memory_machine)"
               + note)


def run(host: str, text: str, max_tokens: int = 4096, flag_value: float = 1e-3) -> dict:
    from gpu_layers.hosts import host_tokenizer, load_host
    from gpu_layers.splice import splice

    dtype = torch.float32 if host == "tiny" else torch.bfloat16
    original = load_host(host, dtype=dtype)
    tok = host_tokenizer(host)
    ids = tok.encode(text)[:max_tokens]
    if len(ids) < 2:
        raise QwenGPUError("the text has fewer than 2 tokens")
    machine, desc = demo_machine(original.config)
    spliced = splice(original, machine, flag_value=flag_value)
    stats = kl_stats(original, spliced, ids)
    info = spliced.splice_info
    stats.update({"host": host, "dtype": str(dtype).replace("torch.", ""), "machine": desc,
                  "machine_width": info.machine_width, "machine_vocab": info.machine_vocab,
                  "compiled_layers": info.n_compiled_layers, "flag_location": info.flag_location,
                  "flag_value": flag_value, "norm_mode": info.norm_mode})
    return stats


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
    stats = run(args.host, text, max_tokens=args.max_tokens)
    if args.json:
        print(json.dumps(stats))
    else:
        rows = [("host", stats["host"]), ("dtype", stats["dtype"]), ("machine", stats["machine"]),
                ("positions", stats["positions"]), ("mean KL(original||spliced)", f"{stats['mean_kl']:.3e}"),
                ("max KL", f"{stats['max_kl']:.3e}"), ("max |logit diff| (host vocab)", f"{stats['max_abs_logit_diff']:.3e}"),
                ("max machine-token probability", f"{stats['max_machine_mass']:.3e}"),
                ("text flag", f"{stats['flag_location']}, value {stats['flag_value']:g}")]
        w = max(len(k) for k, _ in rows)
        for k, v in rows:
            print(f"{k:<{w}}  {v}")
    sys.stdout.flush()
    return 0
