"""The fast executor's incremental projections (fast_kernels.inc_norm_mv; FastMachine.new_state's
default): between tokens only the columns whose input changed are visited and the norm's scale
multiplies the sums once. What makes its tokens the stock path's is the same argument as for the
full product (fast.py's docstring), checked here:

* every sum stays within stock's own float32 error envelope: |result - exact| <= 4 * 2^-24 *
  sum_j |M_ij w_j x_j r| (stock rounds each of its terms twice, x r then * w, and adds them in
  float32: at least that much), over long random streams with and without re-synchronisation;
* a row whose inputs are all zero at this token is an exact 0 (as the full product gives), also
  after its inputs were nonzero;
* on compiled machines, incremental and full sums give the same tokens as each other and as stock
  transformers (tests/test_fast_executor.py checks the incremental default against stock on every
  path), and state copies carry the sums."""
from fractions import Fraction
import pickle

import numpy as np
import pytest
import torch

from gpu_layers.craft import fast_kernels as K
from gpu_layers.craft.fast import FastMachine, _Sparse
from gpu_layers.craft.testing import TINY
from gpu_layers.machine.rf_circuit import build_rf_machine

from test_machine_rf import hand_case

F32 = np.float32
U = 2.0 ** -24


def _stream(rng, W, cols, steps):
    """Residuals of W dims where, from one token to the next, a few of the read columns change
    (some to or from zero), the rest keep their value; values of mixed magnitudes."""
    x = np.zeros(W, dtype=F32)
    for _ in range(steps):
        ch = rng.choice(cols, size=rng.integers(1, 4), replace=False)
        for c in ch:
            r = rng.random()
            x[c] = 0.0 if r < 0.5 else F32(rng.choice([1.0, -1.0, 0.5, 2000.0, -3.0]) * (1 + rng.random()))
        yield x.copy()


@pytest.mark.parametrize("resync", [1_000_000, 7])
def test_sums_within_stock_error_envelope_and_exact_zeros(resync):
    rng = np.random.default_rng(3 if resync > 100 else 4)
    W, n = 48, 30
    cols = np.sort(rng.choice(W, size=12, replace=False)).astype(np.int64)
    M = np.where(rng.random((n, len(cols))) < 0.3,
                 rng.choice([1.0, -1.0, 2.0, -0.75, 1000.0, 3.1], size=(n, len(cols))), 0.0).astype(F32)
    M[0] = 0.0                                                   # a row with no weights at all
    w = (1 + rng.random(len(cols))).astype(F32)
    sp = _Sparse(M)
    prev, acc, cnt = np.zeros(len(cols)), np.zeros(n), np.zeros(n, np.int32)
    eps = F32(1e-6)
    back_to_zero, was_nonzero = 0, np.zeros(n, bool)   # rows back to zero after a (rounded) sum
    for t, x in enumerate(_stream(rng, W, cols, 400)):
        ss = float(np.sum(x.astype(np.float64) ** 2))
        out = K.inc_norm_mv(x, ss, float(W), eps, cols, w, *sp.mv_args(), n, prev, acc, cnt, t % resync == 0)
        full = K.norm_mv(x, ss, float(W), eps, cols, w, *sp.mv_args(), n)
        r = F32(1.0) / np.sqrt(F32(ss / W) + eps)
        xs = x[cols]
        for i in range(n):
            terms = [Fraction(float(M[i, j])) * Fraction(float(w[j])) * Fraction(float(xs[j])) * Fraction(float(r))
                     for j in range(len(cols)) if M[i, j] != 0 and xs[j] != 0]
            if not terms:
                assert out[i] == 0.0 and full[i] == 0.0, (t, i)
                back_to_zero += bool(was_nonzero[i])
                was_nonzero[i] = False
                continue
            was_nonzero[i] |= len(terms) > 1            # a sum of several terms since its last zero
            exact = sum(terms)
            scale = float(sum(abs(v) for v in terms))
            assert abs(float(Fraction(float(out[i])) - exact)) <= 4 * U * scale, (t, i)
    assert back_to_zero > 100, back_to_zero


@pytest.fixture(scope="module")
def rf():
    r = build_rf_machine(TINY)
    return r, r.model(), FastMachine(r.compiled.machine)


def test_modes_same_tokens_as_each_other_and_stock(rf):
    """A long register-file stream through both modes and stock transformers."""
    r, model, fm = rf
    ids, _, _ = hand_case(r, 5, 150)
    inc, full = fm.new_state(), fm.new_state(incremental=False)
    assert inc.sums is not None and full.sums is None
    a = [fm.step(inc, t) for t in ids]
    b = [fm.step(full, t) for t in ids]
    with torch.no_grad():
        stock = model(torch.tensor([ids])).logits[0].argmax(-1).tolist()
    assert len(ids) > 1000 and a == b == stock


def test_state_copy_carries_the_sums(rf):
    r, _, fm = rf
    ids, _, _ = hand_case(r, 6, 40)
    st = fm.new_state()
    for t in ids[:200]:
        fm.step(st, t)
    twin = st.copy()
    live = [(a, b) for L, M in zip(st.sums, twin.sums) for s, t in zip(L, M) if s is not None
            for a, b in zip(s, t)]
    assert live and all(np.array_equal(a, b) and not np.shares_memory(a, b) for a, b in live)
    rest = ids[200:]
    assert [fm.step(st, t) for t in rest] == [fm.step(twin, t) for t in rest]


def test_pooled_state_and_pickled_machine(rf):
    """A state's per-layer arrays are views of its pools (fast_pack.py), so the one-call forward
    and inspection see the same memory; a pickled machine carries no pools and, rebuilt from its
    layers, gives the same tokens and the same recurrent state."""
    r, _, fm = rf
    ids, _, _ = hand_case(r, 7, 30)
    st = fm.new_state()
    a = [fm.step(st, t) for t in ids]
    live = [s for s in st.S if s is not None]
    assert live and all(np.shares_memory(s, st.pools["S"]) for s in live)
    assert any(np.any(s != 0) for s in live)
    blob = pickle.dumps(fm)
    assert b"Packed" not in blob
    twin = pickle.loads(blob)
    st2 = twin.new_state()
    assert [twin.step(st2, t) for t in ids] == a
    for i in range(len(fm.layers)):
        assert torch.equal(st.get_recurrent_state(i), st2.get_recurrent_state(i))
