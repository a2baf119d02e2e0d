"""The control unit (gpu_layers.machine.control) driven through stock transformers Qwen3.5 layers
(fp32, CPU), compiled for Qwen3.5-2B's per-layer shapes: on real nvcc kernels lowered to machine
code, the model predicts every control token of the oracle's stream (which block starts, which PC
the warp issues by the cursor rule and the barrier phase, which lane group comes next and which of
its lanes are issued, when the launch ends), on the chunked prefill path and on the recurrent decode path with the cache.
"""
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.cache_utils import DynamicCache

from gpu_layers.cases import load_cases
from gpu_layers.craft.testing import TINY
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG
from gpu_layers.interp import Scalar, module_for
from gpu_layers.machine import lower
from gpu_layers.machine.control import (CONTROL_KINDS, ControlError, build_control_unit,
                                        check_predictions, control_stream, fast_rows)
from gpu_layers.suite import load_suite

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REAL_2B = {k: REAL_2B_TEXT_CONFIG[k] for k in TINY}
TRUTH = Path(__file__).resolve().parents[2] / "shared" / "gpu-truth" / "cases.json"


@pytest.fixture(scope="module")
def unit():
    torch.set_num_threads(1)
    cu = build_control_unit(REAL_2B, threads=16)
    return cu, cu.model()


def _cases():
    out = {c.name: c for c in load_suite()}
    if TRUTH.is_file():
        out.update({c.name: c for c in load_cases(TRUTH)})
    return out


def _stream(cu, name):
    c = _cases()[name]
    mk = lower(module_for(c.ptx()).kernel(c.kernel))
    args = [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in c.args]
    return control_stream(cu, mk, c.grid, c.block, args, c.dynamic_shared_bytes)


def _control_count(names, n0):
    return sum(n.startswith(CONTROL_KINDS) for n in names[n0:])


# divergence: 16 threads, data-dependent branches that split and rejoin lane groups;
# scan_inclusive_i32: 2 blocks of 16 threads meeting at bar.sync in a loop (threads wait in the
# phase they arrived in; the releasing step flips it). More kernels: the fast-executor test below
# and scripts/machine_control.py.
@pytest.mark.parametrize("name", ["divergence", "scan_inclusive_i32"])
def test_prefill_predicts_every_control_token(unit, name):
    cu, model = unit
    names, n0 = _stream(cu, name)
    assert _control_count(names, n0) > 100
    with torch.no_grad():
        logits = model(torch.tensor([cu.encode(names)])).logits[0].numpy()
    assert check_predictions(cu, names, n0, logits) == []


def test_fast_executor_same_predictions(unit):
    """The fast executor (compiled layers only, sparse, recurrent) chooses the same token as the
    stock prefill at every position, within every allowed set, and checks clean."""
    cu, model = unit
    names, n0 = _stream(cu, "bitwise_ops")            # 2 blocks of 4 threads, loops
    assert check_predictions(cu, names, n0, fast_rows(cu.fast(), cu.encode(names))) == []
    names, n0 = _stream(cu, "divergence")
    ids = cu.encode(names)
    with torch.no_grad():
        stock = model(torch.tensor([ids])).logits[0].numpy()
    fast = np.stack(list(fast_rows(cu.fast(), ids)))
    assert check_predictions(cu, names, n0, fast) == []
    for want in {n for n in names[n0:] if n.startswith(("<g ", "<wi "))}:
        allowed = np.array(cu.allowed(want))
        assert (stock[:, allowed].argmax(1) == fast[:, allowed].argmax(1)).all()


def test_decode_path_predicts_control_tokens(unit):
    """The recurrent path (one token at a time with the cache) on the start of a divergent kernel."""
    cu, model = unit
    names, n0 = _stream(cu, "divergence")
    names = names[:n0 + 260]
    ids = cu.encode(names)
    cache = DynamicCache(config=model.config)
    rows = []
    with torch.no_grad():
        for t in ids:
            out = model(torch.tensor([[t]]), cache=cache, use_cache=True)
            rows.append(out.logits[0, -1].numpy())
    assert _control_count(names, n0) > 60
    assert check_predictions(cu, names, n0, np.stack(rows)) == []


def test_a_wrong_pc_is_visible(unit):
    """The check can fail: a stream in which one issued lane is marked not issued (so its PC stays
    behind) mispredicts."""
    cu, model = unit
    names, n0 = _stream(cu, "divergence")
    names = names[:n0 + 400]
    i = next(i for i in range(n0 + 20, len(names)) if names[i].startswith("<g ") and "2" in names[i][5:])
    f = names[i][1:-1].split()
    f[2 + f[2:].index("2")] = "0"
    bad = names[:i] + ["<" + " ".join(f) + ">"] + names[i + 1:]
    with torch.no_grad():
        logits = model(torch.tensor([cu.encode(bad)])).logits[0].numpy()
    assert check_predictions(cu, bad, n0, logits) != []


def test_refusals(unit):
    cu, _ = unit
    c = _cases()["reduce_sum_i32"]                  # 64 threads, barriers
    mk = lower(module_for(c.ptx()).kernel(c.kernel))
    with pytest.raises(ControlError, match="threads per block"):
        cu.prompt_tokens(mk, c.grid, c.block)
    c = _cases()["warp_scan"]                       # shfl.sync: a warp-synchronous wait
    mk = lower(module_for(c.ptx()).kernel(c.kernel))
    with pytest.raises(ControlError, match="warp-synchronous"):
        cu.prompt_tokens(mk, c.grid, (16, 1, 1))
    with pytest.raises(ControlError, match="not a token"):
        cu.encode(["<wi 0 512 0>"])
    with pytest.raises(ControlError):
        build_control_unit(REAL_2B, threads=12)


PAIRS = r'''
extern "C" __global__ void pairs(const int* a, int* out) {
    __shared__ int s[64];
    int t = threadIdx.x;
    s[t] = a[t] + 3;
    __syncthreads();
    int v = s[39 - t];
    if (t & 1) v += s[t];
    __syncthreads();
    s[t] = v;
    out[(blockIdx.x << 6) + t] = v;
}'''


def test_several_warps_round_robin():
    """Blocks of 40 threads (a full warp and a partial one) meeting at two barriers: the unit for
    64 threads predicts every <w W H G> (the warps' round robin), <wi W P H>, <g> and <blk>/<halt>.
    Through the fast executor (tested token for token against stock transformers above): the stock
    model at this width is several GB of mostly-zero weights."""
    from gpu_layers.nvcc import compile_cuda

    cu = build_control_unit(REAL_2B, threads=64)
    kernel = lower(module_for(compile_cuda(PAIRS)).kernel("pairs"))
    a, out = np.arange(80, dtype=np.int32), np.zeros(128, dtype=np.int32)
    names, n0 = control_stream(cu, kernel, (2, 1, 1), (40, 1, 1), [a, out])
    steps = [i for i, n in enumerate(names) if n.startswith("<wi ")]
    assert steps and all(names[i - 1].startswith("<w ") and names[i - 1].split()[1] == names[i].split()[1]
                         for i in steps)
    assert {names[i].split()[1] for i in steps} == {"0", "1"}
    assert check_predictions(cu, names, n0, fast_rows(cu.fast(), cu.encode(names))) == []
    with pytest.raises(ControlError, match="threads per block"):
        cu.prompt_tokens(kernel, (1, 1, 1), (65, 1, 1))


WSYNC = r'''
extern "C" __global__ void wsync(const int* a, int* out) {
    int t = threadIdx.x;
    int v = a[t];
    for (int i = (v & 7) + (t == 37 ? 12 : 0); i > 0; --i)    // lanes leave apart: they run ahead
        v = v * 5 + i;
    if (t == 37) return;
    for (int k = 0; k < 3; ++k) {
        v += __shfl_sync(0xffffffffu, v, k);
        if (v & 2) v ^= 5;
    }
    unsigned b = __ballot_sync(0xffffffffu, v & 1);
    __syncthreads();
    out[(blockIdx.x << 6) + t] = v + (int)b;
}'''


def test_several_warps_warp_barrier():
    """Warp exchanges in blocks of 40 threads: each waits at the machine's warp barrier (lanes
    leave a divergent loop apart and arrive in three steps; in the partial warp the last lane to
    come exits instead, which releases the others), whose releases flip the warp's generation G
    in <w W H G>; the lowered kernel equals the original on the interpreter, the unit predicts
    every control token, G included, and a stream whose G did not flip mispredicts there."""
    from gpu_layers.interp import launch
    from gpu_layers.nvcc import compile_cuda

    cu = build_control_unit(REAL_2B, threads=64)
    src = module_for(compile_cuda(WSYNC)).kernel("wsync")
    kernel = lower(src, one_warp=True, warps=2)
    assert len(kernel.warp_barriers) == 4
    a = ((np.arange(80) * 7919) % 23).astype(np.int32)
    out = np.zeros(128, dtype=np.int32)
    want = launch(src, (2, 1, 1), (40, 1, 1), [a, out]).buffers[1]
    assert np.array_equal(launch(kernel, (2, 1, 1), (40, 1, 1), [a, out]).buffers[1], want)
    names, n0 = control_stream(cu, kernel, (2, 1, 1), (40, 1, 1), [a, out])
    assert "<pc wbar>" in names[:n0]
    gens = {n.split()[3] for n in names[n0:] if n.startswith("<w ")}
    assert gens == {"0>", "1>"}
    fm = cu.fast()
    assert check_predictions(cu, names, n0, fast_rows(fm, cu.encode(names))) == []
    i = next(i for i in range(n0, len(names)) if names[i].startswith("<w ") and names[i].endswith(" 1>"))
    bad = names[:i] + [names[i][:-2] + "0>"] + names[i + 1:]       # the flip of G not carried
    assert [p for p, _, _ in check_predictions(cu, bad, n0, fast_rows(fm, cu.encode(bad)))][:1] == [i - 1]
    with pytest.raises(ControlError, match="block of one warp"):
        cu.prompt_tokens(kernel, (1, 1, 1), (32, 1, 1))
