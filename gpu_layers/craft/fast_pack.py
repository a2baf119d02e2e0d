"""A FastMachine's compacted layers packed into a few flat pools, so that one numba call
(fast_kernels.forward_layers) takes a token through every layer. The per-layer objects (_Mixer,
_MLP) stay what the executor is built and pickled from; the pools are derived from them when a
machine first runs, and each state's recurrent memory (S, conv windows, incremental sums) is one
array per kind whose per-layer pieces are views.

Pools: I (int64: column lists, column pointers, gathers, residual rows), F (float32: norm weights,
conv taps, gate constants), R (a matrix entry's row, one unsigned type for every matrix), Cd (an
entry's value code), T (float64: the matrices' value tables); per state S, CV (float32), P, A
(float64) and N (int32). A segment's place is (offset, length) in `meta`'s row of its layer.
"""
from __future__ import annotations

import numpy as np

from . import fast_kernels as K

STATE_POOLS = {"S": np.float32, "CV": np.float32, "P": np.float64, "A": np.float64, "N": np.int32}


class _Builder:
    def __init__(self):
        self.parts = {"I": [], "F": [], "R": [], "Cd": [], "T": []}
        self.size = dict.fromkeys(list(self.parts) + list(STATE_POOLS), 0)

    def put(self, m, k: int, pool: str, arr=None, n: int | None = None):
        """Segment k of meta row m: arr appended to `pool`, or n entries of a state pool."""
        if arr is not None:
            arr = np.ascontiguousarray(arr).reshape(-1)
            self.parts[pool].append(arr)
            n = len(arr)
        m[2 * k], m[2 * k + 1] = self.size[pool], n
        self.size[pool] += n

    def sparse(self, m, ks, M):
        """A _Sparse matrix's column pointers, rows, codes and table into segments ks."""
        for k, pool, arr in zip(ks, ("I", "R", "Cd", "T"), M.mv_args()):
            self.put(m, k, pool, arr)


class Packed:
    """The pools and the meta table of a FastMachine's layers (fast_kernels.forward_layers' args)."""

    def __init__(self, fm):
        b = _Builder()
        self.meta = np.zeros((len(fm.layers), K.META), dtype=np.int64)
        self.views = []                        # per layer: where its S, conv and sums sit
        for i, L in enumerate(fm.layers):
            m, v = self.meta[i], {}
            mx, ml = L.mixer, L.mlp
            if mx is not None:
                H, d, e = mx.kdims.shape[0], mx.kdims.shape[1], mx.vdims.shape[1]
                K1 = mx.conv_w.shape[0]
                m[[K.HAS_MX, K.MX_C, K.MX_Z, K.MX_H, K.MX_D, K.MX_E, K.MX_K1, K.MX_N_IN, K.MX_EXT, K.MX_NOUT]] = \
                    1, mx.C, mx.Z, H, d, e, K1, mx.w_in.shape[0], mx.ext_size, len(mx.out_heads)
                m[K.MX_G_ROWS], m[K.MX_GATE_OPEN] = mx.decay is None, mx.gate_open
                b.put(m, K.MX_COLS, "I", mx.cols)
                b.put(m, K.MX_NORM, "F", mx.norm_w)
                b.sparse(m, (K.MX_IN_PTR, K.MX_IN_ROWS, K.MX_IN_CODES, K.MX_IN_TABLE), mx.w_in)
                b.put(m, K.MX_CONV_W, "F", mx.conv_w)
                b.put(m, K.MX_GATHER, "I", mx.gather)
                b.put(m, K.MX_NEG_A, "F", mx.neg_A)
                b.put(m, K.MX_DT, "F", mx.dt_bias)
                b.put(m, K.MX_DECAY, "F", mx.neg_A if mx.decay is None else mx.decay)
                b.put(m, K.MX_OUT_SLOT, "I", mx.out_slot)
                b.put(m, K.MX_ZG, "I", mx.z_gather)
                b.put(m, K.MX_GNORM, "F", mx.gnorm_w)
                b.put(m, K.MX_SEL, "I", mx.out_sel)
                b.sparse(m, (K.MX_OUT_PTR, K.MX_OUT_ROWS, K.MX_OUT_CODES, K.MX_OUT_TABLE), mx.w_out)
                b.put(m, K.MX_XROWS, "I", mx.out_rows)
                b.put(m, K.MX_S, "S", n=H * d * e)
                b.put(m, K.MX_CONV, "CV", n=(K1 - 1) * mx.C)
                b.put(m, K.MX_PREV, "P", n=len(mx.cols))
                b.put(m, K.MX_ACC, "A", n=mx.w_in.shape[0])
                b.put(m, K.MX_CNT, "N", n=mx.w_in.shape[0])
                v["S"] = (K.MX_S, (H, d, e))
                v["CV"] = (K.MX_CONV, (K1 - 1, mx.C))
                v["mx"] = (K.MX_PREV, K.MX_ACC, K.MX_CNT)
            if ml is not None:
                m[K.HAS_ML], m[K.ML_N] = 1, ml.N
                b.put(m, K.ML_COLS, "I", ml.cols)
                b.put(m, K.ML_NORM, "F", ml.norm_w)
                b.sparse(m, (K.ML_GU_PTR, K.ML_GU_ROWS, K.ML_GU_CODES, K.ML_GU_TABLE), ml.w_gu)
                b.sparse(m, (K.ML_DN_PTR, K.ML_DN_ROWS, K.ML_DN_CODES, K.ML_DN_TABLE), ml.w_down)
                b.put(m, K.ML_XROWS, "I", ml.rows)
                b.put(m, K.ML_PREV, "P", n=len(ml.cols))
                b.put(m, K.ML_ACC, "A", n=2 * ml.N)
                b.put(m, K.ML_CNT, "N", n=2 * ml.N)
                v["ml"] = (K.ML_PREV, K.ML_ACC, K.ML_CNT)
            self.views.append(v)
        types = {"I": np.int64, "F": np.float32, "T": np.float64,
                 "R": _widest(b.parts["R"]), "Cd": _widest(b.parts["Cd"])}
        self.pools = tuple(np.concatenate(b.parts[p] or [np.zeros(0)]).astype(types[p]) for p in ("I", "F", "R", "Cd", "T"))
        self.state_sizes = {p: b.size[p] for p in STATE_POOLS}

    def new_pools(self, incremental: bool) -> dict:
        """A fresh state's memory: zeros (the sums' pools only when incremental)."""
        return {p: np.zeros(self.state_sizes[p] if incremental or p in ("S", "CV") else 0, dtype=t)
                for p, t in STATE_POOLS.items()}

    def _seg(self, pool, layer: int, k: int):
        o, n = self.meta[layer, 2 * k], self.meta[layer, 2 * k + 1]
        return pool[o:o + n]

    def layer_views(self, pools: dict, incremental: bool):
        """(S, conv, sums) as the executor's state lists them: per layer a view into the pools
        (None where the layer has no mixer / MLP; sums None when not incremental)."""
        S, conv, sums = [], [], []
        for i, v in enumerate(self.views):
            S.append(self._seg(pools["S"], i, v["S"][0]).reshape(v["S"][1]) if "S" in v else None)
            conv.append(self._seg(pools["CV"], i, v["CV"][0]).reshape(v["CV"][1]) if "CV" in v else None)
            sums.append([None if key not in v else
                         tuple(self._seg(pools[p], i, k) for p, k in zip(("P", "A", "N"), v[key]))
                         for key in ("mx", "ml")])
        return S, conv, (sums if incremental else None)


def _widest(parts) -> type:
    """The unsigned type that holds every part's values (each part is of its own narrowest type)."""
    return max((p.dtype for p in parts), key=lambda t: np.iinfo(t).max, default=np.dtype(np.uint8)).type
