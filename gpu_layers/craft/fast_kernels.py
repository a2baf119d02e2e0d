"""The fast executor's inner loops (gpu_layers/craft/fast.py), compiled by numba: a token through
a compacted layer is a few hundred small array operations, and in numpy each costs a call (about
200 per token at the machine core's width, most of the time); here each block is one call.

Arithmetic is float32 like the stock path, except that sums (norms, projections) accumulate in
float64 and are rounded once: closer to the exact sums than any fp32 summation order, which is all
the executor's exactness argument needs (fast.py's docstring). A term whose factor is an exact
zero is skipped, which is exact (0 * finite = 0, x + 0 = x).
"""
from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True, error_model="numpy")
F32 = np.float32


@_jit
def csc_mv64(colptr, rows, codes, table, n, x):
    """y = M x in float64, for M kept column by column (colptr, rows, and each entry's value as
    table[code]; n rows): only the columns where x is nonzero are visited."""
    acc = np.zeros(n, dtype=np.float64)
    for j in range(x.shape[0]):
        xj = np.float64(x[j])
        if xj != 0.0:
            for k in range(colptr[j], colptr[j + 1]):
                acc[rows[k]] += table[codes[k]] * xj
    return acc


@_jit
def csc_mv(colptr, rows, codes, table, n, x):
    """csc_mv64 rounded once to float32."""
    return csc_mv64(colptr, rows, codes, table, n, x).astype(np.float32)


# Past these bounds the sigmoid in float32 is exactly 0 or 1: exp(89) overflows to inf (1 / inf =
# 0), and exp(-17.5) < 2^-25 (1 + it rounds to 1). _silu returns there what the formula returns
# (x * 0, x) without calling exp: most of a circuit's pre-activations are saturated steps.
SILU_ZERO = F32(-89.0)
SILU_ID = F32(17.5)


@_jit
def _silu(x):
    """x * sigmoid(x) as x * (1 / (1 + exp(-x))), the float32 bits of that formula."""
    if x < SILU_ZERO:
        return x * F32(0.0)
    if x > SILU_ID:
        return x
    return x * (F32(1.0) / (F32(1.0) + np.exp(-x)))


@_jit
def swiglu(gu, n):
    """silu(gate) * up for gu = [gate rows, up rows] (a zero factor gives +0 where the stock
    product gives +-0: only csc_mv reads it, and it skips both)."""
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        g, u = gu[i], gu[n + i]
        if g == F32(0.0) or u == F32(0.0):              # an exact (signed) zero: no exp; the next
            out[i] = F32(0.0)                            # product skips zeros of either sign
        else:
            out[i] = _silu(g) * u
    return out


@_jit
def mixer_step(p, C, Z, H, conv, conv_w, ext, gather, d, qscale, S, g_rows, neg_A, dt_bias, decay,
               gate_open, out_slot, z_gather, gnorm_w, out_sel, dv, eps):
    """One token of a compacted Gated DeltaNet mixer after in_proj (p = [qkv channels, z entries,
    b, a]): the causal conv over the window `conv` (taps `conv_w`, oldest first; updated), SiLU,
    q/k L2 norms, beta, the gate (per token from the a rows when g_rows, else the constant
    `decay`, skipped when it is exactly 1), the delta rule on the kept state S (updated), the
    read-out of the out heads (out_slot: a head's row of the output, -1 for none), their
    gated RMSNorm; returns the out_proj inputs (out_sel)."""
    K1 = conv_w.shape[0]
    if K1 == 1:                                         # the last tap alone: acc = 0 + p w
        for c in range(C):
            p[c] = F32(0.0) + p[c] * conv_w[0, c]
    else:
        for c in range(C):                              # the causal conv, oldest tap first
            acc = F32(0.0)
            for k in range(K1 - 1):
                acc += conv[k, c] * conv_w[k, c]
            acc += p[c] * conv_w[K1 - 1, c]
            for k in range(K1 - 2):
                conv[k, c] = conv[k + 1, c]
            conv[K1 - 2, c] = p[c]
            p[c] = acc
    ext[0] = F32(0.0)
    n = C + Z
    mid = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):      # branch-free: saturated x or x * 0 as _silu gives, 0 -> +0; the rest listed
        x = p[i]
        ext[1 + i] = x if x > SILU_ID else (x * F32(0.0) if x < SILU_ZERO else F32(0.0))
        mid[m] = i
        m += not ((x < SILU_ZERO) | (x > SILU_ID) | (x == F32(0.0)))     # NaN: the formula
    for j in range(m):                                  # the rest: the formula
        ext[1 + mid[j]] = _silu(p[mid[j]])
    e = gather.shape[1] - 2 * d
    q = np.empty(d, dtype=np.float32)
    k = np.empty(d, dtype=np.float32)
    v = np.empty(e, dtype=np.float32)
    kv = np.empty(e, dtype=np.float32)
    out = np.zeros((z_gather.shape[0], e), dtype=np.float32)     # one row per out head
    qi = np.empty(d, dtype=np.int64)                  # the nonzero q and k dims, in order (one-hot
    ki = np.empty(d, dtype=np.int64)                  # keys: one each); zeros add and scale to themselves
    for h in range(H):
        nqz, nkz = 0, 0
        for j in range(d):
            qj, kj = ext[gather[h, j]], ext[gather[h, d + j]]
            q[j], k[j] = qj, kj
            qi[nqz], ki[nkz] = j, j
            nqz += qj != F32(0.0)
            nkz += kj != F32(0.0)
        sq, sk = 0.0, 0.0
        for t in range(nqz):
            sq += np.float64(q[qi[t]]) * q[qi[t]]
        for t in range(nkz):
            sk += np.float64(k[ki[t]]) * k[ki[t]]
        nq = np.sqrt(F32(sq) + F32(1e-6))
        nk = np.sqrt(F32(sk) + F32(1e-6))
        for t in range(nqz):
            q[qi[t]] = (q[qi[t]] / nq) / qscale
        for t in range(nkz):
            k[ki[t]] = k[ki[t]] / nk
        for j in range(e):
            v[j] = ext[gather[h, 2 * d + j]]
        beta = F32(1.0) / (F32(1.0) + np.exp(-p[C + Z + h]))
        if g_rows:
            x = p[C + Z + H + h] + dt_bias[h]
            sp = x if x > F32(20.0) else np.log1p(np.exp(min(x, F32(20.0))))
            g = np.exp(neg_A[h] * sp)
        else:
            g = decay[h]
        if not (gate_open or g == F32(1.0)):
            for j in range(d):
                for c in range(e):
                    S[h, j, c] *= g
        for c in range(e):
            kv[c] = 0.0
        for t in range(nkz):                            # S^T k (one-hot keys: one row)
            j = ki[t]
            for c in range(e):
                kv[c] += k[j] * S[h, j, c]
        for c in range(e):
            kv[c] = (v[c] - kv[c]) * beta
        for t in range(nkz):
            j = ki[t]
            for c in range(e):
                S[h, j, c] += k[j] * kv[c]
        b = out_slot[h]
        if b < 0:
            continue
        so = 0.0
        for t in range(nqz):                            # S^T q
            j = qi[t]
            for c in range(e):
                out[b, c] += q[j] * S[h, j, c]
        for c in range(e):
            so += np.float64(out[b, c]) * out[b, c]
        r = F32(1.0) / np.sqrt(F32(so / dv) + eps)      # mean over all dv dims
        for c in range(e):
            out[b, c] = (gnorm_w[b, c] * (out[b, c] * r)) * ext[z_gather[b, c]]
    flat = out.reshape(-1)
    res = np.empty(out_sel.shape[0], dtype=np.float32)
    for i in range(out_sel.shape[0]):
        res[i] = flat[out_sel[i]]
    return res


# ---- fused per-layer steps: one call per mixer and per MLP, the residual's sum of squares kept
# incrementally (each write adds new^2 - old^2, exact squares of float32 values in float64), so a
# norm no longer sums the whole residual (W terms) at every layer


@_jit
def sum_squares(x, idx):
    s = 0.0
    for i in range(idx.shape[0]):
        s += np.float64(x[idx[i]]) * x[idx[i]]
    return s


@_jit
def add_rows(x, rows, d, ss):
    """x[rows] += d (float32 adds, as numpy's); returns the residual's updated sum of squares."""
    for i in range(rows.shape[0]):
        r = rows[i]
        old = x[r]
        new = old + d[i]
        ss += np.float64(new) * new - np.float64(old) * old
        x[r] = new
    return ss


@_jit
def norm_scale(ss, width, eps):
    """The RMSNorm's float32 factor 1 / sqrt(mean square + eps) (mean square = ss / width)."""
    return F32(1.0) / np.sqrt(F32(ss / width) + eps)


@_jit
def norm_at(x, ss, width, eps, cols, w):
    """Zero-centred RMSNorm of the whole residual x at `cols` (its mean square is ss / width)."""
    r = norm_scale(ss, width, eps)
    out = np.empty(cols.shape[0], dtype=np.float32)
    for j in range(cols.shape[0]):
        out[j] = (x[cols[j]] * r) * w[j]
    return out


@_jit
def norm_mv64(x, ss, width, eps, cols, w, colptr, rows, codes, table, n):
    """M @ RMSNorm(x)[cols] in float64 (M kept column by column over cols)."""
    return csc_mv64(colptr, rows, codes, table, n, norm_at(x, ss, width, eps, cols, w))


@_jit
def norm_mv(x, ss, width, eps, cols, w, colptr, rows, codes, table, n):
    """norm_mv64 rounded once to float32."""
    return norm_mv64(x, ss, width, eps, cols, w, colptr, rows, codes, table, n).astype(np.float32)


@_jit
def mlp_down(x, ss, gu, N, dn_ptr, dn_rows, dn_codes, dn_table, out_rows):
    """x += down(silu(gate) * up) from the gate/up product `gu` (norm_mv's, or inc_norm_mv's);
    returns the updated sum of squares."""
    y = csc_mv(dn_ptr, dn_rows, dn_codes, dn_table, out_rows.shape[0], swiglu(gu, N))
    return add_rows(x, out_rows, y, ss)


@_jit
def head_argmax(x, ss, width, eps, cols, w, colptr, rows, codes, table, V):
    """The greedy token: argmax of the LM head's float32 logits (rows it does not keep are exactly
    0), the first of equal ones, as np.argmax; one pass, no float32 copy."""
    acc = norm_mv64(x, ss, width, eps, cols, w, colptr, rows, codes, table, V)
    best, arg = F32(acc[0]), 0
    for i in range(1, V):
        v = F32(acc[i])
        if v > best:
            best, arg = v, i
    return arg


@_jit
def bounded_argmax(y, rptr, rcol, rcode, table, row_id, g_bptr, g_bcol, g_bval, g_sptr, g_scol, g_smax,
                   g_rptr, g_rows, first_zero):
    """head_argmax's token from the normed head inputs y, visiting only the row groups whose
    bound can reach the best logit (gpu_layers/craft/fast_head.py says why it is the same)."""
    G = g_rptr.shape[0] - 1
    bound = np.empty(G, dtype=np.float64)
    for g in range(G):
        b, mag = 0.0, 0.0
        for k in range(g_bptr[g], g_bptr[g + 1]):
            t = g_bval[k] * np.float64(y[g_bcol[k]])
            b += t
            mag += abs(t)
        for k in range(g_sptr[g], g_sptr[g + 1]):
            t = g_smax[k] * abs(np.float64(y[g_scol[k]]))
            b += t
            mag += t
        bound[g] = b + 1e-9 * mag + 1e-30          # covers the float64 sums' rounding
    best, arg = F32(0.0), first_zero               # rows the head does not keep score exactly 0
    have = first_zero >= 0
    for g in np.argsort(-bound):
        if have and F32(bound[g]) < best:
            break                                   # every later group is bounded lower still
        for i in range(g_rptr[g], g_rptr[g + 1]):
            r = g_rows[i]
            acc = 0.0
            for k in range(rptr[r], rptr[r + 1]):
                yk = np.float64(y[rcol[k]])
                if yk != 0.0:
                    acc += table[rcode[k]] * yk
            v, tok = F32(acc), row_id[r]
            if not have or v > best or (v == best and tok < arg):
                best, arg, have = v, tok, True
    return arg


# ---- incremental projections: between two tokens most of a layer's inputs keep their value (on
# the core, 7 % of the entries the products visit sit in columns that changed), so a projection of
# the normed residual is kept as acc = M (w * x) in float64 and only changed columns are visited;
# the norm's scale r multiplies the sums once (sum_j M_ij ((x_j r) w_j) = r sum_j M_ij (w_j x_j) up
# to float32 rounding of each term, the size of a summation-order difference). cnt[i] counts the
# nonzero inputs row i sums: at 0 its sum is set to an exact 0, as the full product gives.


@_jit
def inc_norm_mv(x, ss, width, eps, cols, w, colptr, rows, codes, table, n, prev, acc, cnt, full):
    """M @ RMSNorm(x)[cols] rounded to float32, from the previous token's sums: `prev` (float64
    w * x[cols] of the previous token), `acc` (float64 M @ prev) and `cnt` (nonzero inputs per
    row) are updated in place; full=True recomputes them from scratch (bounds the rounding the
    updates accumulate)."""
    if full:
        for i in range(n):
            acc[i] = 0.0
            cnt[i] = 0
        for j in range(cols.shape[0]):
            v = np.float64(x[cols[j]]) * w[j]
            prev[j] = v
            if v != 0.0:
                for k in range(colptr[j], colptr[j + 1]):
                    r = rows[k]
                    acc[r] += table[codes[k]] * v
                    cnt[r] += 1
    else:
        for j in range(cols.shape[0]):
            v = np.float64(x[cols[j]]) * w[j]
            old = prev[j]
            if v == old:
                continue
            d = v - old
            prev[j] = v
            if old == 0.0:                                  # a new nonzero input
                for k in range(colptr[j], colptr[j + 1]):
                    r = rows[k]
                    acc[r] += table[codes[k]] * d
                    cnt[r] += 1
            elif v == 0.0:                                  # an input back to zero
                for k in range(colptr[j], colptr[j + 1]):
                    r = rows[k]
                    cnt[r] -= 1
                    if cnt[r] == 0:
                        acc[r] = 0.0
                    else:
                        acc[r] -= table[codes[k]] * old
            else:
                for k in range(colptr[j], colptr[j + 1]):
                    r = rows[k]
                    acc[r] += table[codes[k]] * d
    s = norm_scale(ss, width, eps)
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        out[i] = F32(acc[i] * s)
    return out


# ---- one call a token: every compacted layer's arrays sit in a few flat pools (fast_pack.py), a
# layer's row of `meta` holds (offset, length) of each of its segments, in this order, then its
# scalars. A token through the core's 20 layers was about 110 calls from Python, a quarter of its
# time in the calls and the glue between them.

(MX_COLS, MX_NORM, MX_IN_PTR, MX_IN_ROWS, MX_IN_CODES, MX_IN_TABLE, MX_CONV_W, MX_GATHER, MX_NEG_A,
 MX_DT, MX_DECAY, MX_OUT_SLOT, MX_ZG, MX_GNORM, MX_SEL, MX_OUT_PTR, MX_OUT_ROWS, MX_OUT_CODES,
 MX_OUT_TABLE, MX_XROWS, MX_S, MX_CONV, MX_PREV, MX_ACC, MX_CNT,
 ML_COLS, ML_NORM, ML_GU_PTR, ML_GU_ROWS, ML_GU_CODES, ML_GU_TABLE, ML_DN_PTR, ML_DN_ROWS,
 ML_DN_CODES, ML_DN_TABLE, ML_XROWS, ML_PREV, ML_ACC, ML_CNT) = range(39)
SEGMENTS = 39
(HAS_MX, MX_C, MX_Z, MX_H, MX_D, MX_E, MX_K1, MX_G_ROWS, MX_GATE_OPEN, MX_N_IN, MX_EXT, MX_NOUT,
 HAS_ML, ML_N) = range(2 * SEGMENTS, 2 * SEGMENTS + 14)
META = 2 * SEGMENTS + 14


@_jit
def _seg(pool, m, k):
    o = m[2 * k]
    return pool[o:o + m[2 * k + 1]]


@_jit
def forward_layers(x, ss, width, eps, qscale, dv, inc, full, meta, I, F, R, Cd, T, S, CV, P, A, N):
    """The residual x (updated) through every layer of `meta`, as FastMachine's per-layer calls
    would take it: the in_proj (norm_mv, or inc_norm_mv from the sums in P, A, N when inc),
    mixer_step on the state in S and CV, out_proj; the MLP; returns the residual's sum of
    squares."""
    for layer in range(meta.shape[0]):
        m = meta[layer]
        if m[HAS_MX] != 0:
            C, Z, H, d, e, K1, nout = m[MX_C], m[MX_Z], m[MX_H], m[MX_D], m[MX_E], m[MX_K1], m[MX_NOUT]
            cols, w = _seg(I, m, MX_COLS), _seg(F, m, MX_NORM)
            ptr, rows, codes, table = _seg(I, m, MX_IN_PTR), _seg(R, m, MX_IN_ROWS), _seg(Cd, m, MX_IN_CODES), \
                _seg(T, m, MX_IN_TABLE)
            if inc:
                p = inc_norm_mv(x, ss, width, eps, cols, w, ptr, rows, codes, table, m[MX_N_IN],
                                _seg(P, m, MX_PREV), _seg(A, m, MX_ACC), _seg(N, m, MX_CNT), full)
            else:
                p = norm_mv(x, ss, width, eps, cols, w, ptr, rows, codes, table, m[MX_N_IN])
            res = mixer_step(p, C, Z, H, _seg(CV, m, MX_CONV).reshape((K1 - 1, C)),
                             _seg(F, m, MX_CONV_W).reshape((K1, C)), np.empty(m[MX_EXT], dtype=np.float32),
                             _seg(I, m, MX_GATHER).reshape((H, 2 * d + e)), d, qscale,
                             _seg(S, m, MX_S).reshape((H, d, e)), m[MX_G_ROWS] != 0, _seg(F, m, MX_NEG_A),
                             _seg(F, m, MX_DT), _seg(F, m, MX_DECAY), m[MX_GATE_OPEN] != 0,
                             _seg(I, m, MX_OUT_SLOT), _seg(I, m, MX_ZG).reshape((nout, e)),
                             _seg(F, m, MX_GNORM).reshape((nout, e)), _seg(I, m, MX_SEL), dv, eps)
            if res.shape[0] > 0:
                xrows = _seg(I, m, MX_XROWS)
                y = csc_mv(_seg(I, m, MX_OUT_PTR), _seg(R, m, MX_OUT_ROWS), _seg(Cd, m, MX_OUT_CODES),
                           _seg(T, m, MX_OUT_TABLE), xrows.shape[0], res)
                ss = add_rows(x, xrows, y, ss)
        if m[HAS_ML] != 0:
            n = m[ML_N]
            cols, w = _seg(I, m, ML_COLS), _seg(F, m, ML_NORM)
            ptr, rows, codes, table = _seg(I, m, ML_GU_PTR), _seg(R, m, ML_GU_ROWS), _seg(Cd, m, ML_GU_CODES), \
                _seg(T, m, ML_GU_TABLE)
            if inc:
                gu = inc_norm_mv(x, ss, width, eps, cols, w, ptr, rows, codes, table, 2 * n,
                                 _seg(P, m, ML_PREV), _seg(A, m, ML_ACC), _seg(N, m, ML_CNT), full)
            else:
                gu = norm_mv(x, ss, width, eps, cols, w, ptr, rows, codes, table, 2 * n)
            ss = mlp_down(x, ss, gu, n, _seg(I, m, ML_DN_PTR), _seg(R, m, ML_DN_ROWS), _seg(Cd, m, ML_DN_CODES),
                          _seg(T, m, ML_DN_TABLE), _seg(I, m, ML_XROWS))
    return ss
