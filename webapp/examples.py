"""The example kernels of the Run tab: every case of the project's suite (gpu_layers/suite), with its
source, launch configuration and inputs as the form shows them."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from webapp.argspec import format_args

DEFAULT_EXAMPLE = "isqrt_u32"
# Shown first in the picker: small, readable, and each shows something different.
FEATURED = ("isqrt_u32", "crc32_bytes", "bitonic_sort", "shared_histogram", "warp_compact", "rank_sort",
            "ticket_lock", "bytecode_vm", "lane_divergence", "mandelbrot", "matvec_f32")


@dataclass(frozen=True)
class Example:
    name: str
    kernel: str
    source: str
    grid: str
    block: str
    dynamic_shared_bytes: int
    args_text: str
    features: tuple


def _dims_text(d) -> str:
    d = list(d) + [1] * (3 - len(d))
    return ", ".join(str(x) for x in d)


@lru_cache(maxsize=1)
def examples() -> dict:
    """name -> Example, featured ones first, then the rest of the suite alphabetically."""
    from gpu_layers.suite import SUITE_DIR, raw_cases

    raw = raw_cases()
    names = [n for n in FEATURED if n in raw] + sorted(n for n in raw if n not in FEATURED)
    out = {}
    for n in names:
        c = raw[n]
        src = (SUITE_DIR / c["source"]).read_text(encoding="utf-8")
        out[n] = Example(name=n, kernel=c["kernel"], source=src, grid=_dims_text(c["grid"]),
                         block=_dims_text(c["block"]), dynamic_shared_bytes=int(c.get("dynamic_shared_bytes", 0)),
                         args_text=format_args(c["args"]), features=tuple(c.get("features", ())))
    return out


def get(name: str) -> Example | None:
    return examples().get(name)
