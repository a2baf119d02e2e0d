"""The sparse machine file (gpu_layers.craft.sparse_file) rebuilds, bit for bit, the stock model that
build_machine_model builds from compile_circuit's CompiledMachine (every parameter and buffer), in
fp32 and bf16, with the same token names; files that are not of its format, or do not fit the
model, are refused by name."""
import json

import numpy as np
import pytest
import torch

from gpu_layers.craft.demo_regfile import build_regfile
from gpu_layers.craft.sparse_file import SparseFileError, load_model, write_circuit
from gpu_layers.craft.testing import TINY


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory):
    d = build_regfile(TINY)
    path = tmp_path_factory.mktemp("sparse") / "demo.npz"
    n = write_circuit(d.compiled.circuit, TINY, path)
    assert n == len(d.compiled.machine.layers)
    return d, path


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_same_stock_model_bit_for_bit(demo_file, dtype):
    d, path = demo_file
    want = d.model(dtype=dtype).state_dict()
    model, names = load_model(path, dtype=dtype)
    got = model.state_dict()
    assert names == d.compiled.machine.token_names
    assert got.keys() == want.keys()
    differ = [k for k in want if want[k].dtype != got[k].dtype or not torch.equal(want[k], got[k])]
    assert differ == []
    assert sum(int(torch.count_nonzero(v)) for v in got.values()) > 10_000   # not an empty model


def test_greedy_tokens_equal_the_compiled_model(demo_file):
    d, path = demo_file
    model, _ = load_model(path)
    ids = torch.tensor([list(range(0, 200, 3))])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, d.model()(ids).logits)


def _rewrite(src, dst, change):
    z = dict(np.load(src))
    change(z)
    np.savez_compressed(dst, **z)


def test_refuses_other_files(demo_file, tmp_path):
    _, path = demo_file
    other = tmp_path / "other.npz"
    np.savez_compressed(other, x=np.zeros(3))
    with pytest.raises(SparseFileError, match="not a sparse machine file"):
        load_model(other)

    def old_format(z):
        meta = json.loads(bytes(z["meta"]).decode())
        meta["format"] = "qwengpu-sparse-machine/0"
        z["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)

    _rewrite(path, tmp_path / "old.npz", old_format)
    with pytest.raises(SparseFileError, match="format 'qwengpu-sparse-machine/0'"):
        load_model(tmp_path / "old.npz")

    def outside(z):
        z["L0/mlp.up_proj.weight/idx"] = z["L0/mlp.up_proj.weight/idx"].copy()
        z["L0/mlp.up_proj.weight/idx"][-1] = 10 ** 12

    _rewrite(path, tmp_path / "outside.npz", outside)
    with pytest.raises(SparseFileError, match="layer 0 mlp.up_proj.weight: an index outside"):
        load_model(tmp_path / "outside.npz")

    def short_rows(z):
        z["embed/ptr"] = z["embed/ptr"][:-1]

    _rewrite(path, tmp_path / "rows.npz", short_rows)
    with pytest.raises(SparseFileError, match="embed: CSR arrays do not match"):
        load_model(tmp_path / "rows.npz")
