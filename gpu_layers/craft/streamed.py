"""A compiled machine whose layers are written when asked for: the machine core's dense layers
(about 0.65 GB of fp32 each at W 5,650 and Qwen3.5-2B's budgets, 15.6 GB together) never exist at
once.

`compile_streamed` runs the compiler's shared passes (assemble._passes: schedule, recycle, norms,
the vocabulary as sparse rows) once, and `StreamedMachine.layers[j]` runs write_layer for layer j
(the same float64 arithmetic rounded once to float32 as compile_circuit). The splice reads it like
a CompiledMachine, one layer at a time, so building a spliced checkpoint with the core needs the
memory of one layer, not of the machine.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .compiled import CompiledMachine


class LazyLayers(Sequence):
    """len() layers, layer j made by make(j) when indexed; the last one is kept (the splice reads
    layer 0 twice: its free neurons, then its weights). Assigning an item (the splice's
    free_machine) drops the kept layer."""

    def __init__(self, n: int, make):
        self._n, self._make, self._last = n, make, (None, None)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, j):
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(self._n))]
        if not -self._n <= j < self._n:
            raise IndexError(j)
        j %= self._n
        if self._last[0] != j:
            self._last = (None, None)
            self._last = (j, self._make(j))
        return self._last[1]

    def __setitem__(self, j, value) -> None:
        self._last = (None, None)


@dataclass
class StreamedMachine(CompiledMachine):
    """A CompiledMachine whose `layers` is a LazyLayers and whose `embed`/`unembed` are
    assemble.SparseRows (dense rows on demand: `rows`)."""

    streamed = True

    def check_layers(self) -> None:
        """Nothing here: writing every layer to check it would double the work; the splice checks
        each layer as it places it (splice.check_layer)."""


def rows(m, a: int, b: int) -> torch.Tensor:
    """Rows a..b of a (V, W) matrix as a dense float32 tensor: a torch matrix sliced, or the
    rows of an assemble.SparseRows filled in (the same float32 values)."""
    if isinstance(m, torch.Tensor):
        return m[a:b]
    out = np.zeros((b - a, m.shape[1]), dtype=np.float32)
    lo, hi = int(m.ptr[a]), int(m.ptr[b])
    r = np.repeat(np.arange(b - a), np.diff(m.ptr[a:b + 1]))
    out[r, m.idx[lo:hi]] = m.val[lo:hi]
    return torch.from_numpy(out)


def column_nonzero(m, col: int) -> bool:
    """Whether column `col` of a (V, W) matrix (torch or SparseRows) holds a nonzero."""
    if isinstance(m, torch.Tensor):
        return bool(m[:, col].abs().max() != 0)
    return bool(np.any(m.idx == col))


def compile_streamed(c, config) -> StreamedMachine:
    """The circuit's shared passes now, its layers when asked for. The validator's exactness pass
    is skipped (as for the core's fast executor, compile_fast(check=False)): only for circuits
    that validated before."""
    from .assemble import Shapes, _passes, write_layer

    s = Shapes.of(config)
    plans, _, sumsq, rec, names, embed, unembed, final = _passes(c, s, check=False, sparse_vocab=True)
    W = rec.width + 1

    def make(j):
        return write_layer(c, s, plans[j], sumsq[f"{j}.input"], sumsq[f"{j}.post"], W, False, rec.dmap)
    m = StreamedMachine(width=W, layers=LazyLayers(len(plans), make), embed=embed, unembed=unembed,
                        final_norm=final, token_names=names, text_flag_dim=W - 1, layer_shapes=s.asdict())
    m.check()
    return m
