"""The machine core v0 (gpu_layers.machine.core): its circuit schedules for Qwen3.5-2B's per-layer
shapes, its vocabulary carries the whole prompt and stream of real nvcc kernels (lowered,
register-allocated), and, compiled layer by layer into the fast executor (the dense 17-layer,
8,808-wide model does not fit this machine's memory), it predicts every token of a kernel's trace
except the data of memory instructions."""
from pathlib import Path

import numpy as np
import pytest
import torch

from gpu_layers.cases import load_cases
from gpu_layers.craft.assemble import Shapes, schedule
from gpu_layers.craft.testing import TINY
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG
from gpu_layers.interp import Scalar, module_for
from gpu_layers.machine import lower
from gpu_layers.machine.core import CoreError, check_core, core_circuit, prompt_tokens, stream_tokens
from gpu_layers.machine.datapath_program import datapath_program, register_slots
from gpu_layers.machine.protocol import trace_tokens
from gpu_layers.machine.regalloc import allocate
from gpu_layers.suite import load_suite

REAL_2B = {k: REAL_2B_TEXT_CONFIG[k] for k in TINY}
TRUTH = Path(__file__).resolve().parents[2] / "shared" / "gpu-truth" / "cases.json"


@pytest.fixture(scope="module")
def circuit():
    return core_circuit()


def _case(name):
    cases = {c.name: c for c in load_suite()}
    if TRUTH.is_file():
        cases.update({c.name: c for c in load_cases(TRUTH)})
    c = cases[name]
    mk, _ = allocate(lower(module_for(c.ptx()).kernel(c.kernel)))
    args = [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in c.args]
    return c, mk, args


def test_schedules_for_qwen35_2b(circuit):
    s = Shapes.of(REAL_2B)            # (the validator's exactness pass takes minutes: compile runs it)
    plans, _ = schedule(circuit, s)
    assert len(plans) == 17
    for pl in plans:
        assert pl.neurons() <= s.intermediate_size
        assert pl.groups(s) <= s.linear_num_key_heads


@pytest.mark.parametrize("name", ["divergence", "vec_add_i32", "early_return", "scan_inclusive_i32",
                                  "bitwise_ops"])
def test_vocabulary_carries_prompt_and_stream(circuit, name):
    c, mk, args = _case(name)
    vocab = {n for n, _ in circuit.tokens}
    prompt = prompt_tokens(mk, c.grid, c.block, args)
    tr = trace_tokens(mk, c.grid, c.block, args, c.dynamic_shared_bytes, outputs=[], step_budget=200_000)
    stream = stream_tokens(tr.tokens)
    missing = sorted({t for t in prompt + stream if t not in vocab})
    assert not missing, missing[:10]
    assert stream[0] == "<blk 0>" and stream[-1] == "<halt>"
    assert sum(t.startswith("<d ") for t in stream) == sum(t[0] == "d" for t in tr.tokens)


def test_refuses_blocks_beyond_one_16_thread_warp():
    c, mk, args = _case("reduce_sum_i32")
    with pytest.raises(CoreError, match="threads per block"):
        prompt_tokens(mk, c.grid, c.block, args)


# ---- compiled, through the fast executor (compile_fast: layer by layer) ---------------------------

@pytest.fixture(scope="module")
def core():
    from gpu_layers.machine.core import build_core_fast
    torch.set_num_threads(1)
    # the validator's exactness pass (8 minutes on this circuit) runs in scripts/machine_core.py
    return build_core_fast(REAL_2B, check=False)


def _core_stream(name):
    c, mk, args = _case(name)
    prompt = prompt_tokens(mk, c.grid, c.block, args)
    kinds = [op.kind for op in datapath_program(mk, register_slots(mk), c.grid, c.block, args)]
    tr = trace_tokens(mk, c.grid, c.block, args, c.dynamic_shared_bytes, outputs=[], step_budget=200_000)
    return prompt + stream_tokens(tr.tokens), len(prompt), kinds


def test_core_predicts_every_token_but_memory_data(core):
    """divergence: 16 threads, data-dependent branches, setp/selp/shifts/adds, global loads and
    stores. Every control token, every <g> in full (executed lanes from the guard, predicate
    results, undefined lanes, S) and every <d> of an ALU instruction is the model's own argmax
    over the whole vocabulary; only the loads' <d> tokens are given."""
    fm, ids = core
    names, n0, kinds = _core_stream("divergence")
    checked, skipped, bad = check_core(fm, ids, names, n0, kinds)
    assert bad == []
    n_d = {"load": 0, "alu": 0}
    pc = None
    for t in names[n0:]:
        if t.startswith("<wi "):
            pc = int(t.split()[2])
        if t.startswith("<d "):
            n_d[kinds[pc]] += 1
    assert skipped == n_d["load"] > 0
    assert checked + skipped == len(names) - n0
    assert n_d["alu"] > 100


def test_core_check_catches_a_wrong_value(core):
    """The check can fail: one ALU <d> token of the stream altered, the model's prediction there
    (the right value) differs from it."""
    fm, ids = core
    names, n0, kinds = _core_stream("divergence")
    pc, at = None, None
    for p in range(n0, len(names)):
        if names[p].startswith("<wi "):
            pc = int(names[p].split()[2])
        if names[p].startswith("<d ") and kinds[pc] == "alu" and p > n0 + 200:
            at = p
            break
    _, j, ch, x = names[at][1:-1].split()
    names = names[:at] + [f"<d {j} {ch} {int(x, 16) ^ 1:03x}>"]
    _, _, bad = check_core(fm, ids, names, n0, kinds)
    assert [b[0] for b in bad] == [at - 1]


def test_compile_fast_equals_compile_circuit():
    """compile_fast (layer by layer into the fast executor) gives the executor compile_circuit's
    dense machine gives: bit-identical logits on a control-unit stream."""
    from gpu_layers.craft.assemble import compile_circuit, compile_fast
    from gpu_layers.craft.fast import FastMachine
    from gpu_layers.machine.control import ControlUnit, control_circuit, control_stream

    torch.set_num_threads(1)
    comp = compile_circuit(control_circuit(16), REAL_2B)
    dense = FastMachine(comp.machine)
    fast, names = compile_fast(control_circuit(16), REAL_2B)
    assert names == comp.machine.token_names
    cu = ControlUnit(comp, {n: i for i, n in enumerate(names)}, 16)
    c, mk, args = _case("divergence")
    toks, _ = control_stream(cu, lower(module_for(c.ptx()).kernel(c.kernel)), c.grid, c.block, args)
    sd, sf = dense.new_state(), fast.new_state()
    for t in cu.encode(toks[:600]):
        a = np.asarray(dense.step(sd, t, logits=True))
        b = np.asarray(fast.step(sf, t, logits=True))
        assert np.array_equal(a, b)
