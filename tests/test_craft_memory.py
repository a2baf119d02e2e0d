"""DeltaNet memory ports on random programs of writes / reads / resets (40 sequences x 256 tokens =
10,240 tokens, crossing the chunked path's 64-token chunk boundaries), compared with a Python model
of the memory on both paths. Covers: binary and one-hot addresses, write-then-read in one token,
reads of unwritten cells (absent, still constant norm), the read enable, resets, masked per-lane
writes (one value head per lane, keys shared), words wider than one head, grouped value heads."""
import pytest

from gpu_layers.craft.testing import TINY, run_memory


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _assert_exact(res):
    for path, per in res.items():
        for name, (wrong, margin) in per.items():
            assert wrong == 0, f"{path} {name}: {wrong} wrong reads"
            assert margin == 0, f"{path} {name}: {margin} reads outside the margin"


def test_one_lane_32bit_binary_write_onehot_read():
    res, comp = run_memory(slots=16, wbits=32, lanes=1)
    _assert_exact(res)
    assert comp.num_layers == 1          # the port in layer 0's mixer, read_bits in its MLP


def test_four_lanes_masked_writes_dual_data_onehot_write():
    res, comp = run_memory(slots=32, wbits=16, lanes=4, waddr_enc="onehot", raddr_enc="bits", data_enc="dual",
                           seed=1, T=192)
    _assert_exact(res)


def test_wide_word_spans_two_heads_no_enable_no_reset():
    res, _ = run_memory(slots=8, wbits=48, lanes=1, read_enable=False, reset=False, seed=2, T=192)
    _assert_exact(res)


def test_grouped_value_heads_share_keys():
    cfg = dict(TINY, linear_num_key_heads=4, linear_num_value_heads=8)     # 2 value heads per key head
    res, comp = run_memory(config=cfg, slots=16, wbits=32, lanes=3, seed=3, T=192)
    _assert_exact(res)
