"""A compiled machine as one compressed file of its nonzero weights, and the stock model built
from that file.

Why: the core's machine-only stock model is about 21 GB of fp32 (hidden W 5,650, 24 layers of
intermediate 6,144, a vocabulary of 130,569), more than the machine that compiles it can spare, yet
almost every weight is zero.
The file holds each compiled tensor's nonzero entries (flat index, float32 value: the values
`compile_fast` and `compile_circuit` write, bit for bit), the vocabulary's rows as CSR and the
final norm: a few MB that travel to a machine with room for the dense model (a GPU), where
`load_model` builds the very `Qwen3_5ForCausalLM` that `machine_model.build_machine_model` would.

    write_circuit(circuit, config, path)     # layer by layer: memory stays at compile_fast's
    model, names = load_model(path, dtype=torch.float32, device="cuda")
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from .compiled import LAYER_KEYS

FORMAT = "qwengpu-sparse-machine/1"


class SparseFileError(ValueError):
    """A file that is not a sparse machine of this format, or is inconsistent."""


def _f32(a) -> np.ndarray:
    """A tensor or array as a float32 numpy array (the compiled values are float32 already)."""
    return a.detach().to("cpu", torch.float32).numpy() if isinstance(a, torch.Tensor) else np.asarray(a, np.float32)


def _nonzero(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = np.ascontiguousarray(a).reshape(-1)
    idx = np.flatnonzero(flat)
    return idx.astype(np.int64), flat[idx]


def _rows(m) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ptr, idx, val) of a (rows, W) matrix: assemble.SparseRows as is, a dense one made one."""
    if not hasattr(m, "ptr"):
        from .assemble import SparseRows

        d = _f32(m)
        m = SparseRows.from_dense_chunks([d], d.shape[1])
    return np.asarray(m.ptr, np.int64), np.asarray(m.idx, np.int32), np.asarray(m.val, np.float32)


def save(path, layer_shapes: dict, width: int, layers, embed, unembed, final_norm, token_names: list[str]):
    """Write the file. `layers`: an iterable of layer dicts (LAYER_KEYS -> array), consumed one
    at a time; embed/unembed: (V, W) dense or assemble.SparseRows."""
    arrays, shapes = {}, []
    for i, L in enumerate(layers):
        missing = set(LAYER_KEYS) - set(L)
        if missing:
            raise SparseFileError(f"layer {i} lacks {sorted(missing)}")
        shapes.append({})
        for k in LAYER_KEYS:
            a = _f32(L[k])
            shapes[-1][k] = list(a.shape)
            arrays[f"L{i}/{k}/idx"], arrays[f"L{i}/{k}/val"] = _nonzero(a)
        del L
    for name, m in (("embed", embed), ("unembed", unembed)):
        arrays[f"{name}/ptr"], arrays[f"{name}/idx"], arrays[f"{name}/val"] = _rows(m)
    arrays["final_norm"] = _f32(final_norm)
    meta = {"format": FORMAT, "width": int(width), "vocab": len(token_names), "layer_shapes": layer_shapes,
            "shapes": shapes, "token_names": list(token_names)}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)
    tmp.replace(path)


def write_circuit(c, config, path, check: bool = False):
    """Compile `c` for `config` (a Qwen3.5 text config or a dict of its shape keys) straight into
    the file: the passes of compile_fast, each layer written and dropped before the next.
    check=False skips the validator's exactness pass, as compile_fast's (for circuits that
    validated before). Returns the number of layers."""
    from .assemble import Shapes, _layers, _passes

    s = Shapes.of(config)
    plans, _, sumsq, rec, names, embed, unembed, final = _passes(c, s, check, sparse_vocab=True)
    save(path, s.asdict(), rec.width + 1, _layers(c, s, plans, sumsq, rec, as_numpy=True), embed, unembed, final,
         names)
    return len(plans)


def read_meta(z) -> dict:
    if "meta" not in z.files:
        raise SparseFileError("no meta record: not a sparse machine file")
    meta = json.loads(bytes(z["meta"]).decode())
    if meta.get("format") != FORMAT:
        raise SparseFileError(f"format {meta.get('format')!r}, this reader knows {FORMAT!r}")
    return meta


@torch.no_grad()
def _fill_rows(z, name: str, out: torch.Tensor):
    """Write the CSR rows `name` into the zeroed (V, W) parameter `out`."""
    ptr, idx, val = z[f"{name}/ptr"], z[f"{name}/idx"], z[f"{name}/val"]
    if len(ptr) != out.shape[0] + 1 or ptr[-1] != len(idx) or len(idx) != len(val) or (
            len(idx) and idx.max() >= out.shape[1]):
        raise SparseFileError(f"{name}: CSR arrays do not match {tuple(out.shape)}")
    rows = np.repeat(np.arange(out.shape[0]), np.diff(ptr))
    flat = torch.from_numpy(rows * out.shape[1] + idx.astype(np.int64)).to(out.device)
    out.view(-1)[flat] = torch.from_numpy(val).to(device=out.device, dtype=out.dtype)


@torch.no_grad()
def load_model(path, dtype=torch.float32, device="cpu"):
    """(the machine-only stock Qwen3_5ForCausalLM, token names): every parameter allocated once
    in `dtype` on `device`, zeros except the file's entries (each float32 value rounded to
    `dtype` once, as build_machine_model's copy_ does)."""
    from gpu_layers.hosts import empty_model

    from .machine_model import machine_config

    z = np.load(path)
    meta = read_meta(z)
    W, V, n = meta["width"], meta["vocab"], len(meta["shapes"])
    config = machine_config(SimpleNamespace(layer_shapes=meta["layer_shapes"], layers=[None] * n,
                                            vocab_size=V, width=W))
    model = empty_model(config, dtype=dtype, device=device)
    params = dict(model.named_parameters())
    for p in params.values():
        p.zero_()
    for i, shapes in enumerate(meta["shapes"]):
        for k in LAYER_KEYS:
            p = params[f"model.layers.{i}.{k}"]
            if list(p.shape) != shapes[k]:
                raise SparseFileError(f"layer {i} {k}: file {shapes[k]} vs model {list(p.shape)}")
            idx, val = z[f"L{i}/{k}/idx"], z[f"L{i}/{k}/val"]
            if len(idx) and (idx.min() < 0 or idx.max() >= p.numel()):
                raise SparseFileError(f"layer {i} {k}: an index outside the tensor")
            p.view(-1)[torch.from_numpy(idx).to(device)] = torch.from_numpy(val).to(device=device, dtype=dtype)
    _fill_rows(z, "embed", params["model.embed_tokens.weight"])
    _fill_rows(z, "unembed", params["lm_head.weight"])
    params["model.norm.weight"].copy_(torch.from_numpy(z["final_norm"]).to(device=device, dtype=dtype))
    model.generation_config.pad_token_id = 0
    return model, meta["token_names"]
