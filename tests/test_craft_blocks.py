"""Every library block alone in its own circuit, driven through stock transformers on both paths:
one prefill (chunked delta rule) and token-by-token decode with the cache (recurrent), on 10,000
random inputs (biased toward the hard cases: equal words, near values, long carry chains) or on
every input when there are fewer. Decoded outputs must equal the block's Python reference bit for
bit, and every output dim must lie within the re-digitization margin (0.25)."""
import pytest
import torch

from gpu_layers.craft.testing import BLOCK_CASES, run_block


pytestmark = pytest.mark.usefixtures("one_torch_thread")

DEPTH = {"equal32": 2, "compare32_u": 2, "compare32_s": 2, "add32": 3, "sub32": 3, "add32_chunk4": 3,
         "add8_1stage": 1, "add32_prefix": 7, "sub32_prefix": 7,
         "equal32_tree16": 3, "compare32_u_prefix": 7, "compare32_s_prefix": 7, "shl32_binary": 2, "shr32_binary": 2, "sar32_binary": 2, "shl16_onehot": 1}


@pytest.mark.parametrize("label", list(BLOCK_CASES))
def test_block_exact_on_both_paths(label):
    out, blk, comp = run_block(label)
    n = out.pop("N")
    assert n >= 10_000 or n == 2 ** sum(f.n for f in comp.circuit.inputs)     # or every input
    for path, (wrong, margin) in out.items():
        assert wrong == 0, f"{label} {path}: {wrong} wrong outputs"
        assert margin == 0, f"{label} {path}: {margin} outputs outside the 0.25 margin"
    assert blk.cost.depth == DEPTH.get(label, 1)
    assert comp.num_layers == blk.cost.depth     # MLP-only blocks: one layer per stage
    assert blk.cost.neurons > 0 and blk.cost.value_dims == 0


BF16_SAFE = ["add32_prefix", "sub32_prefix", "equal32_tree16", "compare32_u_prefix", "compare32_s_prefix",
             "mux4x32_binary", "shl32_binary", "sar32_binary", "gate_XOR5", "bitwise_XOR32"]


@pytest.mark.parametrize("label", BF16_SAFE)
def test_narrow_threshold_blocks_are_exact_in_bf16(label):
    """Blocks whose thresholds the compiler rates bf16-safe (max |t|/margin <= 32) decode exactly in
    bf16 on both paths (the wide-sum fp32 blocks are measured in scripts/measure_blocks_bf16.py)."""
    out, blk, comp = run_block(label, N=2048, dtype=torch.bfloat16, shapes={"prefill": 32, "decode": 256})
    out.pop("N")
    assert comp.bf16_unsafe() == []
    for path, (wrong, margin) in out.items():
        assert wrong == 0 and margin == 0, f"{label} bf16 {path}: {wrong} wrong, {margin} outside the margin"


def test_wide_threshold_blocks_are_flagged_bf16_unsafe():
    from gpu_layers.craft.testing import block_case
    for label in ("add32", "compare32_u", "equal32", "add8_1stage"):
        comp, _, _ = block_case(label)
        assert comp.bf16_unsafe(), label
        assert "fp32 only" in comp.report()


def test_every_block_case_has_an_independent_reference():
    from gpu_layers.craft.testing import INDEPENDENT_REFS
    assert set(INDEPENDENT_REFS) == set(BLOCK_CASES)


@pytest.mark.parametrize("label", list(BLOCK_CASES))
def test_block_refs_agree_with_the_independent_references(label):
    """Each block's own Python `ref` (what circuits built from it are checked against elsewhere)
    agrees with the independent reference on random inputs and on every input of small blocks."""
    import numpy as np

    from gpu_layers.craft.circuit import Circuit
    from gpu_layers.craft.testing import expected_outputs, independent_expected, random_values

    c = Circuit(label)
    blk, extra = BLOCK_CASES[label](c)
    rng = np.random.default_rng(1)
    N = 4000
    v = {f.name: (rng.integers(-1, 1 << 16, N) if f.enc == "rail3" else random_values(f, rng, N))
         for f in c.inputs}
    if extra:
        v = extra(rng, N, v)
    want = independent_expected(label, v)
    got = expected_outputs([blk], v)
    assert set(got) == set(want)
    for name in want:
        bad = np.nonzero(got[name] != want[name])[0]
        assert bad.size == 0, (f"{label}.{name}: row {bad[0]}: inputs "
                               f"{ {n: int(x[bad[0]]) for n, x in v.items()} }, block.ref {got[name][bad[0]]}, "
                               f"independent {want[name][bad[0]]}")


def test_a_wrong_gate_table_is_caught(monkeypatch):
    """The exactness check compares with the independent reference, not the block's own table:
    a block built from a wrong table (XOR2 as OR) decodes wrong outputs and is reported."""
    from gpu_layers.craft.blocks import logic

    monkeypatch.setitem(logic.GATES, "XOR", lambda n: [0] + [1] * n)
    out, blk, comp = run_block("gate_XOR2")
    out.pop("N")
    assert blk.ref({"x0": 1, "x1": 1})["y"] == 1        # the block's own ref follows its wrong table
    for path, (wrong, margin) in out.items():
        assert wrong == 1, (path, wrong)               # exactly the input (1, 1) is wrong
