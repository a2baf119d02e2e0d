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
