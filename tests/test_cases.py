"""gpu_layers.cases: the JSON launch-case format (strict) and the PTX cache."""
import json

import numpy as np
import pytest

from gpu_layers import cases as cases_mod
from gpu_layers.cases import Case, load_case, load_cases
from gpu_layers.errors import CaseError
from gpu_layers.interp import run_case
from gpu_layers.interp.snippets import kernel_ptx

BODY = """\tld.param.u32 \t%r1, [n];
\tld.param.f32 \t%f1, [a];
\tld.param.u64 \t%rd1, [y];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r2, %tid.x;
\tsetp.ge.u32 \t%p1, %r2, %r1;
\t@%p1 bra \tL_done;
\tmul.wide.u32 \t%rd2, %r2, 4;
\tadd.s64 \t%rd3, %rd1, %rd2;
\tld.global.f32 \t%f2, [%rd3];
\tmul.rn.f32 \t%f3, %f2, %f1;
\tst.global.f32 \t[%rd3], %f3;
L_done:
\tret;
"""
PTX = kernel_ptx(BODY, params=[("n", "u32"), ("a", "f32"), ("y", "u64")], name="scale")


def _case(**over):
    c = {"name": "scale", "kernel": "scale", "ptx": PTX, "grid": [1], "block": [4, 1, 1],
         "args": [{"name": "n", "type": "u32", "value": 3},
                  {"name": "a", "type": "f32", "value": 0.5},
                  {"name": "y", "type": "f32*", "data": [1.0, 2.0, -3.0, 8.0], "output": True}]}
    c.update(over)
    return c


def _write(tmp_path, obj, name="c.json"):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return p


def test_single_case_file_runs(tmp_path):
    c = load_case(_write(tmp_path, _case()))
    assert isinstance(c, Case) and c.grid == (1, 1, 1) and c.block == (4, 1, 1)
    assert c.args[2].data.dtype == np.float32
    r = run_case(c)
    assert list(r.outputs) == ["y"]
    assert r.outputs["y"].tolist() == [0.5, 1.0, -1.5, 8.0]
    assert r.steps > 0 and len(r.fingerprint) == 64


def test_list_file_needs_a_name(tmp_path):
    p = _write(tmp_path, [_case(), _case(name="other")])
    assert [c.name for c in load_cases(p)] == ["scale", "other"]
    assert load_case(p, name="other").name == "other"
    with pytest.raises(CaseError, match="2 cases"):
        load_case(p)
    with pytest.raises(CaseError, match="no case named"):
        load_case(p, name="nope")


def test_outputs_default_to_every_buffer(tmp_path):
    obj = _case()
    del obj["args"][2]["output"]
    r = run_case(load_case(_write(tmp_path, obj)))
    assert list(r.outputs) == ["y"]


@pytest.mark.parametrize("mutate, match", [
    (lambda c: c["args"][0].update(type="i16"), "unknown type"),
    (lambda c: c["args"][0].update(type="u32**"), "unknown type"),
    (lambda c: c.pop("kernel"), "missing field 'kernel'"),
    (lambda c: c.pop("grid"), "missing field 'grid'"),
    (lambda c: c.pop("name"), "name"),
    (lambda c: c["args"][0].update(value=2**32), "out of range"),
    (lambda c: c["args"][0].update(value=-1), "out of range"),
    (lambda c: c["args"][0].update(value=1.5), "integer"),
    (lambda c: c["args"][0].update(value=True), "integer"),
    (lambda c: c["args"][1].update(value=1e39), "overflows"),
    (lambda c: c["args"][2].update(data=[1, "x"]), "bad f32"),
    (lambda c: c["args"][2].update(data=[]), "at least one"),
    (lambda c: c["args"][2].pop("data"), "needs 'data'"),
    (lambda c: c["args"][0].update(output=True), "only buffers"),
    (lambda c: c["args"][0].pop("value"), "missing 'value'"),
    (lambda c: c["args"][1].update(name="n"), "duplicate"),
    (lambda c: c.update(grid=[0, 1, 1]), ">= 1"),
    (lambda c: c.update(grid=[1, 1, 1, 1]), "1 to 3"),
    (lambda c: c.update(block="32"), "list"),
    (lambda c: c.update(block=[64, 32, 1]), "1024"),
    (lambda c: c.update(dynamic_shared_bytes=-4), "dynamic_shared_bytes"),
    (lambda c: c.update(bogus=1), "unknown field"),
    (lambda c: c.pop("ptx"), "source"),
    (lambda c: c["args"][0].update(extra=1), "unknown field"),
])
def test_strict_validation(tmp_path, mutate, match):
    obj = _case()
    mutate(obj)
    with pytest.raises(CaseError, match=match):
        load_cases(_write(tmp_path, obj))


def test_bad_json_and_empty_list(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(CaseError, match="JSON"):
        load_cases(p)
    with pytest.raises(CaseError, match="no cases"):
        load_cases(_write(tmp_path, []))


def test_source_is_relative_to_the_case_file_and_compiled_once(tmp_path, monkeypatch):
    sub = tmp_path / "k"
    sub.mkdir()
    (sub / "scale.cu").write_text("// pretend CUDA\n")
    obj = _case(source="scale.cu")
    del obj["ptx"]
    p = _write(sub, obj)
    calls = []

    def fake_compile(source, arch="sm_75"):
        calls.append((source, arch))
        return PTX

    import gpu_layers.nvcc as nvcc

    monkeypatch.setattr(nvcc, "compile_cuda", fake_compile)
    monkeypatch.setenv("QWENGPU_CACHE", str(tmp_path / "cache"))
    c = load_case(p)
    assert c.source == sub / "scale.cu"
    assert c.ptx() == PTX
    assert c.ptx() == PTX
    assert calls == [("// pretend CUDA\n", "sm_75")]
    cached = list((tmp_path / "cache" / "ptx").glob("*.ptx"))
    assert len(cached) == 1 and cached[0].read_text() == PTX
    assert run_case(c).outputs["y"].tolist() == [0.5, 1.0, -1.5, 8.0]


def test_missing_source_file(tmp_path):
    obj = _case(source="nope.cu")
    del obj["ptx"]
    c = load_case(_write(tmp_path, obj))
    with pytest.raises(CaseError, match="cannot read"):
        c.ptx()


def test_special_float_strings(tmp_path):
    obj = _case()
    obj["args"][2]["data"] = ["nan", "inf", "-inf", 0.0]
    c = load_case(_write(tmp_path, obj))
    d = c.args[2].data
    assert np.isnan(d[0]) and d[1] == np.inf and d[2] == -np.inf


def test_unknown_kernel_name_is_a_case_error(tmp_path):
    c = load_case(_write(tmp_path, _case(kernel="nope")))
    with pytest.raises(CaseError, match="nope"):
        run_case(c)


def test_cli_run_prints_outputs(tmp_path, capsys):
    from gpu_layers.cli import main

    p = _write(tmp_path, _case())
    assert main(["run", str(p), "--lanes", "8"]) == 0
    assert json.loads(capsys.readouterr().out) == {"y": [0.5, 1.0, -1.5, 8.0]}


def test_cache_dir_default(monkeypatch, tmp_path):
    monkeypatch.delenv("QWENGPU_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cases_mod.cache_dir() == tmp_path / ".cache" / "qwengpu" / "ptx"


PTX64 = kernel_ptx(BODY.replace("ld.param.f32 \t%f1", "ld.param.f64 \t%fd1").replace(
    "mul.wide.u32 \t%rd2, %r2, 4", "mul.wide.u32 \t%rd2, %r2, 8").replace(
    "ld.global.f32 \t%f2", "ld.global.f64 \t%fd2").replace(
    "mul.rn.f32 \t%f3, %f2, %f1", "mul.rn.f64 \t%fd3, %fd2, %fd1").replace(
    "st.global.f32 \t[%rd3], %f3", "st.global.f64 \t[%rd3], %fd3"),
    params=[("n", "u32"), ("a", "f64"), ("y", "u64")], name="scale", decls="\t.reg .f64 \t%fd<4>;\n")


def _case64(**over):
    c = _case(ptx=PTX64)
    c["args"][1].update(type="f64", value=0.1)
    c["args"][2].update(type="f64*", data=[1.0, 2.0, -3.0, "nan"])
    c.update(over)
    return c


def test_f64_scalars_and_buffers(tmp_path):
    c = load_case(_write(tmp_path, _case64()))
    assert c.args[1].value == 0.1 and c.args[2].data.dtype == np.float64
    out = run_case(c).outputs["y"]
    assert out.dtype == np.float64
    assert out[:3].tolist() == [0.1, 0.2, -0.30000000000000004] and np.isnan(out[3])


@pytest.mark.parametrize("mutate, match", [
    (lambda c: c["args"][2].update(data=[1, "x"]), "bad f64"),
    (lambda c: c["args"][2].update(data=[2**53 + 1]), "not exactly representable"),
    (lambda c: c["args"][1].update(value=[1.0]), "must be a number"),
    (lambda c: c["args"][1].update(value=True), "must be a number"),
])
def test_f64_strict_validation(tmp_path, mutate, match):
    obj = _case64()
    mutate(obj)
    with pytest.raises(CaseError, match=match):
        load_cases(_write(tmp_path, obj))
