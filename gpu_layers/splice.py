"""The splice: a host Qwen3.5 model + a CompiledMachine -> ONE stock Qwen3.5 checkpoint (DESIGN section 5).

Layout of the spliced model (hidden size H' = H + W):

* residual dims [0, H) are the host's, [H, H + W) the machine's; `machine.text_flag_dim` (a machine
  dim no compiled weight reads or writes) carries the text flag.
* layers: [flag layer?] + compiled layers (all `linear_attention`) + the host's layers, in that
  order in `layer_types`.
* host weights are zero-padded: every host projection reads and writes only host dims. Host
  RMSNorm gains are rescaled `(1 + w) * sqrt(H / H') - 1`; the host norms' gains on machine dims
  are -1 (gain 0), so host layers cannot see machine dims twice over.
* compiled weights are placed on the machine dims; their norm gains (stored for width W) are
  rescaled `(1 + w) * sqrt(W / H') - 1`; their gains on host dims are -1.
* norm_mode="scale_residual" (default; a fix to DESIGN section 5's recipe): the host part of the
  residual is also carried multiplied by sqrt(H'/H) (host embedding rows and host writers o_proj,
  out_proj, down_proj scaled) and the machine part by sqrt(H'/W) (machine embedding rows and
  compiled writers scaled). Then every whole-vector RMSNorm sees mean + eps exactly as in the
  original (gain rescaling alone leaves the shared eps acting as eps * H'/n). Measured on the tiny
  host, fp32, 384 tokens, mean KL (rescale_gains -> scale_residual): W=32: 1.8e-11 -> 1.5e-11;
  compiler demo W=799: 3.7e-10 -> 1.7e-11; host with embedding rms 0.02 (real-model-like small
  residual) and W=799: 2.4e-5 -> 8.1e-13. In bf16 both are at the bf16 noise floor (3e-3..5e-3 on
  the tiny host, 2e-5..5e-5 with the small-embedding host). Rows fed as inputs_embeds must carry the
  same scale: SpliceInfo.machine_residual_scale / host_residual_scale.
* vocabulary: host ids 0..V_host-1 unchanged; machine token k gets id V_host + k. Embedding rows:
  host rows zero on machine dims, machine rows zero on host dims.
* text flag: 2 * H MLP neurons, a pair per host dim i, gate = up = +x_i and gate = up = -x_i, so
  silu(v) v + silu(-v)(-v) = v^2 exactly in real arithmetic; summed over host dims of the
  normalised vector they give ~H' * d = flag_value on every ordinary token, and exactly 0 on a
  machine token (its host dims are exact zeros). They go into free neurons of compiled layer 0's
  MLP when it has 2H all-zero neurons, else into extra leading layers of our own (one when the
  host's intermediate size is >= 2H, as in every Qwen3.5 size). These are the only compiled weights
  reading host dims.
* LM head: untied (see below). Host rows = the host's LM head on host dims. Machine rows = the
  machine's unembed on machine dims and `-suppression` on the flag dim; the final norm's gain on
  the flag dim is 1/flag_value, so on ordinary text every machine logit is about
  -suppression / rms(final residual) (~-1e5 by default): machine-token probability underflows to
  exactly 0 in fp32, while on machine tokens the flag is exactly 0 and the machine logits are the
  machine's own.

Tied embeddings: Qwen3.5-2B ties its LM head to the embedding. A machine token's input row (its
fields) and output row (unembed + flag weight) differ, so the spliced checkpoint is untied
(`tie_word_embeddings=False`) and stores the LM head separately: an extra (V_host + V_machine) x H'
matrix, for the 2B 248,320 x (2048 + W) values, e.g. 1.52 GB in bf16 for W = 1024 (1.02 GB for the
host part alone). `estimate_spliced_bytes` computes the whole budget.

Memory (measured on this machine, bf16, peak resident memory during `splice`): the model is built
on the meta device and materialised part by part, host-derived parts first; with free_host=True
each host tensor is released right after its padded copy exists, so the peak is about the spliced
model's own size (a 1024-wide, 8-layer host with the real vocabulary: host 673 MB, spliced
1219 MB, peak rise during splice 558 MB with free_host vs 1223 MB without). For Qwen3.5-2B (host
text weights 3.5 GiB in bf16) with 45 compiled layers, W = 1024 and 1024 machine tokens the spliced
parameters take ~14.3 GiB (compiled layers are stored dense at the host's layer budgets: 7.6 GiB;
padded host layers 3.8; embedding and untied LM head 1.4 each), so building needs ~14.3 GiB with
free_host (~17.8 GiB without) plus the loader's one host copy before it.

Exactness (measured, see tests): pure machine context -> host dims exactly 0 after every layer and
host logits exactly 0; ordinary text -> machine dims exactly 0 except the flag, machine-token
probability exactly 0 (fp32 and bf16). The machine part is not bit-identical to the machine-only
model (padded matmuls and the scale round differently), so decoded fields and argmaxes agree and
magnitudes agree to ~1e-5. In bf16 the spliced host is not bit-identical to the bf16 host either;
its KL from the bf16 host is at the bf16 noise floor (tiny host: ~3e-3, vs 2.4e-3 between the
fp32 and bf16 host themselves).
Mixed contexts (text, then machine tokens): the host's full-attention layers average text values
into the host dims of machine positions (a zero query attends uniformly), so host logits there are
no longer 0 and the final norm's scale shrinks the machine logits; the compiled layers come first,
so the machine fields themselves are unchanged and the argmax among machine tokens is unchanged.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from gpu_layers.craft.compiled import LAYER_KEYS, CompiledMachine
from gpu_layers.errors import QwenGPUError
from gpu_layers.hosts import _fresh_rotary, empty_model

SPLICE_JSON = "qwengpu_splice.json"

_READS = ("linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight", "linear_attn.in_proj_b.weight",
          "linear_attn.in_proj_a.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
          "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")
_WRITES = ("linear_attn.out_proj.weight", "mlp.down_proj.weight", "self_attn.o_proj.weight")
_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight")


class SpliceError(QwenGPUError):
    """The machine cannot be spliced into this host (shapes, budgets, flag dim)."""


@dataclass
class SpliceInfo:
    """Where everything sits in a spliced model; saved next to the checkpoint as qwengpu_splice.json."""

    host_hidden: int
    machine_width: int
    host_vocab: int
    machine_vocab: int
    text_flag_dim: int               # absolute residual index of the text flag
    n_prefix_layers: int             # layers before the host's: [flag layer] + compiled
    n_compiled_layers: int
    flag_location: str               # "compiled_layer_0", "leading_layer" or "leading_layers"
    flag_value: float
    suppression: float
    norm_mode: str = "scale_residual"
    host_residual_scale: float = 1.0      # host part of the residual = original residual x this
    machine_residual_scale: float = 1.0   # machine part = machine-only residual x this
    token_names: list[str] = field(default_factory=list)

    @property
    def machine_offset(self) -> int:
        return self.host_hidden

    @property
    def first_compiled_layer(self) -> int:
        return self.n_prefix_layers - self.n_compiled_layers

    def token_id(self, name: str) -> int:
        return self.host_vocab + self.token_names.index(name)

    @property
    def token_ids(self) -> dict[str, int]:
        return {n: self.host_vocab + k for k, n in enumerate(self.token_names)}

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("token_names")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SpliceInfo":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

def expected_layer_shapes(cfg, width: int) -> dict[str, tuple]:
    """Shapes of one compiled linear-attention layer at machine width `width` for host config `cfg`."""
    kd = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    vd = cfg.linear_num_value_heads * cfg.linear_value_head_dim
    nv = cfg.linear_num_value_heads
    conv = 2 * kd + vd
    I = cfg.intermediate_size
    return {
        "input_layernorm.weight": (width,),
        "linear_attn.in_proj_qkv.weight": (conv, width),
        "linear_attn.conv1d.weight": (conv, 1, cfg.linear_conv_kernel_dim),
        "linear_attn.in_proj_z.weight": (vd, width),
        "linear_attn.in_proj_b.weight": (nv, width),
        "linear_attn.in_proj_a.weight": (nv, width),
        "linear_attn.dt_bias": (nv,),
        "linear_attn.A_log": (nv,),
        "linear_attn.norm.weight": (cfg.linear_value_head_dim,),
        "linear_attn.out_proj.weight": (width, vd),
        "post_attention_layernorm.weight": (width,),
        "mlp.gate_proj.weight": (I, width),
        "mlp.up_proj.weight": (I, width),
        "mlp.down_proj.weight": (width, I),
    }


def check_machine(machine: CompiledMachine, cfg) -> None:
    """Fail fast, listing every problem: shapes against the host's layer budgets, the flag dim."""
    machine.check()
    W = machine.width
    problems = []
    want = expected_layer_shapes(cfg, W)
    for i, layer in enumerate(machine.layers):
        for k in LAYER_KEYS:
            if tuple(layer[k].shape) != want[k]:
                problems.append(f"compiled layer {i}: {k} has shape {tuple(layer[k].shape)}, host budget needs {want[k]}")
    fd = machine.text_flag_dim
    if fd is None or not 0 <= fd < W:
        problems.append(f"text_flag_dim must be a machine dim in [0, {W}), got {fd}")
    elif not problems:
        for i, layer in enumerate(machine.layers):
            for k in _READS:
                if k in layer and layer[k][:, fd].abs().max() != 0:
                    problems.append(f"compiled layer {i}: {k} reads the text-flag dim {fd}")
            for k in _WRITES:
                if k in layer and layer[k][fd].abs().max() != 0:
                    problems.append(f"compiled layer {i}: {k} writes the text-flag dim {fd}")
        if machine.embed[:, fd].abs().max() != 0:
            problems.append(f"machine embed rows set the text-flag dim {fd}")
        if machine.unembed[:, fd].abs().max() != 0:
            problems.append(f"machine unembed rows read the text-flag dim {fd}")
    for k, v in (machine.layer_shapes or {}).items():
        hv = getattr(cfg, k, None)
        if hv is not None and not isinstance(v, (dict, list)) and hv != v:
            problems.append(f"machine built for {k}={v}, host has {k}={hv}")
    if problems:
        raise SpliceError("machine does not fit the host:" + "".join("\n  " + p for p in problems))


def free_neurons(layer: dict[str, torch.Tensor]) -> list[int]:
    """MLP neurons of a compiled layer that are entirely unused (gate row, up row, down column all 0)."""
    g, u, d = layer["mlp.gate_proj.weight"], layer["mlp.up_proj.weight"], layer["mlp.down_proj.weight"]
    used = (g != 0).any(1) | (u != 0).any(1) | (d != 0).any(0)
    return [int(i) for i in torch.nonzero(~used).flatten()]


# ---------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------

def _rescaled(w: torch.Tensor, n_from: int, n_to: int) -> torch.Tensor:
    """Zero-centred RMSNorm gains for a vector stored for width n_from, used in a width n_to residual."""
    return ((1.0 + w.double()) * math.sqrt(n_from / n_to) - 1.0)


def spliced_config(host_cfg, machine: CompiledMachine, n_prefix: int):
    cfg = copy.deepcopy(host_cfg)
    cfg.hidden_size = host_cfg.hidden_size + machine.width
    cfg.vocab_size = host_cfg.vocab_size + machine.vocab_size
    cfg.num_hidden_layers = n_prefix + host_cfg.num_hidden_layers
    cfg.layer_types = ["linear_attention"] * n_prefix + list(host_cfg.layer_types)
    cfg.tie_word_embeddings = False
    return cfg


@torch.no_grad()
def splice(host_model, machine: CompiledMachine, *, flag_value: float = 1e-3, suppression: float = 1e5,
           flag_layer: str = "auto", dtype=None, free_host: bool = False, norm_mode: str = "scale_residual"):
    """Host + machine -> one Qwen3_5ForCausalLM (stock class). Returns the model; `model.splice_info`
    (a SpliceInfo, also stored in `model.config.qwengpu`) maps machine token names to ids.

    flag_layer: "auto" (compiled layer 0's free neurons when it has 2H of them, else a leading
    layer), "leading" (always an extra leading layer), "compiled" (require compiled layer 0).
    dtype: of the spliced model (default: the host's). free_host: release each host tensor as soon
    as it is copied (the host model is unusable afterwards), so the peak stays near the spliced
    model's own size instead of host + spliced.
    norm_mode: how whole-vector RMSNorms over H' reproduce the norms over n = H (host) or W
    (machine). Both set gains (1 + w) sqrt(n / H') - 1. "scale_residual" (default) also multiplies
    that part of the residual by s = sqrt(H'/n): embedding rows and every writer (o_proj, out_proj,
    down_proj) by s. Then mean over H' of (s x)^2 + eps = mean over n of x^2 + eps exactly, and
    RMSNorm_H'(s x) * (1 + w) / s = RMSNorm_n(x) * (1 + w): exact in real arithmetic, eps
    included. "rescale_gains" (DESIGN section 5's recipe) leaves the residual as is; the shared eps
    then acts as eps * H'/n, a relative error eps (H'/n - 1) / (2 mean(x^2)) per norm that grows
    with the machine's width and for hosts with a small residual (measured in the module doc).
    """
    if norm_mode not in ("scale_residual", "rescale_gains"):
        raise SpliceError(f"norm_mode must be scale_residual or rescale_gains, not {norm_mode!r}")
    hcfg = host_model.config
    check_machine(machine, hcfg)
    H, W = hcfg.hidden_size, machine.width
    Hp = H + W
    Vh, Vm = hcfg.vocab_size, machine.vocab_size
    dtype = dtype or host_model.model.embed_tokens.weight.dtype
    n_c = len(machine.layers)
    if flag_layer not in ("auto", "leading", "compiled"):
        raise SpliceError(f"flag_layer must be auto, leading or compiled, not {flag_layer!r}")
    free = free_neurons(machine.layers[0]) if n_c else []
    in_compiled = flag_layer != "leading" and len(free) >= 2 * H
    if flag_layer == "compiled" and not in_compiled:
        raise SpliceError(f"compiled layer 0 has {len(free)} free MLP neurons, the text flag needs {2 * H}")
    I = hcfg.intermediate_size
    n_lead = 0 if in_compiled else -(-2 * H // I)  # leading flag layers: 2H neurons, I per layer
    n_prefix = n_lead + n_c
    cfg = spliced_config(hcfg, machine, n_prefix)
    # Built on the meta device and materialised part by part, host-derived parts first, so that
    # with free_host=True each host tensor is released as soon as its padded copy exists: the peak
    # stays near the spliced model's own size instead of host + spliced.
    from transformers import Qwen3_5ForCausalLM

    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(cfg)
    model = model.to(dtype)

    def materialize(module):
        module.to_empty(device="cpu")
        for p in module.parameters():
            p.zero_()
        return module

    fd = H + machine.text_flag_dim
    M = slice(H, Hp)
    scale = norm_mode == "scale_residual"
    s_h = math.sqrt(Hp / H) if scale else 1.0   # residual scale of the host part
    s_m = math.sqrt(Hp / W) if scale else 1.0   # and of the machine part

    def gains(w, n):  # RMSNorm over H' of (s x) = s * RMSNorm over n of x: gains carry 1/s
        return _rescaled(w, n, Hp).to(dtype)

    def put_scaled(dst, src, k):  # in place: no full-size temporaries (the 2B embedding is 1 GB)
        dst.copy_(src)
        if k != 1.0:
            dst.mul_(k)

    # -- host layers -----------------------------------------------------------------------------
    for i, hl in enumerate(host_model.model.layers):
        dst = dict(materialize(model.model.layers[n_prefix + i]).named_parameters())
        for k, src in hl.named_parameters():
            p = dst[k]
            if k in _NORMS:
                p[:H] = gains(src, H)
                p[H:] = -1.0
            elif k in _READS:
                p[:, :H] = src
            elif k in _WRITES:
                put_scaled(p[:H], src, s_h)
            else:
                p.copy_(src)
        if free_host:
            _release(hl)

    # -- embeddings, final norm, LM head -----------------------------------------------------------
    # LM head first: with a tied host its rows are the embedding, which is then released before
    # the (scaled) spliced embedding is materialised from the LM head's copy.
    lm = materialize(model.lm_head).weight
    lm[:Vh, :H] = host_model.lm_head.weight
    tied = host_model.lm_head.weight is host_model.model.embed_tokens.weight
    if free_host and tied:
        _release(host_model.model.embed_tokens)
    emb = materialize(model.model.embed_tokens).weight
    put_scaled(emb[:Vh, :H], lm[:Vh, :H] if tied else host_model.model.embed_tokens.weight, s_h)
    if free_host and not tied:
        _release(host_model.model.embed_tokens)
    put_scaled(emb[Vh:, M], machine.embed, s_m)
    lm[Vh:, M] = machine.unembed.to(dtype)
    lm[Vh:, fd] = -suppression
    fn = materialize(model.model.norm).weight
    fn[:H] = gains(host_model.model.norm.weight, H)
    fn[M] = gains(machine.final_norm, W)
    fn[fd] = 1.0 / flag_value - 1.0
    if free_host:
        _release(host_model)

    # -- compiled layers ------------------------------------------------------------------------
    for j, layer in enumerate(machine.layers):
        params = dict(materialize(model.model.layers[n_lead + j]).named_parameters())
        for k in LAYER_KEYS:
            src, p = layer[k].to(torch.float64), params[k]
            if k in _NORMS:
                p[:H] = -1.0
                p[M] = gains(layer[k], W)
            elif k in _READS:
                p[:, M] = src.to(dtype)
            elif k in _WRITES:
                put_scaled(p[M], src, s_m)
            else:
                p.copy_(src.to(dtype))
    # -- text flag --------------------------------------------------------------------------------
    d = flag_value / Hp  # sum over host dims of xhat_i^2 is ~H' on ordinary tokens
    if n_lead:
        per = I // 2                       # host dims handled per leading layer
        groups = [(model.model.layers[k], list(range(2 * per)), range(k * per, min(H, (k + 1) * per)))
                  for k in range(n_lead)]
        for lead, _, _ in groups:
            materialize(lead)
            lead.input_layernorm.weight.fill_(-1.0)
            lead.post_attention_layernorm.weight.fill_(-1.0)
            lead.linear_attn.norm.weight.fill_(1.0)
    else:
        groups = [(model.model.layers[0], free, range(H))]
    for flag_layer_mod, neurons, dims in groups:
        flag_layer_mod.post_attention_layernorm.weight[:H] = 0.0  # gain 1 on host dims for the flag MLP
        mlp = flag_layer_mod.mlp
        for n, i in enumerate(dims):
            a, b = neurons[2 * n], neurons[2 * n + 1]
            mlp.gate_proj.weight[a, i] = 1.0
            mlp.up_proj.weight[a, i] = 1.0
            mlp.gate_proj.weight[b, i] = -1.0
            mlp.up_proj.weight[b, i] = -1.0
            mlp.down_proj.weight[fd, a] = d
            mlp.down_proj.weight[fd, b] = d
    _fresh_rotary(model)
    left = [n for n, p in model.named_parameters() if p.is_meta]
    assert not left, f"splice left parameters unset: {left[:5]}"

    info = SpliceInfo(host_hidden=H, machine_width=W, host_vocab=Vh, machine_vocab=Vm, text_flag_dim=fd,
                      n_prefix_layers=n_prefix, n_compiled_layers=n_c,
                      flag_location="compiled_layer_0" if in_compiled else ("leading_layer" if n_lead == 1 else "leading_layers"),
                      flag_value=flag_value, suppression=suppression, norm_mode=norm_mode,
                      host_residual_scale=s_h, machine_residual_scale=s_m, token_names=list(machine.token_names))
    model.splice_info = info
    model.config.qwengpu = info.summary()
    return model.eval()


def _release(module) -> None:
    for p in module.parameters():
        p.data = torch.empty(0, dtype=p.dtype)


def save_spliced(model, path, tokenizer=None) -> Path:
    """save_pretrained (safetensors) + qwengpu_splice.json (names and ids of the machine tokens)."""
    path = Path(path)
    model.save_pretrained(str(path))
    info: SpliceInfo = model.splice_info
    d = info.summary()
    d["token_names"] = info.token_names
    d["token_ids"] = info.token_ids
    (path / SPLICE_JSON).write_text(json.dumps(d, indent=1))
    if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(str(path))
    return path


def load_spliced(path, dtype=None):
    """Stock AutoModelForCausalLM.from_pretrained (no custom code) + the saved SpliceInfo."""
    from transformers import AutoModelForCausalLM

    kw = {"dtype": dtype} if dtype is not None else {}
    model = AutoModelForCausalLM.from_pretrained(str(path), **kw).eval()
    info_file = Path(path) / SPLICE_JSON
    model.splice_info = SpliceInfo.from_dict(json.loads(info_file.read_text())) if info_file.exists() else None
    return model


# ---------------------------------------------------------------------------------------------
# The machine alone (reference for exactness tests and benchmarks)
# ---------------------------------------------------------------------------------------------

@torch.no_grad()
def machine_only_model(machine: CompiledMachine, host_cfg, dtype=torch.float32):
    """The compiled layers alone at width W, vocabulary = machine tokens, plus one inert (all-zero)
    full-attention layer at the end so stock `generate` accepts it (DESIGN section 3)."""
    check_machine(machine, host_cfg)
    cfg = copy.deepcopy(host_cfg)
    n = len(machine.layers)
    cfg.hidden_size = machine.width
    cfg.vocab_size = machine.vocab_size
    cfg.num_hidden_layers = n + 1
    cfg.layer_types = ["linear_attention"] * n + ["full_attention"]
    cfg.tie_word_embeddings = False
    model = empty_model(cfg, dtype=dtype)
    for p in model.parameters():
        p.zero_()
    for j, layer in enumerate(machine.layers):
        params = dict(model.model.layers[j].named_parameters())
        for k in LAYER_KEYS:
            params[k].copy_(layer[k].to(dtype))
    last = model.model.layers[n]
    last.input_layernorm.weight.fill_(-1.0)
    last.post_attention_layernorm.weight.fill_(-1.0)
    model.model.embed_tokens.weight.copy_(machine.embed.to(dtype))
    model.model.norm.weight.copy_(machine.final_norm.to(dtype))
    model.lm_head.weight.copy_(machine.unembed.to(dtype))
    return model.eval()


# ---------------------------------------------------------------------------------------------
# A hand-built machine: one dual-rail DeltaNet memory layer (the probe's design), for tests and for
# `kl` until the layer compiler's demo circuit is available.
# ---------------------------------------------------------------------------------------------

def memory_machine(host_cfg, slots: int = 4, bits: int = 4, width: int = 32) -> CompiledMachine:
    """A `slots` x `bits` memory in linear-attention head 0 of one compiled layer.

    Tokens: "<m:w{s}={v}>" writes value v to slot s; "<m:r{s}>" reads slot s (the read lands in field
    `out` as +-1-ish dual-rail differences in the same token); "<m:v={v}>" are output tokens whose
    unembed rows match the sign pattern of `out` (the next-token argmax after a read is the value
    read). The MLP re-digitises `out` into `dig` (silu gate, reads only machine dims). The last dim
    is the text-flag dim (nothing reads or writes it).
    """
    S, B = slots, bits
    f = {}
    pos = 0
    for name, n in (("one", 1), ("wa", S), ("ra", S), ("val", B), ("we", 1), ("out", B), ("dig", B)):
        f[name] = (pos, pos + n)
        pos += n
    if pos + 1 > width:
        raise SpliceError(f"memory_machine needs width >= {pos + 1}")
    if S > host_cfg.linear_key_head_dim or 2 * B > host_cfg.linear_value_head_dim:
        raise SpliceError("memory_machine: slots/bits exceed one linear-attention head")
    W = width
    flag = W - 1
    kd = host_cfg.linear_num_key_heads * host_cfg.linear_key_head_dim
    vd = host_cfg.linear_num_value_heads * host_cfg.linear_value_head_dim
    nv = host_cfg.linear_num_value_heads
    I = host_cfg.intermediate_size
    shapes = expected_layer_shapes(host_cfg, W)
    L = {k: torch.zeros(s) for k, s in shapes.items()}
    one, wa, ra, val, we, out, dig = (f[k][0] for k in ("one", "wa", "ra", "val", "we", "out", "dig"))
    G = 30.0
    qkv = L["linear_attn.in_proj_qkv.weight"]
    for j in range(S):
        qkv[j, ra + j] = G                   # q (head 0)
        qkv[kd + j, wa + j] = G              # k (head 0)
    for i in range(B):
        qkv[2 * kd + 2 * i, val + i] = G     # v rails (head 0): bit = +1
        qkv[2 * kd + 2 * i + 1, val + i] = -G  # bit = -1
    L["linear_attn.conv1d.weight"][:, 0, -1] = 1.0
    L["linear_attn.in_proj_b.weight"][0, we] = 200.0
    L["linear_attn.in_proj_b.weight"][0, one] = -25.0
    L["linear_attn.dt_bias"].fill_(-100.0)      # gate held open
    L["linear_attn.in_proj_z.weight"][: host_cfg.linear_value_head_dim, one] = 2.0
    L["linear_attn.norm.weight"].fill_(1.0)
    for i in range(B):
        L["linear_attn.out_proj.weight"][out + i, 2 * i] = 0.05
        L["linear_attn.out_proj.weight"][out + i, 2 * i + 1] = -0.05
    for i in range(B):  # dig_i = silu(4 out_i) * one
        L["mlp.gate_proj.weight"][i, out + i] = 4.0
        L["mlp.up_proj.weight"][i, one] = 1.0
        L["mlp.down_proj.weight"][dig + i, i] = 0.5
    names, emb, unemb = [], [], []

    def row(**fields):
        r = torch.zeros(W)
        r[one] = 4.0
        for k, v in fields.items():
            if k == "wa" or k == "ra":
                r[f[k][0] + v] = 1.0
            elif k == "val":
                for i in range(B):
                    r[val + i] = 1.0 if (v >> i) & 1 else -1.0
            elif k == "we":
                r[we] = 1.0
        return r

    for s in range(S):
        for v in range(2 ** B):
            names.append(f"<m:w{s}={v}>")
            emb.append(row(wa=s, val=v, we=1))
            unemb.append(torch.zeros(W))
    for s in range(S):
        names.append(f"<m:r{s}>")
        emb.append(row(ra=s))
        unemb.append(torch.zeros(W))
    for v in range(2 ** B):
        names.append(f"<m:v={v}>")
        emb.append(row())
        u = torch.zeros(W)
        for i in range(B):
            u[out + i] = 3.0 if (v >> i) & 1 else -3.0
        unemb.append(u)
    shapes_used = {k: getattr(host_cfg, k) for k in (
        "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
        "linear_conv_kernel_dim", "intermediate_size")}
    return CompiledMachine(width=W, layers=[L], embed=torch.stack(emb), unembed=torch.stack(unemb),
                           final_norm=torch.zeros(W), token_names=names, text_flag_dim=flag,
                           fields={**f, "text_flag": (flag, flag + 1)}, layer_shapes=shapes_used)


def memory_program(machine: CompiledMachine, n: int, seed: int = 0):
    """A random write/read program for `memory_machine`: (machine token indices, expected value
    after each token or None)."""
    g = torch.Generator().manual_seed(seed)
    names = machine.token_names
    S = sum(1 for x in names if x.startswith("<m:r"))
    B = int(math.log2(sum(1 for x in names if x.startswith("<m:v="))))
    mem, toks, expect = {}, [], []
    for _ in range(n):
        if not mem or torch.rand((), generator=g) < 0.5:
            s = int(torch.randint(S, (), generator=g))
            v = int(torch.randint(2 ** B, (), generator=g))
            mem[s] = v
            toks.append(names.index(f"<m:w{s}={v}>"))
            expect.append(None)
        else:
            s = sorted(mem)[int(torch.randint(len(mem), (), generator=g))]
            toks.append(names.index(f"<m:r{s}>"))
            expect.append(mem[s])
    return toks, expect


def estimate_spliced_bytes(host_cfg, width: int, n_compiled: int, machine_vocab: int,
                           bytes_per_param: int = 2, leading_flag_layer: bool = True) -> dict:
    """Parameter bytes of a spliced model (no activations), by part, for planning (e.g. the 2B)."""
    H = host_cfg.hidden_size
    Hp = H + width
    V = host_cfg.vocab_size + machine_vocab
    kd = host_cfg.linear_num_key_heads * host_cfg.linear_key_head_dim
    vd = host_cfg.linear_num_value_heads * host_cfg.linear_value_head_dim
    nv = host_cfg.linear_num_value_heads
    I = host_cfg.intermediate_size
    conv = 2 * kd + vd
    lin = Hp * conv + conv * host_cfg.linear_conv_kernel_dim + Hp * vd + 2 * Hp * nv + 2 * nv \
        + host_cfg.linear_value_head_dim + vd * Hp
    qd = host_cfg.num_attention_heads * host_cfg.head_dim
    kvd = host_cfg.num_key_value_heads * host_cfg.head_dim
    full = Hp * 2 * qd + 2 * Hp * kvd + qd * Hp + 2 * host_cfg.head_dim
    mlp = 3 * Hp * I + 2 * Hp
    n_full = sum(t == "full_attention" for t in host_cfg.layer_types)
    n_lin_host = host_cfg.num_hidden_layers - n_full
    n_prefix = n_compiled + (1 if leading_flag_layer else 0)
    parts = {
        "embed": V * Hp,
        "lm_head (untied)": V * Hp,
        "host layers": n_lin_host * (lin + mlp) + n_full * (full + mlp),
        "compiled layers": n_prefix * (lin + mlp),
        "final norm": Hp,
    }
    out = {k: v * bytes_per_param for k, v in parts.items()}
    out["total"] = sum(out.values())
    return out
