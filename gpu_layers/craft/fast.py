"""A compact exact executor for a `CompiledMachine`: the compiled layers alone, at machine width W,
in fp32, computing only what their sparsity leaves (numpy for the compaction, numba-compiled
loops for each token: gpu_layers/craft/fast_kernels.py).

    fm = FastMachine(compiled_machine)
    st = fm.new_state()
    tok = fm.step(st, token_id)              # one token on the recurrent path -> greedy next token
    logits = fm.step(st, token_id, logits=True)
    fm.prefill(st, ids)                      # many tokens (a loop of step)
    new = fm.generate(ids, max_new_tokens, stop_ids=(...), state=st)     # greedy, like stock generate
    st.get_recurrent_state(layer)            # (1, value heads, d_k, d_v): transformers' cache layout

What it computes is the stock transformers 5.x Qwen3.5 decoder (`models/qwen3_5/modeling_qwen3_5.py`)
of `machine_model.build_machine_model`, term for term: zero-centred RMSNorm `x / sqrt(mean(x^2) + eps)
* (1 + w)` over the whole W-dim residual; `in_proj_qkv` -> depthwise causal conv -> SiLU -> q, k, v;
q, k L2-normalised (eps 1e-6), q / sqrt(d_k); beta = sigmoid(in_proj_b x); g = -exp(A_log) *
softplus(in_proj_a x + dt_bias); per value head the recurrent gated delta rule `S *= exp(g); S += k
(beta (v - S^T k))^T; o = S^T q`; gated RMSNorm `norm(o) * w * silu(z)`; `out_proj`; MLP `down(silu(
gate x) * up x)`; final norm; LM head; argmax (first index on ties, as torch.argmax; it visits only the head's rows
that can win, gpu_layers/craft/fast_head.py).

Why the tokens are the stock path's tokens:
  * Everything left out is an exact zero in the stock computation. A residual dim, projection row,
    conv channel, MLP neuron or LM-head column whose weights are all 0 contributes 0 * (finite) = 0
    to its sums (x + 0 == x); a conv channel with a zero in_proj row stays 0 through SiLU (silu(0) =
    0), so it adds nothing to q/k's L2 norms or to the delta rule; a value head whose k or v rows are
    all 0 keeps S == 0 forever (the update is k (beta (v - S^T k))^T with k = 0 or v = S^T k = 0) and
    outputs 0, which the gated norm maps to 0; likewise, inside a live head, the state row of a key
    dim where k is always 0 and the column of a value dim where v is always 0 stay exactly 0, so S is
    kept only on the other rows and columns (the gated norm still divides by the full d_v); a head
    with no out_proj columns only keeps state (kept for inspection, not for tokens); conv taps that
    are all 0 drop out; a gate whose in_proj_a rows are all 0 is a constant (skipped when exactly 1). The inert full-attention layer
    of the machine-only model adds exact zeros (zero o_proj and MLP: tested), so it is not run.
    An LM-head row of zeros gives logit exactly 0 and is filled in as 0 before the argmax.
  * What is computed uses the same formulas, in the same order, in fp32, except that sums (norms,
    projections) accumulate in fp64 and are rounded once (the residual's sum of squares for the
    RMSNorms is kept as the token passes the layers: each write adds new^2 - old^2, exact squares
    in fp64, instead of summing all W entries at every norm), and libm differs: ~1e-7 relative.
    By default the in_proj and gate/up sums are incremental (`new_state(incremental=True)`;
    fast_kernels.inc_norm_mv): between tokens most inputs keep their value (on the core, 7 % of
    the visited entries sit in columns that changed), so acc = M (w * x) is kept in fp64, only the
    changed columns are visited, and the norm's scale multiplies each sum once; a row whose inputs
    are all zero is set to an exact 0 (a count of its nonzero inputs), and every RESYNC tokens the
    sums are recomputed in full. Its error is inside stock's own float32 envelope (each stock term
    is rounded twice, (x r) then * w, and summed in float32): at most 4 * 2^-24 * sum|terms|
    (tests/test_fast_incremental.py), 1.34e-7 measured on the core. The compiled circuits
    re-digitize every MLP step with margins far above that (docs/blocks.md, DESIGN section 3) and
    their logits win by >= 2, so those differences never change a token. The converse, that stock's
    own float32 errors never change one either, is a property of each circuit's wide steps, not of
    this executor: craft/precision.py bounds it per step (the core: docs/machine.md section 37,
    tests/test_machine_core.py). That is a claim about the circuits, so the tests check it: tokens equal to stock transformers' on prefill (the chunked
    rule), decode with the cache and stock `generate`, and the recurrent state decodes to the same
    memories (tests/test_fast_executor.py).

The executor refuses (FastMachineError) what it was not written for: an inconsistent machine (shapes,
keys, config values), non-finite weights (0 * inf is not 0, so skipping zeros would not be exact),
value heads that are not a multiple of key heads, and any dtype but float32 (the stock bf16 path
rounds activations at each op; that is not reimplemented).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from . import fast_kernels as K
from .compiled import LAYER_KEYS, CompiledMachine
from .fast_head import BoundedHead
from .fast_pack import Packed

F32 = np.float32
SHAPE_KEYS = ("intermediate_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
              "linear_value_head_dim", "linear_conv_kernel_dim", "rms_norm_eps")


class FastMachineError(ValueError):
    """A CompiledMachine the fast executor cannot run exactly."""


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().astype(F32, copy=True)


def _f32(a) -> np.ndarray:
    """A float32 numpy array as is (no copy: the streamed path's large embeddings), else _np."""
    return a if isinstance(a, np.ndarray) and a.dtype == F32 else _np(a)


def _softplus(x):
    # torch.nn.functional.softplus (beta 1, threshold 20)
    return np.where(x > F32(20.0), x, np.log1p(np.exp(np.minimum(x, F32(20.0)))))


@dataclass
class _Mixer:
    """One layer's mixer restricted to what can be nonzero. Per live value head a: the key dims D_a
    where q or k can be nonzero (padded to d), the value dims V_a where v can be nonzero (padded to
    e); S is kept as (H, d, e): the rest of the stock state is exactly 0 forever."""
    heads: np.ndarray          # live value heads (state may become nonzero), indices into [0, Hv)
    kdims: np.ndarray          # (H, d) the key dim of each kept state row, -1 = padding
    vdims: np.ndarray          # (H, e) the value dim of each kept state column, -1 = padding
    cols: np.ndarray           # residual dims read by the projections
    norm_w: np.ndarray         # (1 + input_layernorm.weight)[cols]
    w_in: np.ndarray           # (C + Z + H [+ H], len(cols)): live qkv channels, live z entries, b [, a]
    C: int                     # live conv channels
    Z: int                     # live z entries
    conv_w: np.ndarray         # (K, C) taps of the live channels (oldest first); (1, C) if last tap only
    gather: np.ndarray         # (H, 2 d + e) index into [0, conv out...]: 0 = constant zero
    neg_A: np.ndarray          # (H,) -exp(A_log)
    dt_bias: np.ndarray        # (H,)
    decay: np.ndarray | None   # (H,) exp(g) when in_proj_a's live rows are all 0 (g constant)
    gate_open: bool            # that constant decay is exactly 1.0: S *= 1 is skipped
    out_heads: np.ndarray      # positions (in heads) of heads whose output reaches out_proj
    out_slot: np.ndarray       # (H,) each head's index in out_heads, -1 if it has none
    z_gather: np.ndarray       # (len(out_heads), e) index into ext's z part (0 = constant zero)
    gnorm_w: np.ndarray        # (len(out_heads), e) linear_attn.norm.weight at the kept value dims
    out_sel: np.ndarray        # flat indices into (len(out_heads) * e) of the used out_proj columns
    w_out: np.ndarray          # (len(out_rows), len(out_sel))
    out_rows: np.ndarray
    ext_size: int              # 1 + C + Z: [0, silu(conv out), silu(z)], what gather indexes


@dataclass
class _MLP:
    cols: np.ndarray
    norm_w: np.ndarray         # (1 + post_attention_layernorm.weight)[cols]
    w_gu: np.ndarray           # (2 N, len(cols)): gate rows then up rows of the live neurons
    N: int
    w_down: np.ndarray         # (len(rows), N)
    rows: np.ndarray


@dataclass
class _Layer:
    mixer: _Mixer | None
    mlp: _MLP | None


@dataclass
class FastState:
    """The executor's recurrent state after `tokens`: per layer the live heads' S (H, d_k, d_v), the
    conv window of the live channels and, when incremental, the projections' sums, each a view into
    `pools` (one array per kind: fast_pack.py). `get_recurrent_state(layer)` gives transformers'
    layout, so gpu_layers.craft.state / gpu_layers.machine.inspect_state read it like a cache."""

    machine: "FastMachine"
    pools: dict                                # fast_pack.STATE_POOLS: name -> flat array
    incremental: bool                          # the in_proj and gate/up sums kept between tokens
    tokens: list = field(default_factory=list)
    S: list = field(init=False)                # per layer: (H_live, dk, dv) float32 or None
    conv: list = field(init=False)             # per layer: (K - 1, C) float32 window or None
    sums: list | None = field(init=False)      # incremental projections (None: computed in full): per
                                               # layer [mixer, mlp], each None or (prev, acc, cnt)

    def __post_init__(self):
        self.S, self.conv, self.sums = self.machine.packed.layer_views(self.pools, self.incremental)

    def get_recurrent_state(self, layer: int, state_idx: int = 0) -> torch.Tensor:
        fm = self.machine
        if not 0 <= layer < len(fm.layers):
            raise IndexError(f"layer {layer}: the machine has {len(fm.layers)} compiled layers")
        full = np.zeros((1, fm.Hv, fm.dk, fm.dv), dtype=F32)
        mx = fm.layers[layer].mixer
        if mx is not None:
            for a, h in enumerate(mx.heads):
                kd, vd = mx.kdims[a], mx.vdims[a]
                kd, vd = kd[kd >= 0], vd[vd >= 0]
                full[0, h][np.ix_(kd, vd)] = self.S[layer][a, :len(kd), :len(vd)]
        return torch.from_numpy(full)

    def recurrent_states(self) -> dict[int, torch.Tensor]:
        return {i: self.get_recurrent_state(i) for i in range(len(self.S))}

    def copy(self) -> "FastState":
        return FastState(self.machine, {k: a.copy() for k, a in self.pools.items()}, self.incremental,
                         list(self.tokens))


def _csr(M: np.ndarray):
    """(row starts (len rows + 1), column indices, values) of a dense matrix's nonzero entries."""
    r, c = np.nonzero(M)
    ptr = np.zeros(M.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=M.shape[0]), out=ptr[1:])
    return ptr, c.astype(np.int32), np.ascontiguousarray(M[r, c], dtype=F32)


def _nz_rows(w: np.ndarray) -> np.ndarray:
    return np.flatnonzero((w != 0).any(1))


class _Sparse:
    """A projection kept as its nonzero entries, column by column: M x (fast_kernels.csc_mv,
    inc_norm_mv) visits only the columns where x is nonzero (a compiled layer's projections are 98-99.8 % zeros,
    and many of their inputs are mostly zero: the out_proj and down_proj inputs, 1-20 % nonzero;
    the LM head's, 13 %). Measured on the core, this beats a row-by-row product even where the
    input is dense (the normed residual, ~85 %). A row without nonzeros gives exactly 0.

    An entry is 3 bytes where it was 12 (the core's layers and head hold 2 M of them, read once
    a token): its row in the narrowest unsigned type that holds the row count, and its value as
    a code into `table`, the matrix's distinct values (a compiled circuit has a few dozen; the
    value read back is the same float32, held as float64)."""
    __slots__ = ("shape", "colptr", "rows", "codes", "table")

    def __init__(self, M: np.ndarray, rows: np.ndarray | None = None, n_rows: int | None = None):
        """From a dense M, or from the rows `rows` (of n_rows) of a larger matrix, already cut out."""
        if rows is None:
            rows, n_rows = np.arange(M.shape[0]), M.shape[0]
        c, r = np.nonzero(M.T)                      # column-major order: by column, then row
        self.shape = (int(n_rows), M.shape[1])
        self.colptr = np.zeros(M.shape[1] + 1, dtype=np.int64)
        np.cumsum(np.bincount(c, minlength=M.shape[1]), out=self.colptr[1:])
        self.rows = np.ascontiguousarray(np.asarray(rows)[r], dtype=_narrowest(n_rows))
        table, codes = np.unique(np.asarray(M[r, c], dtype=F32), return_inverse=True)
        self.table = table.astype(np.float64)
        self.codes = np.ascontiguousarray(codes.reshape(-1), dtype=_narrowest(len(table)))

    @property
    def size(self) -> int:
        """The entries kept."""
        return len(self.codes)

    def mv_args(self) -> tuple:
        """(colptr, rows, codes, table): a matrix as the kernels take it."""
        return self.colptr, self.rows, self.codes, self.table


def _narrowest(n: int):
    """The narrowest unsigned integer type holding 0 .. n - 1."""
    return next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64) if n <= np.iinfo(t).max + 1)


_CHUNK_ROWS = 8192


class FastMachine:
    def __init__(self, compiled: CompiledMachine, dtype=torch.float32):
        if dtype != torch.float32:
            raise FastMachineError(f"dtype {dtype}: the fast executor reimplements the float32 path only "
                                   "(stock bf16 rounds activations at every op; that is not reimplemented)")
        try:
            compiled.check()
        except ValueError as e:
            raise FastMachineError(f"inconsistent CompiledMachine: {e}") from e
        self._shapes(compiled.layer_shapes, compiled.width, compiled.vocab_size)
        self.layers = [self._compact(i, L) for i, L in enumerate(compiled.layers)]
        self._head(compiled.embed, compiled.unembed, compiled.final_norm)

    @classmethod
    def streamed(cls, layer_shapes: dict, width: int, layers, embed, unembed, final_norm) -> "FastMachine":
        """Build from compiled layers produced one at a time (an iterable of layer dicts, each
        compacted and dropped before the next: gpu_layers.craft.assemble.compile_fast)."""
        self = cls.__new__(cls)
        if tuple(embed.shape) != tuple(unembed.shape) or embed.shape[1] != width or tuple(final_norm.shape) != (width,):
            raise FastMachineError("embed / unembed / final_norm do not match the width")
        self._shapes(layer_shapes, width, embed.shape[0])
        self.layers = []
        for i, L in enumerate(layers):
            missing = set(LAYER_KEYS) - set(L)
            if missing:
                raise FastMachineError(f"compiled layer {i} lacks {sorted(missing)}")
            self.layers.append(self._compact(i, L))
            del L
        self._head(embed, unembed, final_norm)
        return self

    def _shapes(self, s: dict, width: int, vocab: int):
        missing = [k for k in SHAPE_KEYS if k not in s]
        if missing:
            raise FastMachineError(f"CompiledMachine.layer_shapes lacks {missing}")
        self.W, self.V = width, vocab
        self.Hk, self.Hv = int(s["linear_num_key_heads"]), int(s["linear_num_value_heads"])
        self.dk, self.dv = int(s["linear_key_head_dim"]), int(s["linear_value_head_dim"])
        self.K, self.I, self.eps = int(s["linear_conv_kernel_dim"]), int(s["intermediate_size"]), F32(s["rms_norm_eps"])
        if self.Hk <= 0 or self.Hv % self.Hk:
            raise FastMachineError(f"{self.Hv} value heads are not a multiple of {self.Hk} key heads")

    def _head(self, embed, unembed, final_norm):
        # embedding and LM head as sparse rows (the machine vocabulary's rows have a few dozen
        # nonzeros of W): a row's nonzero entries, in column order. Either may come as dense
        # matrices or already sparse (assemble.SparseRows: compile_fast never holds them dense)
        fn = _np(final_norm)
        self._finite("final_norm", fn)
        if hasattr(embed, "ptr"):
            self._finite("embed", embed.val)
            self.embed_ptr, self.embed_idx, self.embed_val = embed.ptr, embed.idx, embed.val
        else:
            E = _f32(embed)
            self._finite("embed", E)
            self.embed_ptr, self.embed_idx, self.embed_val = _csr(E)
            del E
        if hasattr(unembed, "ptr"):
            self._finite("unembed", unembed.val)
            rows = np.flatnonzero(np.diff(unembed.ptr))
            self.head_cols = np.unique(unembed.idx)
            sub = np.zeros((len(rows), len(self.head_cols)), dtype=F32)
            where = np.repeat(np.arange(len(rows)), np.diff(unembed.ptr)[rows])    # each entry's row
            sub[where, np.searchsorted(self.head_cols, unembed.idx)] = unembed.val
            self.head = _Sparse(sub, rows, self.V)
        else:
            U = _f32(unembed)
            self._finite("unembed", U)
            live_rows, live_cols = np.zeros(len(U), dtype=bool), np.zeros(U.shape[1], dtype=bool)
            for a in range(0, len(U), _CHUNK_ROWS):      # in chunks: the core's head is 4 GB of fp32
                nz = U[a:a + _CHUNK_ROWS] != 0
                live_rows[a:a + _CHUNK_ROWS] = nz.any(1)
                live_cols |= nz.any(0)
            rows, self.head_cols = np.flatnonzero(live_rows), np.flatnonzero(live_cols)
            self.head = _Sparse(U[np.ix_(rows, self.head_cols)], rows, self.V)   # rows of zeros: logit 0
            del U
        self.final_w = (F32(1.0) + fn)[self.head_cols]
        self.bounded_head = BoundedHead(*self.head.mv_args(), self.V)

    # ---- compaction -------------------------------------------------------------------------

    @staticmethod
    def _finite(name, a):
        flat = a.reshape(-1)
        if not all(np.isfinite(flat[i:i + (1 << 24)]).all() for i in range(0, flat.size, 1 << 24)):
            raise FastMachineError(f"{name} has non-finite values: skipping zero terms would not be exact")

    def _compact(self, i: int, layer: dict) -> _Layer:
        W, Hk, Hv, dk, dv, K, I = self.W, self.Hk, self.Hv, self.dk, self.dv, self.K, self.I
        key_dim, val_dim = Hk * dk, Hv * dv
        conv_dim = 2 * key_dim + val_dim
        want = {"input_layernorm.weight": (W,), "linear_attn.in_proj_qkv.weight": (conv_dim, W),
                "linear_attn.conv1d.weight": (conv_dim, 1, K), "linear_attn.in_proj_z.weight": (val_dim, W),
                "linear_attn.in_proj_b.weight": (Hv, W), "linear_attn.in_proj_a.weight": (Hv, W),
                "linear_attn.dt_bias": (Hv,), "linear_attn.A_log": (Hv,), "linear_attn.norm.weight": (dv,),
                "linear_attn.out_proj.weight": (W, val_dim), "post_attention_layernorm.weight": (W,),
                "mlp.gate_proj.weight": (I, W), "mlp.up_proj.weight": (I, W), "mlp.down_proj.weight": (W, I)}
        assert set(want) == set(LAYER_KEYS)
        t = {}
        for k, shape in want.items():
            if k not in layer:
                raise FastMachineError(f"compiled layer {i} lacks {k}")
            if tuple(layer[k].shape) != shape:
                raise FastMachineError(f"compiled layer {i} {k}: shape {tuple(layer[k].shape)}, but the "
                                       f"machine's layer_shapes give {shape}")
            t[k] = _f32(layer[k])      # numpy float32 (streamed layers) is read in place
            self._finite(f"compiled layer {i} {k}", t[k])
        return _Layer(self._compact_mixer(t), self._compact_mlp(t))

    def _compact_mixer(self, t) -> _Mixer | None:
        Hk, Hv, dk, dv = self.Hk, self.Hv, self.dk, self.dv
        rep = Hv // Hk
        key_dim = Hk * dk
        qkv, conv = t["linear_attn.in_proj_qkv.weight"], t["linear_attn.conv1d.weight"][:, 0, :]
        live = (qkv != 0).any(1) & (conv != 0).any(1)          # channels that can be nonzero after the conv

        def chans(h):                                          # value head h's q, k (its key head's), v channels
            kh = h // rep
            q = np.arange(kh * dk, (kh + 1) * dk)
            return q, key_dim + q, 2 * key_dim + np.arange(h * dv, (h + 1) * dv)
        heads = [h for h in range(Hv) if live[chans(h)[1]].any() and live[chans(h)[2]].any()]
        if not heads:
            return None                                        # S stays 0, every head outputs exact 0
        D = [np.flatnonzero(live[chans(h)[0]] | live[chans(h)[1]]) for h in heads]
        E = [np.flatnonzero(live[chans(h)[2]]) for h in heads]
        d, e, H = max(map(len, D)), max(map(len, E)), len(heads)
        kdims, vdims = np.full((H, d), -1), np.full((H, e), -1)
        used = sorted({int(c) for h in heads for c in np.concatenate(chans(h)) if live[c]})
        pos = {c: j + 1 for j, c in enumerate(used)}           # 0: the constant zero
        gather = np.zeros((H, 2 * d + e), dtype=np.int64)
        for a, h in enumerate(heads):
            q, k, v = chans(h)
            kdims[a, :len(D[a])], vdims[a, :len(E[a])] = D[a], E[a]
            for j, dd in enumerate(D[a]):
                gather[a, j], gather[a, d + j] = pos.get(int(q[dd]), 0), pos.get(int(k[dd]), 0)
            for j, dd in enumerate(E[a]):
                gather[a, 2 * d + j] = pos.get(int(v[dd]), 0)
        zw, ow, nw = t["linear_attn.in_proj_z.weight"], t["linear_attn.out_proj.weight"], t["linear_attn.norm.weight"]
        out_heads = [a for a, h in enumerate(heads)
                     if live[chans(h)[0]].any() and (zw[h * dv + E[a]] != 0).any()
                     and (ow[:, h * dv + E[a]] != 0).any() and (nw[E[a]] != 0).any()]
        z_rows, out_src, out_sel = [], [], []
        z_gather = np.zeros((len(out_heads), e), dtype=np.int64)
        gnorm_w = np.zeros((len(out_heads), e), dtype=F32)
        for b, a in enumerate(out_heads):
            h = heads[a]
            for j, dd in enumerate(E[a]):
                gnorm_w[b, j] = nw[dd]
                if (zw[h * dv + dd] != 0).any():
                    z_rows.append(h * dv + dd)
                    z_gather[b, j] = len(used) + len(z_rows)      # into [0, conv out (C), z (Z)]
                if (ow[:, h * dv + dd] != 0).any():
                    out_src.append(h * dv + dd)
                    out_sel.append(b * e + j)
        z_rows, out_src = np.array(z_rows, dtype=np.int64), np.array(out_src, dtype=np.int64)
        out_rows = _nz_rows(ow[:, out_src]) if len(out_src) else np.zeros(0, dtype=np.int64)
        heads = np.array(heads, dtype=np.int64)
        b_w, a_w = t["linear_attn.in_proj_b.weight"][heads], t["linear_attn.in_proj_a.weight"][heads]
        neg_A, dt_bias = -np.exp(t["linear_attn.A_log"][heads]), t["linear_attn.dt_bias"][heads]
        decay = None
        if not (a_w != 0).any():       # a == 0 exactly on every token: g is a compile-time constant
            decay = np.exp(neg_A * _softplus(np.zeros_like(dt_bias) + dt_bias))
            a_w = a_w[:0]
        out_slot = np.full(len(heads), -1, dtype=np.int64)
        out_slot[out_heads] = np.arange(len(out_heads))
        used = np.array(used, dtype=np.int64)
        rows = np.concatenate([qkv[used], zw[z_rows], b_w, a_w], 0)
        cols = np.flatnonzero((rows != 0).any(0))
        cw = np.ascontiguousarray(conv[used].T)                # (K, C)
        last_only = not (cw[:-1] != 0).any()
        return _Mixer(heads=heads, kdims=kdims, vdims=vdims, cols=cols,
                      norm_w=(F32(1.0) + t["input_layernorm.weight"])[cols],
                      w_in=_Sparse(rows[:, cols]), C=len(used), Z=len(z_rows),
                      conv_w=np.ascontiguousarray(cw[-1:] if last_only else cw),
                      gather=gather, neg_A=neg_A, dt_bias=dt_bias, decay=decay,
                      gate_open=decay is not None and bool((decay == 1.0).all()),
                      out_heads=np.array(out_heads, dtype=np.int64), out_slot=out_slot,
                      z_gather=z_gather, gnorm_w=gnorm_w,
                      out_sel=np.array(out_sel, dtype=np.int64),
                      w_out=_Sparse(ow[np.ix_(out_rows, out_src)]), out_rows=out_rows,
                      ext_size=1 + len(used) + len(z_rows))

    def _compact_mlp(self, t) -> _MLP | None:
        g, u, d = t["mlp.gate_proj.weight"], t["mlp.up_proj.weight"], t["mlp.down_proj.weight"]
        live = np.flatnonzero((g != 0).any(1) & (u != 0).any(1) & (d != 0).any(0))
        if len(live) == 0:
            return None                                        # down(silu(gate x) * up x) == 0
        gu = np.concatenate([g[live], u[live]], 0)
        cols = np.flatnonzero((gu != 0).any(0))
        rows = _nz_rows(d[:, live])
        return _MLP(cols=cols, norm_w=(F32(1.0) + t["post_attention_layernorm.weight"])[cols],
                    w_gu=_Sparse(gu[:, cols]), N=len(live),
                    w_down=_Sparse(d[np.ix_(rows, live)]), rows=rows)

    # ---- execution --------------------------------------------------------------------------

    incremental = True        # new states keep the projections' sums between tokens (class default:
    RESYNC = 1024             # also for pickled machines); sums recomputed in full every RESYNC tokens

    def new_state(self, incremental: bool | None = None) -> FastState:
        """A fresh state. incremental (default: self.incremental): the in_proj and gate/up sums
        are updated from the columns that changed since the previous token (K.inc_norm_mv)."""
        inc = bool(self.incremental if incremental is None else incremental)
        return FastState(self, self.packed.new_pools(inc), inc)

    @property
    def packed(self) -> Packed:
        """The layers in flat pools (fast_pack.py): derived on first use, not pickled."""
        pk = self.__dict__.get("_packed")
        if pk is None:
            pk = self.__dict__["_packed"] = Packed(self)
        return pk

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_packed"}

    def _forward(self, state: FastState, token_id: int):
        """One token through every compiled layer (recurrent path, one call: K.forward_layers):
        the final residual and its sum of squares (kept incrementally: K.add_rows)."""
        if not 0 <= token_id < self.V:
            raise IndexError(f"token {token_id} outside the machine vocabulary of {self.V}")
        x = np.zeros(self.W, dtype=F32)
        a, b = self.embed_ptr[token_id], self.embed_ptr[token_id + 1]
        x[self.embed_idx[a:b]] = self.embed_val[a:b]
        ss = K.sum_squares(x, self.embed_idx[a:b])
        pk, p = self.packed, state.pools
        full = len(state.tokens) % self.RESYNC == 0
        ss = K.forward_layers(x, ss, float(self.W), self.eps, F32(self.dk ** 0.5), float(self.dv),
                              state.incremental, full, pk.meta, *pk.pools,
                              p["S"], p["CV"], p["P"], p["A"], p["N"])
        state.tokens.append(int(token_id))
        return x, ss

    def step(self, state: FastState, token_id: int, logits: bool = False):
        """Feed one token; returns the greedy next token (int), or a copy of the logits (V,) as a
        torch tensor when logits=True."""
        x, ss = self._forward(state, int(token_id))
        h = self.head
        if not logits:                                     # the same token as K.head_argmax
            return self.bounded_head.argmax(x, ss, float(self.W), self.eps, self.head_cols, self.final_w)
        lg = K.norm_mv(x, ss, float(self.W), self.eps, self.head_cols, self.final_w, *h.mv_args(), self.V)
        return torch.from_numpy(lg)

    def prefill(self, state: FastState, ids) -> int | None:
        """Feed many tokens (the recurrent step in a loop: exact); returns the greedy next token."""
        tok = None
        for t in ids:
            tok = self.step(state, int(t))
        return tok

    def teacher_forced(self, ids) -> list[int]:
        """The greedy prediction after every position of ids, from a fresh state."""
        st = self.new_state()
        return [self.step(st, int(t)) for t in ids]

    def generate(self, prompt_ids, max_new_tokens: int, stop_ids=(), state: FastState | None = None) -> list[int]:
        """Greedy decoding, as stock `model.generate(do_sample=False)`: the new tokens (the last one,
        like stock generate's, not fed). With `state`, prompt_ids is the whole sequence so far and only
        the tokens the state has not seen are fed (as stock generate with a carried cache)."""
        ids = [int(t) for t in prompt_ids]
        if state is None:
            state = self.new_state()
        seen = state.tokens
        if ids[:len(seen)] != seen:
            raise ValueError("prompt_ids does not start with the tokens the state has already seen")
        if len(ids) == len(seen):
            raise ValueError("no new prompt token to feed (the state has seen the whole prompt)")
        stop = {int(s) for s in stop_ids}
        tok = self.prefill(state, ids[len(seen):])
        if max_new_tokens <= 0:
            return []
        out = [tok]
        while len(out) < max_new_tokens and tok not in stop:
            tok = self.step(state, tok)
            out.append(tok)
        return out

    def describe(self) -> str:
        """What the compaction kept, per layer."""
        lines = [f"W={self.W} V={self.V} layers={len(self.layers)} LM head {len(self.head.rows)} rows x "
                 f"{len(self.head_cols)} cols"]
        for i, L in enumerate(self.layers):
            m, p = L.mixer, L.mlp
            mix = "mixer -" if m is None else (f"mixer heads {len(m.heads)} (out {len(m.out_heads)}) in {m.w_in.shape} "
                                               f"out {m.w_out.shape}")
            mlp = "mlp -" if p is None else f"mlp neurons {p.N} in {p.w_gu.shape} down {p.w_down.shape}"
            lines.append(f"  L{i}: {mix}; {mlp}")
        return "\n".join(lines)
