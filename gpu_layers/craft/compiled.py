"""The contract between the layer compiler and the splice.

A `CompiledMachine` is everything the compiler produces: the tensors of some decoder layers at
machine width W (they read and write only the W machine dims), the machine vocabulary's input and
output rows, and the final-norm weights of the machine dims. The splice places it in front of a host
Qwen3.5 model; a machine-only model (tests, benchmarks) wraps it alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

# Keys of one linear-attention decoder layer, relative to `model.layers.{i}.`, as Qwen3_5ForCausalLM names them.
LAYER_KEYS = (
    "input_layernorm.weight",
    "linear_attn.in_proj_qkv.weight",
    "linear_attn.conv1d.weight",
    "linear_attn.in_proj_z.weight",
    "linear_attn.in_proj_b.weight",
    "linear_attn.in_proj_a.weight",
    "linear_attn.dt_bias",
    "linear_attn.A_log",
    "linear_attn.norm.weight",
    "linear_attn.out_proj.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)


@dataclass
class CompiledMachine:
    """Compiled layers + machine vocabulary, at machine width `width`.

    Norm weights are stored for a residual of exactly `width` dims (the machine-only model). A model
    whose hidden size is larger (the splice) rescales the machine dims' norm weights by
    sqrt(width / hidden) so every RMSNorm still returns the compile-time scale.
    """

    width: int                                  # W: machine residual dims
    layers: list[dict[str, torch.Tensor]]       # one dict per compiled layer, keys from LAYER_KEYS
    embed: torch.Tensor                         # (V_machine, W) input rows of the machine tokens
    unembed: torch.Tensor                       # (V_machine, W) LM-head rows of the machine tokens
    final_norm: torch.Tensor                    # (W,) final RMSNorm weights of the machine dims
    token_names: list[str]                      # V_machine readable names, e.g. "<m:op=add>"
    text_flag_dim: int | None = None            # a machine dim no compiled weight reads: the splice's text flag
    fields: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (start, stop) in [0, W)
    layer_shapes: dict = field(default_factory=dict)  # the Qwen3.5 text-config values the layers were built for

    @property
    def vocab_size(self) -> int:
        return self.embed.shape[0]

    def check(self) -> None:
        """Fail fast on an inconsistent machine (shapes, keys) before anything is spliced."""
        W = self.width
        if tuple(self.embed.shape) != tuple(self.unembed.shape) or self.embed.shape[1] != W:
            raise ValueError(f"embed {tuple(self.embed.shape)} / unembed {tuple(self.unembed.shape)} must be (V, {W})")
        if tuple(self.final_norm.shape) != (W,):
            raise ValueError(f"final_norm must be ({W},), got {tuple(self.final_norm.shape)}")
        if len(self.token_names) != self.vocab_size:
            raise ValueError("one name per machine token")
        self.check_layers()

    def check_layers(self) -> None:
        for i, layer in enumerate(self.layers):
            missing = set(LAYER_KEYS) - set(layer)
            if missing:
                raise ValueError(f"compiled layer {i} lacks {sorted(missing)}")
