"""The fast executor's bounded argmax (gpu_layers/craft/fast_head.py) picks exactly the token the
full LM head picks (every logit scored: fast_kernels.head_argmax), first index on ties, for the
residuals a machine really produces and for arbitrary ones."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_layers.craft import fast_kernels as K
from gpu_layers.craft.demo_regfile import build_regfile, random_program
from gpu_layers.craft.fast import FastMachine
from gpu_layers.craft.fast_head import BoundedHead
from gpu_layers.craft.testing import TINY

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def demo():
    d = build_regfile(TINY)
    return d, FastMachine(d.compiled.machine)


def full_argmax(fm, x, ss):
    return int(K.head_argmax(x, ss, float(fm.W), fm.eps, fm.head_cols, fm.final_w, *fm.head.mv_args(), fm.V))


def bounded_argmax(fm, bh, x, ss):
    return bh.argmax(x, ss, float(fm.W), fm.eps, fm.head_cols, fm.final_w)


def test_every_position_of_a_run(demo):
    d, fm = demo
    toks, _, _ = random_program(np.random.default_rng(3), 200)
    st = fm.new_state()
    for t in d.encode(toks):
        x, ss = fm._forward(st, t)
        assert bounded_argmax(fm, fm.bounded_head, x, ss) == full_argmax(fm, x, ss)


def test_arbitrary_residuals_and_ties(demo):
    """Random residuals (dense, sparse, tiny, huge), all zero (every logit 0: a tie over the whole
    vocabulary) and a head with duplicated rows (ties between kept rows)."""
    _, fm = demo
    rng = np.random.default_rng(0)
    xs = [np.zeros(fm.W, dtype=np.float32)]
    for i in range(200):
        x = (rng.standard_normal(fm.W) * [1e-3, 1.0, 1e3][i % 3]).astype(np.float32)
        if i % 2:
            x[rng.random(fm.W) < 0.8] = 0
        xs.append(x)
    for x in xs:
        ss = float(np.sum(x.astype(np.float64) ** 2))
        assert bounded_argmax(fm, fm.bounded_head, x, ss) == full_argmax(fm, x, ss)
    assert full_argmax(fm, xs[0], 0.0) == 0


def test_duplicate_rows_tie_to_the_first():
    """Rows 5 and 2 equal, row 9 larger only when y1 < 0: the first index of the best wins."""
    M = np.zeros((12, 3), dtype=np.float32)
    M[2] = M[5] = [100.0, 3.0, -2.0]
    M[9] = [100.0, -3.0, 0.0]
    M[7] = [0.0, 1.0, 1.0]
    colptr = np.r_[0, np.cumsum((M != 0).sum(0))].astype(np.int64)
    rows = np.concatenate([np.flatnonzero(M[:, j]) for j in range(3)]).astype(np.int64)
    table, codes = np.unique(M.T[M.T != 0], return_inverse=True)
    bh = BoundedHead(colptr, rows, codes.astype(np.int64), table.astype(np.float64), 12)
    for y in ([1.0, 1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 1.0]):
        y = np.array(y, dtype=np.float32)
        logits = (M.astype(np.float64) @ y.astype(np.float64)).astype(np.float32)
        assert K.bounded_argmax(y, *bh.args()) == int(np.argmax(logits)), y
