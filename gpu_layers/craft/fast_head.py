"""The LM head's greedy token without computing every logit: the same token as scoring all of them
(`fast_kernels.head_argmax`), proved per token, whatever the residual holds.

A machine head has ~75,000 live rows over a few hundred columns (1.3 M entries: a fifth of a
token's time on the core) but a token's logit is dominated by a few large weights (its kind:
`2000 * more` for `<d>`, `1000 * has_next` for `<g>`, ...) plus many small +-2 bit terms. Rows that
share their large weights (same columns, same values) form a group; for the group, with y the
normed residual at the head's columns,

    logit(row) = sum_big w y + sum_small w y  <=  sum_big w y + sum_small max_group|w| |y|  =  bound

(each product of a float32 y and a float32 weight is exact in float64; the sums' rounding is
covered by a relative slack). Groups are visited from the largest bound down; a group is skipped
once float32(bound) is below the best float32 logit found, so every skipped row's float32 logit is
strictly below the winner's and cannot win or tie. Logits of the visited rows are summed exactly as
the column-by-column product sums them (float64, ascending column, zero inputs skipped), so the
winner and its tie-breaking (first index) are those of the full argmax. Rows the head does not
keep score exactly 0: the first of them is one more candidate.
"""
from __future__ import annotations

import numpy as np

from . import fast_kernels as K

HEAD_BIG = 20.0   # |weight| from which an entry is part of its row's group key (speed only)


class BoundedHead:
    """The head's rows as CSR (column indices into the head's kept columns) and their groups."""

    def __init__(self, colptr, rows, codes, table, n_rows: int):
        n_cols = len(colptr) - 1
        col = np.repeat(np.arange(n_cols), np.diff(colptr))
        r = rows.astype(np.int64)
        order = np.lexsort((col, r))                           # by row, then ascending column
        r, col, codes = r[order], col[order], codes[order]
        live, starts = np.unique(r, return_index=True)
        ends = np.r_[starts[1:], len(r)]
        self.rptr = np.r_[starts, len(r)].astype(np.int64)
        self.rcol = col.astype(np.int32)
        self.rcode = np.ascontiguousarray(codes)
        self.table = np.asarray(table, dtype=np.float64)
        self.row_id = live.astype(np.int64)                    # vocabulary index of each kept row
        dead = np.ones(n_rows, dtype=bool)
        dead[live] = False
        self.first_zero = int(np.argmax(dead)) if dead.any() else -1
        vals = self.table[self.rcode]
        groups: dict[tuple, int] = {}
        member = np.empty(len(live), dtype=np.int64)
        for i, (a, b) in enumerate(zip(starts, ends)):
            big = tuple((int(c), float(v)) for c, v in zip(self.rcol[a:b], vals[a:b]) if abs(v) >= HEAD_BIG)
            member[i] = groups.setdefault(big, len(groups))
        G = len(groups)
        order = np.argsort(member, kind="stable")               # rows of a group in vocabulary order
        self.g_rows = order.astype(np.int64)
        self.g_rptr = np.r_[0, np.cumsum(np.bincount(member, minlength=G))].astype(np.int64)
        bptr, bcol, bval, sptr, scol, smax = [0], [], [], [0], [], []
        for key, g in sorted(groups.items(), key=lambda kv: kv[1]):
            bcol += [c for c, _ in key]
            bval += [v for _, v in key]
            bptr.append(len(bcol))
            rs = self.g_rows[self.g_rptr[g]:self.g_rptr[g + 1]]
            small = {}                  # the rest (every row of the group has the key's large entries)
            for i in rs:
                for k in range(self.rptr[i], self.rptr[i + 1]):
                    if abs(vals[k]) < HEAD_BIG:
                        c = int(self.rcol[k])
                        small[c] = max(small.get(c, 0.0), abs(float(vals[k])))
            scol += sorted(small)
            smax += [small[c] for c in sorted(small)]
            sptr.append(len(scol))
        self.g_bptr, self.g_bcol = np.array(bptr, dtype=np.int64), np.array(bcol, dtype=np.int32)
        self.g_bval = np.array(bval, dtype=np.float64)
        self.g_sptr, self.g_scol = np.array(sptr, dtype=np.int64), np.array(scol, dtype=np.int32)
        self.g_smax = np.array(smax, dtype=np.float64)

    @property
    def groups(self) -> int:
        return len(self.g_rptr) - 1

    def args(self) -> tuple:
        return (self.rptr, self.rcol, self.rcode, self.table, self.row_id, self.g_bptr, self.g_bcol,
                self.g_bval, self.g_sptr, self.g_scol, self.g_smax, self.g_rptr, self.g_rows,
                self.first_zero)

    def argmax(self, x, ss, width, eps, cols, w) -> int:
        return int(K.bounded_argmax(K.norm_at(x, ss, width, eps, cols, w), *self.args()))
