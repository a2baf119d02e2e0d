"""The machine-only stock `Qwen3_5ForCausalLM` of hidden size W around a `CompiledMachine`: the one
builder used by tests, benchmarks, demo circuits and as the splice's reference.

Layers: the compiled `linear_attention` layers, then one inert `full_attention` layer with all-zero
weights (it adds exact zeros: o_proj and the MLP are zero), because stock `generate` refuses a model
whose layers are all linear attention (DESIGN section 3). Embedding rows = the machine tokens; LM
head = their unembed rows. Every parameter is allocated once in the target dtype and every
compiled value rounded to it once.

The cache keyword is `cache=` (transformers 5.24: `past_key_values` is deprecated, to be removed in
5.40 for the model's forward and 6.0 for `generate`; outputs carry it as `.cache`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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


@torch.no_grad()
def build_machine_model(m: CompiledMachine, dtype=torch.float32, device="cpu") -> Qwen3_5ForCausalLM:
    from gpu_layers.hosts import empty_model

    m.check()
    model = empty_model(machine_config(m), dtype=dtype, device=device)
    params = dict(model.named_parameters())
    for p in params.values():
        p.zero_()
    for i, layer in enumerate(m.layers):
        for k, v in layer.items():
            key = f"model.layers.{i}.{k}"
            if key not in params:
                raise ValueError(f"unexpected key {key}")
            if params[key].shape != v.shape:
                raise ValueError(f"{key}: compiled {tuple(v.shape)} vs model {tuple(params[key].shape)}")
            params[key].copy_(v)
    params["model.embed_tokens.weight"].copy_(m.embed)
    params["lm_head.weight"].copy_(m.unembed)
    params["model.norm.weight"].copy_(m.final_norm)
    model.generation_config.pad_token_id = 0
    return model


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
        r = model.model(inputs_embeds=x[:, t:t + 1], cache=cache, use_cache=True)
        outs.append(r.last_hidden_state)
    return torch.cat(outs, 1)


def as_inputs(rows: np.ndarray, model) -> torch.Tensor:
    p = next(model.parameters())
    return torch.tensor(rows, dtype=torch.float32).to(device=p.device, dtype=p.dtype)


@dataclass
class CompiledCircuit:
    """A compiled circuit and its machine vocabulary, as every circuit module hands it out: the
    machine-only stock model, the fast executor, token names <-> ids. Subclasses name themselves
    (`label`) and the error an unknown token name raises (`token_error`)."""

    compiled: object                       # gpu_layers.craft.assemble.Compiled
    token_ids: dict
    label: ClassVar[str] = "this circuit"
    token_error: ClassVar[type] = KeyError

    def model(self, dtype=torch.float32, device="cpu") -> Qwen3_5ForCausalLM:
        return build_machine_model(self.compiled.machine, dtype=dtype, device=device)

    def fast(self):
        """The compact exact executor of the compiled layers (gpu_layers.craft.fast)."""
        from .fast import FastMachine

        return FastMachine(self.compiled.machine)

    def encode(self, names: list[str]) -> list[int]:
        try:
            return [self.token_ids[n] for n in names]
        except KeyError as e:
            raise self.token_error(f"{e.args[0]!r} is not a token of {self.label}") from None

    def decode(self, ids) -> list[str]:
        names = self.compiled.machine.token_names
        return [names[int(i)] for i in ids]
