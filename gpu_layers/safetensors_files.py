"""A safetensors checkpoint written in place: every tensor is a view of its shard file, mapped
shared, so the splice writes the checkpoint's bytes where they will stay.

Why: a spliced model with the machine core is bigger than this machine's memory (the tiny host
with the core: about 36 GB of fp32; Qwen3.5-2B with the core: 66 GB), yet almost every byte of
it is a zero. The shard files are created at their full size as sparse files (the holes read as
zeros, the headers already final), the splice's passes fill the nonzero parts through the views,
and the kernel's page cache writes them back and evicts them as it needs: the build's own
(anonymous) memory stays near the host plus one compiled layer, whatever the checkpoint's size.

The files are the safetensors format (an 8-byte little-endian header length, a JSON header of
names, dtypes, shapes and byte offsets, then the raw little-endian data), the names those of the
model's state dict, sharded with the usual `model.safetensors.index.json` above one shard: stock
`from_pretrained` loads them like any checkpoint (on the CPU it maps them too, see `kl`).
"""
from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import torch

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
MAX_SHARD_BYTES = 4 << 30
INDEX = "model.safetensors.index.json"
_ALIGN = 64                      # data starts on this boundary (the header is padded with spaces)


def shard_plan(entries: list[tuple[str, tuple]], itemsize: int, max_shard_bytes: int = MAX_SHARD_BYTES):
    """Consecutive tensors grouped into shards of at most max_shard_bytes (a bigger tensor gets a
    shard of its own)."""
    shards, cur, size = [], [], 0
    for name, shape in entries:
        n = itemsize * math.prod(shape)
        if cur and size + n > max_shard_bytes:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, tuple(shape)))
        size += n
    if cur:
        shards.append(cur)
    return shards


def shard_names(n: int) -> list[str]:
    return ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


def create(directory, entries: list[tuple[str, tuple]], dtype: torch.dtype,
           max_shard_bytes: int = MAX_SHARD_BYTES) -> dict[str, torch.Tensor]:
    """Create the shard files (and the index) for `entries` (name, shape) in `dtype`, every tensor
    zero, and return {name: a writable tensor mapped onto its bytes}. The files hold whatever is
    written through the views; `sync(directory)` flushes them once the views are dropped."""
    if dtype not in SAFETENSORS_DTYPES:
        raise ValueError(f"unsupported dtype {dtype}; one of {', '.join(map(str, SAFETENSORS_DTYPES))}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    item = torch.tensor([], dtype=dtype).element_size()
    shards = shard_plan(entries, item, max_shard_bytes)
    names = shard_names(len(shards))
    views, weight_map, total = {}, {}, 0
    for fname, shard in zip(names, shards):
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, shape in shard:
            n = item * math.prod(shape)
            header[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-(8 + len(hb)) % _ALIGN)
        start = 8 + len(hb)
        path = directory / fname
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
            f.truncate(start + off)                   # a sparse file: the data reads as zeros
        buf = torch.from_file(str(path), shared=True, size=start + off, dtype=torch.uint8)
        for name, shape in shard:
            a, b = header[name]["data_offsets"]
            views[name] = buf[start + a:start + b].view(dtype).view(shape)
            weight_map[name] = fname
        total += off
    if len(shards) > 1:
        (directory / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                                  indent=1))
    return views


def sync(directory) -> None:
    """fsync every shard: what was written through the mapped views is on disk."""
    for path in sorted(Path(directory).glob("*.safetensors")):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def disk_bytes(directory) -> int:
    """Blocks the directory's files take on disk (sparse shards: the nonzero pages only)."""
    return sum(p.stat().st_blocks * 512 for p in Path(directory).iterdir() if p.is_file())
