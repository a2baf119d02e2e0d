"""A machine-only stock `Qwen3_5ForCausalLM` of hidden size W around a `CompiledMachine`.

Layers: the compiled `linear_attention` layers, then one inert `full_attention` layer with all-zero
weights (it adds exact zeros: o_proj and the MLP are zero), because stock `generate` refuses a model
whose layers are all linear attention. Embedding rows = the machine tokens; LM head = their unembed
rows. Used by tests, benchmarks and demo circuits.
"""
from __future__ import annotations

import numpy as np
import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
from transformers.cache_utils import DynamicCache

from .compiled import CompiledMachine


def machine_config(m: CompiledMachine) -> Qwen3_5TextConfig:
    s = m.layer_shapes
    n = len(m.layers)
    return Qwen3_5TextConfig(
        vocab_size=m.vocab_size, hidden_size=m.width, intermediate_size=s["intermediate_size"],
        num_hidden_layers=n + 1, num_attention_heads=1, num_key_value_heads=1, head_dim=8,
        linear_num_key_heads=s["linear_num_key_heads"], linear_num_value_heads=s["linear_num_value_heads"],
        linear_key_head_dim=s["linear_key_head_dim"], linear_value_head_dim=s["linear_value_head_dim"],
        linear_conv_kernel_dim=s["linear_conv_kernel_dim"], rms_norm_eps=s["rms_norm_eps"],
        layer_types=["linear_attention"] * n + ["full_attention"], tie_word_embeddings=False,
        pad_token_id=None, bos_token_id=None, eos_token_id=None)


def build_machine_model(m: CompiledMachine, dtype=torch.float32, device="cpu") -> Qwen3_5ForCausalLM:
    m.check()
    cfg = machine_config(m)
    model = Qwen3_5ForCausalLM(cfg).eval()
    sd = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    for i, layer in enumerate(m.layers):
        for k, v in layer.items():
            key = f"model.layers.{i}.{k}"
            if sd[key].shape != v.shape:
                raise ValueError(f"{key}: compiled {tuple(v.shape)} vs model {tuple(sd[key].shape)}")
            sd[key] = v.clone()
    sd["model.embed_tokens.weight"] = m.embed.clone()
    sd["lm_head.weight"] = m.unembed.clone()
    sd["model.norm.weight"] = m.final_norm.clone()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected:
        raise ValueError(f"unexpected keys {unexpected}")
    model.generation_config.pad_token_id = 0
    return model.to(device=device, dtype=dtype)


@torch.no_grad()
def run_prefill(model, x: torch.Tensor) -> torch.Tensor:
    """x (B, T, W) inputs_embeds -> final-normed hidden states (B, T, W), one chunked-path pass."""
    return model.model(inputs_embeds=x, use_cache=False).last_hidden_state


@torch.no_grad()
def run_decode(model, x: torch.Tensor) -> torch.Tensor:
    """Token-by-token decode with the cache (recurrent path): (B, T, W) -> (B, T, W)."""
    cache = DynamicCache(config=model.config)
    outs = []
    for t in range(x.shape[1]):
        r = model.model(inputs_embeds=x[:, t:t + 1], past_key_values=cache, use_cache=True)
        outs.append(r.last_hidden_state)
    return torch.cat(outs, 1)


def as_inputs(rows: np.ndarray, model) -> torch.Tensor:
    p = next(model.parameters())
    return torch.tensor(rows, dtype=torch.float32).to(device=p.device, dtype=p.dtype)
