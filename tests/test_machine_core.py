"""The machine core v0 (gpu_layers.machine.core): its circuit validates and schedules for
Qwen3.5-2B's per-layer shapes, and its vocabulary carries the whole prompt and stream of real
nvcc kernels (lowered, register-allocated). Compiled behaviour is not tested here yet: the dense
weights of the 17-layer, 8,808-wide circuit need more memory than the CI machine has (the next
step is a compile path that compacts each layer as it is written)."""
from pathlib import Path

import pytest

from gpu_layers.cases import load_cases
from gpu_layers.craft.assemble import Shapes, schedule
from gpu_layers.craft.testing import TINY
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG
from gpu_layers.interp import Scalar, module_for
from gpu_layers.machine import lower
from gpu_layers.machine.core import CoreError, core_circuit, prompt_tokens, stream_tokens
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
