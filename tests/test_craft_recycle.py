"""The recycle pass (gpu_layers/craft/recycle.py): dead fields' residual dims carry later fields.

A chain of adders, xors and a memory read, where each value dies a few stages after it is born,
compiled with and without recycling: the recycled machine is narrower, its zeroings subtract every
dead field whose dims a later field takes, the final value is exact on both paths (prefill, and
token by token with the cache), decoded strictly, and a freed dim holds at most RESIDUE."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_layers.craft import blocks as B
from gpu_layers.craft.assemble import compile_circuit
from gpu_layers.craft.circuit import Circuit
from gpu_layers.craft.fields import bits, lsum, onehot
from gpu_layers.craft.recycle import RESIDUE, tolerances
from gpu_layers.craft.testing import TINY, encode_rows, run_paths

M = (1 << 16) - 1


def chain(recycle: bool):
    c = Circuit("chain")
    c.recycle = recycle
    a = c.input(bits("a", 16), default=0)
    b = c.input(bits("b", 16), default=0)
    addr = c.input(onehot("addr", 8), default=0)
    s1 = B.adder(c, a, b, name="s1").outputs[0]
    s2 = B.bitwise(c, "xor", s1, b, name="s2").outputs[0]
    s3 = B.adder(c, s2, a, sub=True, name="s3").outputs[0]
    r = B.memory(c, "m", 8, 16, addr, addr, s3).outputs[0]
    w = B.read_bits(c, r, name="w").outputs[0]
    s4 = B.bitwise(c, "and", w, b, name="s4").outputs[0]
    s5 = B.adder(c, s4, s1, name="s5").outputs[0]
    s6 = B.bitwise(c, "xor", s5, a, name="s6").outputs[0]
    s7 = B.adder(c, s6, s6, name="s7").outputs[0]
    c.token("<t>")
    c.logit("<t>", lsum(s7.bit(i) for i in range(16)))    # the LM head keeps s7 to the end
    return c, s7


def reference(a, b):
    s1 = (a + b) & M
    s3 = ((s1 ^ b) - a) & M
    s5 = ((s3 & b) + s1) & M
    s6 = s5 ^ a
    return (2 * s6) & M


@pytest.fixture(scope="module")
def compiled():
    plain = compile_circuit(chain(False)[0], TINY)
    c, out = chain(True)
    return plain, compile_circuit(c, TINY), out


def test_recycled_machine_is_narrower_and_shares_dims(compiled):
    plain, rec, _ = compiled
    assert rec.num_layers == plain.num_layers
    assert rec.machine.width < 0.6 * plain.machine.width, (rec.machine.width, plain.machine.width)
    R, L = rec.recycling, rec.layout
    assert L.dies
    owners = {}
    for f in L.fields.values():
        for d in R.dmap[f.start:f.stop]:
            owners.setdefault(int(d), []).append(f.name)
    shared = {d: ns for d, ns in owners.items() if len(ns) > 1}
    assert shared
    for ns in shared.values():          # every field but the last on a dim was subtracted first
        for n in sorted(ns, key=lambda n: L.born.get(n, -1))[:-1]:
            assert n in L.dies, (n, ns)
    assert max(R.dmap) == R.width - 1 and R.width + 1 == rec.machine.width


def test_fresh_dims_for_addresses_and_the_lm_head(compiled):
    _, rec, out = compiled
    tol = tolerances(rec.circuit)
    assert tol["addr"] == 0.0 and tol[out.name] == 0.0 and tol["one"] == 0.0
    R, L = rec.recycling, rec.layout
    reused = {int(R.dmap[d]) for n in L.dies for d in range(L.fields[n].start, L.fields[n].stop)}
    assert not reused & set(int(d) for d in rec.dims(out.name))


@pytest.mark.parametrize("path", ["prefill", "decode"])
def test_recycled_chain_is_exact(compiled, path):
    _, rec, out = compiled
    rng = np.random.default_rng(0)
    n = 512
    a = rng.integers(0, 1 << 16, n)
    b = np.where(rng.random(n) < 0.3, (M - a) & M, rng.integers(0, 1 << 16, n))
    X = encode_rows(rec, {"a": a, "b": b, "addr": rng.integers(0, 8, n)})
    h = run_paths(rec, X.reshape(8, n // 8, -1), paths=(path,))[path].reshape(n, -1)
    got, ok = rec.decode(out.name, h)
    assert ok.all()
    assert np.array_equal(got, [reference(int(x), int(y)) for x, y in zip(a, b)])
    # dims a zeroing freed that no later field took: what is left there is the residue
    R, L = rec.recycling, rec.layout
    freed = {int(R.dmap[d]) for n in L.dies for d in range(L.fields[n].start, L.fields[n].stop)}
    live = {int(d) for n, f in L.fields.items() if n not in L.dies for d in R.dmap[f.start:f.stop]}
    idle = sorted(freed - live)
    assert idle
    assert np.abs(h[:, idle]).max() <= RESIDUE, np.abs(h[:, idle]).max()
