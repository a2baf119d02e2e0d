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
  residual) and W=799: 2.4e-5 -> 8.1e-13; the "tiny-small-residual" host (whole residual x 0.05,
  rms 0.05-0.08), W=799, 256 tokens: 5.1e-5 -> 1.7e-11. In bf16 both are at the bf16 noise floor
  (3e-3..5e-3 on the tiny host, 2e-5..5e-5 with the small-embedding host). Rows fed as
  inputs_embeds must carry the same scale: SpliceInfo.machine_residual_scale / host_residual_scale.
* KL tool (save, reload with stock transformers, measure; `python -m gpu_layers kl`, 2048 tokens
  of Python source, regfile demo W=799): tiny host fp32 mean 1.6e-11 / max 3.5e-10, bf16 5.2e-3 /
  7.2e-2; tiny-small-residual fp32 1.7e-11 / 6.7e-10, bf16 4.5e-3 / 0.32; machine-token mass
  exactly 0 in all four. The bf16 floor for comparison, KL(fp32 host || bf16 host): 2.5e-3 on both.
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
  -suppression / rms(final residual), while on machine tokens the flag is exactly 0 and the machine
  logits are the machine's own.
* the flag's size is derived from the host's residual measured on calibration text
  (measure_residual, size_text_flag, whose docstring has the derivation): flag_value = 2^-15 of
  the smallest host residual norm met at any whole-vector RMSNorm (so the flag moves no host norm
  by more than 2^-31), suppression large enough that every machine logit on text sits more than
  104 below the top host logit (exp underflows to exactly 0 in fp32) for final residuals up to
  100x the largest measured. The tiny host: flag 7.4e-4, suppression 5.1e4; its small-residual
  variant (rms ~0.05): flag 3.7e-5, suppression 2.6e3. A fixed flag of 1e-3 / suppression of 1e5
  leaks on a host whose final residual rms is ~5e3 (tests/test_splice.py).
* every value is rounded once to the spliced dtype: scaled weights are formed in float64 and
  rounded once (`_place`); copying to bf16 and scaling in bf16 rounded twice (12% of the demo
  machine's nonzero writer weights came out one bf16 step off before this was fixed).

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
free_host (~17.8 GiB without) plus the loader's one host copy before it. Measured
(scripts/bench_build_memory.py, a random host of the 2B's exact shape, `python -m gpu_layers build
--machine regfile-prefix --dtype bfloat16`: W = 1095, 10 compiled layers, the flag in compiled
layer 0): spliced model 8.5 GiB on disk, build peak resident memory 9.8 GiB with free_host and
free_machine.

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
from gpu_layers.craft.streamed import column_nonzero, rows
from gpu_layers.errors import QwenGPUError
from gpu_layers.hosts import calibration_ids, fresh_rotary

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
    residual: dict | None = None          # the host's measured residual (ResidualStats) the flag was sized from
    token_names: list[str] = field(default_factory=list)

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
    """Fail fast, listing every problem: shapes against the host's layer budgets, the flag dim.
    A streamed machine (craft.streamed: its layers are written on demand) has its layers checked
    by check_layer as the splice places them."""
    machine.check()
    W = machine.width
    problems = []
    fd = machine.text_flag_dim
    if fd is None or not 0 <= fd < W:
        problems.append(f"text_flag_dim must be a machine dim in [0, {W}), got {fd}")
        fd = None
    if not getattr(machine, "streamed", False):
        for i, layer in enumerate(machine.layers):
            problems += check_layer(i, layer, cfg, W, fd)
    if fd is not None and not problems:
        if column_nonzero(machine.embed, fd):
            problems.append(f"machine embed rows set the text-flag dim {fd}")
        if column_nonzero(machine.unembed, fd):
            problems.append(f"machine unembed rows read the text-flag dim {fd}")
    for k, v in (machine.layer_shapes or {}).items():
        hv = getattr(cfg, k, None)
        if hv is not None and not isinstance(v, (dict, list)) and hv != v:
            problems.append(f"machine built for {k}={v}, host has {k}={hv}")
    _raise_problems(problems)


def check_layer(i: int, layer: dict, cfg, W: int, fd: int | None) -> list[str]:
    """The problems of compiled layer i: shapes against the host's budgets, reads or writes of the
    text-flag dim fd."""
    want = expected_layer_shapes(cfg, W)
    problems = [f"compiled layer {i}: {k} has shape {tuple(layer[k].shape)}, host budget needs {want[k]}"
                for k in LAYER_KEYS if tuple(layer[k].shape) != want[k]]
    if fd is not None and not problems:
        for k in _READS:
            if k in layer and layer[k][:, fd].abs().max() != 0:
                problems.append(f"compiled layer {i}: {k} reads the text-flag dim {fd}")
        for k in _WRITES:
            if k in layer and layer[k][fd].abs().max() != 0:
                problems.append(f"compiled layer {i}: {k} writes the text-flag dim {fd}")
    return problems


def _raise_problems(problems: list[str]) -> None:
    if problems:
        raise SpliceError("machine does not fit the host:" + "".join("\n  " + p for p in problems))


def free_neurons(layer: dict[str, torch.Tensor]) -> list[int]:
    """MLP neurons of a compiled layer that are entirely unused (gate row, up row, down column all 0)."""
    g, u, d = layer["mlp.gate_proj.weight"], layer["mlp.up_proj.weight"], layer["mlp.down_proj.weight"]
    used = (g != 0).any(1) | (u != 0).any(1) | (d != 0).any(0)
    return [int(i) for i in torch.nonzero(~used).flatten()]


# ---------------------------------------------------------------------------------------------
# The text flag's size, from the host's measured residual
# ---------------------------------------------------------------------------------------------

FP32_EXP_UNDERFLOW = 150 * math.log(2)  # exp(x) rounds to exactly 0 in fp32 (and bf16) for x < -103.97
FLAG_EPSILON = 2.0 ** -30               # the flag's share of the smallest host sum of squares at a norm
SUPPRESSION_SAFETY = 100.0              # final residual rms, unseen text vs the calibration text


@dataclass
class ResidualStats:
    """The host's residual, measured on calibration text (original host, no splice)."""

    min_rms: float        # smallest rms over H of the input of any whole-vector RMSNorm, any position
    max_final_rms: float  # largest rms over H of the final norm's input, any position
    logit_bound: float    # |host logit| <= this for every input (Cauchy-Schwarz, text independent)
    positions: int


@torch.no_grad()
def measure_residual(host_model, ids) -> ResidualStats:
    """Run the host on `ids` (1-D host token ids) and record the rms over the H host dims of the
    input of every whole-vector RMSNorm (each layer's input_layernorm and post_attention_layernorm,
    and the final norm) at every position.

    logit_bound: the final norm's output h has h_i = x_i / rms(x) * (1 + w_i), so
    |h| <= sqrt(H) * max_i |1 + w_i|, and every logit W_j . h is bounded by |W_j| |h| <=
    sqrt(H) * max_i |1 + w_i| * max_j |W_j| (W: the LM head), whatever the text.
    """
    ids = torch.as_tensor(ids, dtype=torch.long).flatten()
    if ids.numel() < 1 or int(ids.max()) >= host_model.config.vocab_size or int(ids.min()) < 0:
        raise SpliceError("calibration ids must be a non-empty sequence of host token ids")
    rms = {"inner": [], "final": []}
    hooks = []

    def record(kind):
        return lambda mod, args: rms[kind].append(args[0].double().pow(2).mean(-1).sqrt().flatten())

    for layer in host_model.model.layers:
        hooks.append(layer.input_layernorm.register_forward_pre_hook(record("inner")))
        hooks.append(layer.post_attention_layernorm.register_forward_pre_hook(record("inner")))
    hooks.append(host_model.model.norm.register_forward_pre_hook(record("final")))
    try:
        host_model.model(input_ids=ids[None], use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    final = torch.cat(rms["final"])
    inner = torch.cat(rms["inner"] + [final])
    H = host_model.config.hidden_size
    W = host_model.lm_head.weight
    row_norm = max(float(W[a:a + 8192].double().norm(dim=1).max()) for a in range(0, W.shape[0], 8192))
    gain = float((1.0 + host_model.model.norm.weight.double()).abs().max())
    return ResidualStats(min_rms=float(inner.min()), max_final_rms=float(final.max()),
                         logit_bound=math.sqrt(H) * gain * row_norm, positions=int(ids.numel()))


def size_text_flag(stats: ResidualStats, host_hidden: int, spliced_hidden: int, eps: float,
                   norm_mode: str = "scale_residual") -> tuple[float, float]:
    """(flag_value f, suppression S) for a host whose residual is `stats`.

    Notation: H host dims, H' = H + W spliced dims, r the original host's residual rms over H at a
    norm's input, eps the shared rms_norm_eps. In the spliced model the host part of the residual
    is the original times s_h (sqrt(H'/H) with norm_mode "scale_residual", 1 with
    "rescale_gains"), so its sum of squares is k^2 r^2 with k^2 = s_h^2 H (= H', or H).

    1. The flag must not move the host: after the flag layer, every whole-vector RMSNorm of an
       ordinary token sees the flag f in its mean of squares, a relative change
       f^2 / (k^2 r^2). f = k * min_rms * 2^-15 keeps it <= FLAG_EPSILON = 2^-30 at the smallest
       measured norm input, so each norm's scale moves by <= 2^-31, far below half an fp32 ulp
       (2^-24) and of bf16's (2^-8).
    2. The flag actually written: the flag MLP sums xhat_i^2 over the host dims of the normalised
       vector, H' k^2 r0^2 / (k^2 r0^2 + H' eps), times f / H'; so it is f * rho with
       rho = k^2 r0^2 / (k^2 r0^2 + H' eps) (r0: rms at the flag layer, >= min_rms).
    3. On ordinary text a machine logit is -S times the final norm's flag output:
       -S * (f rho) * (1 / f) / sqrt((k^2 r_f^2 + (f rho)^2) / H' + eps)  (the final norm's gain on
       the flag dim is 1/f; r_f: the final norm's input rms). Every host logit is >= -L
       (L = logit_bound), so a machine logit <= -(L + 104) puts every machine token below the
       largest logit by more than 104 and exp underflows to exactly 0 in fp32 (FP32_EXP_UNDERFLOW):
       machine-token probability exactly 0.
       S = SUPPRESSION_SAFETY * (L + 104) * sqrt((k^2 max_final_rms^2 + f^2) / H' + eps) / rho_min,
       valid for any text whose final residual rms is up to SUPPRESSION_SAFETY times the
       calibration's largest.
    """
    H, Hp = host_hidden, spliced_hidden
    k2 = float(Hp) if norm_mode == "scale_residual" else float(H)
    r = stats.min_rms
    if not r > 0:
        raise SpliceError(f"the host's residual rms is {r} at some norm: cannot size the text flag")
    f = math.sqrt(k2) * r * math.sqrt(FLAG_EPSILON)
    rho = k2 * r * r / (k2 * r * r + Hp * eps)
    rf = stats.max_final_rms
    final_scale = math.sqrt((k2 * rf * rf + f * f) / Hp + eps)
    S = SUPPRESSION_SAFETY * (stats.logit_bound + FP32_EXP_UNDERFLOW) * final_scale / rho
    return f, S


# ---------------------------------------------------------------------------------------------
# Building: a short pipeline of named passes
# ---------------------------------------------------------------------------------------------

def _rescaled(w: torch.Tensor, n_from: int, n_to: int) -> torch.Tensor:
    """Zero-centred RMSNorm gains for a vector stored for width n_from, used in a width n_to residual."""
    return ((1.0 + w.double()) * math.sqrt(n_from / n_to) - 1.0)


def _place(dst: torch.Tensor, src: torch.Tensor, scale: float = 1.0) -> None:
    """dst = src * scale, rounded ONCE to dst's dtype (the product is formed in float64), in
    row chunks so that no full-size temporary exists (the 2B embedding is 1 GB in bf16)."""
    if scale == 1.0:
        dst.copy_(src)
        return
    if dst.dim() == 0:
        dst.copy_(src.double() * scale)
        return
    step = max(1, (1 << 22) // max(1, dst[0].numel()))
    for a in range(0, dst.shape[0], step):
        dst[a:a + step].copy_(src[a:a + step].double().mul_(scale))


def _place_nonzero_rows(dst: torch.Tensor, src: torch.Tensor, scale: float = 1.0) -> None:
    """_place into a zeroed dst, skipping the all-zero rows of src (they are zero already): a
    compiled layer's unused neurons and channels then stay holes of a checkpoint written in place
    (splice's out_dir), and the bytes are the same."""
    nz = src.reshape(src.shape[0], -1).ne(0).any(1).tolist()
    a = 0
    while a < len(nz):
        if not nz[a]:
            a += 1
            continue
        b = a
        while b < len(nz) and nz[b]:
            b += 1
        _place(dst[a:b], src[a:b], scale)
        a = b


def _place_rows(dst: torch.Tensor, src, scale: float = 1.0, chunk: int = 4096) -> None:
    """_place for a (V, n) matrix given as a tensor or as sparse rows (craft.streamed.rows), a
    chunk of rows at a time: the core's vocabulary is never dense at once."""
    for a in range(0, dst.shape[0], chunk):
        b = min(a + chunk, dst.shape[0])
        _place(dst[a:b], rows(src, a, b), scale)


def spliced_config(host_cfg, machine: CompiledMachine, n_prefix: int):
    cfg = copy.deepcopy(host_cfg)
    cfg.hidden_size = host_cfg.hidden_size + machine.width
    cfg.vocab_size = host_cfg.vocab_size + machine.vocab_size
    cfg.num_hidden_layers = n_prefix + host_cfg.num_hidden_layers
    cfg.layer_types = ["linear_attention"] * n_prefix + list(host_cfg.layer_types)
    cfg.tie_word_embeddings = False
    return cfg


@dataclass
class SplicePlan:
    """Every size and choice of one splice, decided (and validated) before any tensor is written."""

    H: int                      # host hidden
    W: int                      # machine width
    Vh: int                     # host vocabulary
    fd: int                     # absolute residual index of the text flag
    dtype: torch.dtype
    n_lead: int                 # leading flag layers of our own (0: the flag is in compiled layer 0)
    n_compiled: int
    flag_neurons: list[int]     # compiled layer 0's free neurons, when the flag lives there
    s_h: float                  # residual scale of the host part
    s_m: float                  # residual scale of the machine part
    flag_value: float
    suppression: float
    residual: ResidualStats | None
    norm_mode: str
    free_host: bool
    free_machine: bool = False

    @property
    def Hp(self) -> int:
        return self.H + self.W

    @property
    def n_prefix(self) -> int:  # layers before the host's
        return self.n_lead + self.n_compiled

    def gains(self, w, n):      # RMSNorm over H' of (s x) = s * RMSNorm over n of x: gains carry 1/s
        return _rescaled(w, n, self.Hp).to(self.dtype)


def plan_splice(host_model, machine: CompiledMachine, *, flag_value, suppression, calibration,
                flag_layer, dtype, free_host, norm_mode) -> SplicePlan:
    """Validate the options and the machine against the host; place the text flag; size it from
    the host's measured residual (size_text_flag) unless both values are given."""
    if norm_mode not in ("scale_residual", "rescale_gains"):
        raise SpliceError(f"norm_mode must be scale_residual or rescale_gains, not {norm_mode!r}")
    if flag_layer not in ("auto", "leading", "compiled"):
        raise SpliceError(f"flag_layer must be auto, leading or compiled, not {flag_layer!r}")
    hcfg = host_model.config
    check_machine(machine, hcfg)
    H, W = hcfg.hidden_size, machine.width
    Hp = H + W
    free = free_neurons(machine.layers[0]) if machine.layers else []
    in_compiled = flag_layer != "leading" and len(free) >= 2 * H
    if flag_layer == "compiled" and not in_compiled:
        raise SpliceError(f"compiled layer 0 has {len(free)} free MLP neurons, the text flag needs {2 * H}")
    residual = None
    if flag_value is None or suppression is None:
        ids = calibration_ids(hcfg.vocab_size) if calibration is None else calibration
        residual = measure_residual(host_model, ids)
        f, S = size_text_flag(residual, H, Hp, hcfg.rms_norm_eps, norm_mode)
        flag_value = f if flag_value is None else flag_value
        suppression = S if suppression is None else suppression
    if not flag_value > 0:
        raise SpliceError(f"flag_value must be > 0, got {flag_value}")
    scale = norm_mode == "scale_residual"
    return SplicePlan(H=H, W=W, Vh=hcfg.vocab_size, fd=H + machine.text_flag_dim,
                      dtype=dtype or host_model.model.embed_tokens.weight.dtype,
                      n_lead=0 if in_compiled else -(-2 * H // hcfg.intermediate_size), n_compiled=len(machine.layers),
                      flag_neurons=free if in_compiled else [], s_h=math.sqrt(Hp / H) if scale else 1.0,
                      s_m=math.sqrt(Hp / W) if scale else 1.0, flag_value=float(flag_value),
                      suppression=float(suppression), residual=residual, norm_mode=norm_mode, free_host=free_host)


def _materialize(module):
    """A module's parameters allocated and zeroed; a no-op when they are already bound (to the
    zeroed views of a checkpoint written in place: splice's out_dir)."""
    if not any(p.is_meta for p in module.parameters()):
        return module
    module.to_empty(device="cpu")
    for p in module.parameters():
        p.zero_()
    return module


def build_meta_model(host_cfg, machine: CompiledMachine, plan: SplicePlan):
    """The spliced Qwen3_5ForCausalLM on the meta device: the next passes materialise it part by
    part, host-derived parts first, so that with free_host each host tensor is released as soon as
    its padded copy exists (the peak stays near the spliced model's own size)."""
    from transformers import Qwen3_5ForCausalLM

    cfg = spliced_config(host_cfg, machine, plan.n_prefix)
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(cfg)
    return model.to(plan.dtype)


def place_host_layers(model, host_model, plan: SplicePlan) -> None:
    """Host layers after the prefix: reads padded with zeros, writers scaled by s_h, norm gains
    rescaled on host dims and -1 (gain 0) on machine dims."""
    H = plan.H
    for i, hl in enumerate(host_model.model.layers):
        dst = dict(_materialize(model.model.layers[plan.n_prefix + i]).named_parameters())
        for k, src in hl.named_parameters():
            p = dst[k]
            if k in _NORMS:
                p[:H] = plan.gains(src, H)
                p[H:] = -1.0
            elif k in _READS:
                _place(p[:, :H], src)
            elif k in _WRITES:
                _place(p[:H], src, plan.s_h)
            else:
                _place(p, src)
        if plan.free_host:
            _release(hl)


def place_vocabulary(model, host_model, machine: CompiledMachine, plan: SplicePlan) -> None:
    """LM head (untied), embedding, final norm. The LM head first: with a tied host its rows are the
    embedding, which is then released before the (scaled) spliced embedding is made from the LM
    head's copy. Machine LM-head rows weigh the flag dim -suppression; the final norm's gain on the
    flag dim is 1/flag_value."""
    H, Vh, M, fd = plan.H, plan.Vh, slice(plan.H, plan.Hp), plan.fd
    lm = _materialize(model.lm_head).weight
    _place(lm[:Vh, :H], host_model.lm_head.weight)
    host_emb = host_model.model.embed_tokens.weight
    if plan.free_host and host_emb is host_model.lm_head.weight and host_emb.dtype == plan.dtype:
        # tied, and the LM head's rows are an exact copy of the embedding: release it first
        _release(host_model.model.embed_tokens)
        host_emb = lm[:Vh, :H]
    emb = _materialize(model.model.embed_tokens).weight
    _place(emb[:Vh, :H], host_emb, plan.s_h)
    if plan.free_host:
        _release(host_model.model.embed_tokens)
    _place_rows(emb[Vh:, M], machine.embed, plan.s_m)
    _place_rows(lm[Vh:, M], machine.unembed)
    lm[Vh:, fd] = -plan.suppression
    fn = _materialize(model.model.norm).weight
    fn[:H] = plan.gains(host_model.model.norm.weight, H)
    fn[M] = plan.gains(machine.final_norm, plan.W)
    fn[fd] = 1.0 / plan.flag_value - 1.0
    if plan.free_host:
        _release(host_model)


def place_compiled_layers(model, machine: CompiledMachine, plan: SplicePlan) -> None:
    """Compiled layers after the leading flag layers, on the machine dims only: reads as stored,
    writers scaled by s_m, norm gains rescaled from width W to H' (-1 on host dims). Every value is
    rounded once to the spliced dtype (_place). A streamed machine's layers are written one at a
    time and checked (check_layer) before they are placed."""
    H, W, M = plan.H, plan.W, slice(plan.H, plan.Hp)
    streamed = getattr(machine, "streamed", False)
    for j in range(len(machine.layers)):
        layer = machine.layers[j]
        if streamed:
            _raise_problems(check_layer(j, layer, model.config, W, machine.text_flag_dim))
        params = dict(_materialize(model.model.layers[plan.n_lead + j]).named_parameters())
        for k in LAYER_KEYS:
            src, p = layer[k], params[k]
            if k in _NORMS:
                p[:H] = -1.0
                p[M] = plan.gains(src, W)
            elif k in _READS:
                _place_nonzero_rows(p[:, M], src)
            elif k in _WRITES:
                _place_nonzero_rows(p[M], src, plan.s_m)
            else:
                _place(p, src)
        if plan.free_machine:       # placed: the float32 compiled tensors of this layer are not needed again
            machine.layers[j] = {k: torch.empty(0) for k in layer}
            del layer, src


def write_text_flag(model, plan: SplicePlan) -> None:
    """2H MLP neurons, a pair per host dim i (gate = up = +x_i and -x_i), each writing
    flag_value / H' into the flag dim: silu(v) v + silu(-v)(-v) = v^2, so the flag is ~flag_value
    on an ordinary token and exactly 0 on a machine token. In compiled layer 0's free neurons, or
    in leading layers of our own (mixer off, I/2 host dims per layer)."""
    H, I, fd = plan.H, model.config.intermediate_size, plan.fd
    d = plan.flag_value / plan.Hp  # sum over host dims of xhat_i^2 is ~H' on ordinary tokens
    if plan.n_lead:
        per = I // 2
        groups = [(model.model.layers[k], list(range(2 * per)), range(k * per, min(H, (k + 1) * per)))
                  for k in range(plan.n_lead)]
        for lead, _, _ in groups:
            _materialize(lead)
            lead.input_layernorm.weight.fill_(-1.0)
            lead.post_attention_layernorm.weight.fill_(-1.0)
            lead.linear_attn.norm.weight.fill_(1.0)
    else:
        groups = [(model.model.layers[0], plan.flag_neurons, range(H))]
    for layer, neurons, dims in groups:
        layer.post_attention_layernorm.weight[:H] = 0.0  # gain 1 on host dims for the flag MLP
        mlp = layer.mlp
        for n, i in enumerate(dims):
            a, b = neurons[2 * n], neurons[2 * n + 1]
            mlp.gate_proj.weight[a, i] = 1.0
            mlp.up_proj.weight[a, i] = 1.0
            mlp.gate_proj.weight[b, i] = -1.0
            mlp.up_proj.weight[b, i] = -1.0
            mlp.down_proj.weight[fd, a] = d
            mlp.down_proj.weight[fd, b] = d


def finish(model, machine: CompiledMachine, plan: SplicePlan):
    """Rotary buffers, a check that every parameter was written, the SpliceInfo."""
    fresh_rotary(model)
    left = [n for n, p in model.named_parameters() if p.is_meta]
    assert not left, f"splice left parameters unset: {left[:5]}"
    n_c = plan.n_compiled
    loc = "compiled_layer_0" if not plan.n_lead else ("leading_layer" if plan.n_lead == 1 else "leading_layers")
    info = SpliceInfo(host_hidden=plan.H, machine_width=plan.W, host_vocab=plan.Vh, machine_vocab=machine.vocab_size,
                      text_flag_dim=plan.fd, n_prefix_layers=plan.n_prefix, n_compiled_layers=n_c,
                      flag_location=loc, flag_value=plan.flag_value, suppression=plan.suppression,
                      norm_mode=plan.norm_mode, host_residual_scale=plan.s_h, machine_residual_scale=plan.s_m,
                      residual=asdict(plan.residual) if plan.residual else None,
                      token_names=list(machine.token_names))
    model.splice_info = info
    model.config.qwengpu = info.summary()
    return model.eval()


@torch.no_grad()
def splice(host_model, machine: CompiledMachine, *, flag_value: float | None = None,
           suppression: float | None = None, calibration_ids=None, flag_layer: str = "auto", dtype=None,
           free_host: bool = False, norm_mode: str = "scale_residual", free_machine: bool = False,
           out_dir=None):
    """Host + machine -> one Qwen3_5ForCausalLM (stock class). Returns the model; `model.splice_info`
    (a SpliceInfo, also stored in `model.config.qwengpu`) maps machine token names to ids.

    Passes: plan_splice (validate, place and size the text flag) -> build_meta_model ->
    place_host_layers -> place_vocabulary -> place_compiled_layers -> write_text_flag -> finish.

    flag_value, suppression: the text flag's size; by default derived from the host's residual
    measured on `calibration_ids` (host token ids; default: gpu_layers.hosts.calibration_ids) by
    size_text_flag, so machine-token probability is exactly 0 in fp32 on ordinary text of any host.
    flag_layer: "auto" (compiled layer 0's free neurons when it has 2H of them, else a leading
    layer), "leading" (always an extra leading layer), "compiled" (require compiled layer 0).
    dtype: of the spliced model (default: the host's); every weight is rounded to it once.
    free_host: release each host tensor as soon as it is copied (the host model is unusable
    afterwards), so the peak stays near the spliced model's own size instead of host + spliced.
    free_machine: release each compiled layer's (float32) tensors once placed (`machine.layers`
    then holds empty tensors): at Qwen3.5-2B's budgets they are GBs (regfile-prefix: 3.4 GiB).
    norm_mode: how whole-vector RMSNorms over H' reproduce the norms over n = H (host) or W
    (machine). Both set gains (1 + w) sqrt(n / H') - 1. "scale_residual" (default) also multiplies
    that part of the residual by s = sqrt(H'/n): embedding rows and every writer (o_proj, out_proj,
    down_proj) by s. Then mean over H' of (s x)^2 + eps = mean over n of x^2 + eps exactly, and
    RMSNorm_H'(s x) * (1 + w) / s = RMSNorm_n(x) * (1 + w): exact in real arithmetic, eps
    included. "rescale_gains" (DESIGN section 5's recipe) leaves the residual as is; the shared eps
    then acts as eps * H'/n, a relative error eps (H'/n - 1) / (2 mean(x^2)) per norm that grows
    with the machine's width and for hosts with a small residual (measured in the module doc).
    out_dir: write the parameters in place into safetensors shards there (bind_to_files): the
    model's tensors are views of the files, so a model bigger than memory can be built;
    save_spliced(model, out_dir) then adds the config and the splice's json.
    """
    plan = plan_splice(host_model, machine, flag_value=flag_value, suppression=suppression,
                       calibration=calibration_ids, flag_layer=flag_layer, dtype=dtype,
                       free_host=free_host, norm_mode=norm_mode)
    plan.free_machine = free_machine
    model = build_meta_model(host_model.config, machine, plan)
    if out_dir is not None:
        bind_to_files(model, out_dir, plan.dtype)
    place_host_layers(model, host_model, plan)
    place_vocabulary(model, host_model, machine, plan)
    place_compiled_layers(model, machine, plan)
    write_text_flag(model, plan)
    return finish(model, machine, plan)


def bind_to_files(model, out_dir, dtype) -> None:
    """Every parameter of the (meta) model replaced by a zeroed view of its bytes in safetensors
    shards created in out_dir (gpu_layers.safetensors_files): the passes then write the checkpoint
    in place, and the page cache, not the process, holds what is not being written."""
    from gpu_layers import safetensors_files

    named = list(model.named_parameters())
    views = safetensors_files.create(out_dir, [(n, tuple(p.shape)) for n, p in named], dtype)
    for name, _ in named:
        mod_name, _, pname = name.rpartition(".")
        mod = model.get_submodule(mod_name)
        mod._parameters[pname] = torch.nn.Parameter(views.pop(name), requires_grad=False)
    model._qwengpu_files = Path(out_dir).resolve()


def _release(module) -> None:
    for p in module.parameters():
        p.data = torch.empty(0, dtype=p.dtype)


def save_spliced(model, path, tokenizer=None) -> Path:
    """save_pretrained (safetensors) + qwengpu_splice.json (names and ids of the machine tokens).
    A model written in place (splice's out_dir) into `path` already has its shards there: only
    the configs are written and the shards synced."""
    path = Path(path)
    if getattr(model, "_qwengpu_files", None) == path.resolve():
        from gpu_layers import safetensors_files

        model.config.architectures = [type(model).__name__]
        model.config.dtype = next(model.parameters()).dtype
        model.config.save_pretrained(str(path))
        model.generation_config.save_pretrained(str(path))
        safetensors_files.sync(path)
    else:
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
