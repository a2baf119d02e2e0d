"""python -m gpu_layers: the command line (parser, and `run` end to end in both output modes)."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from gpu_layers.cli import build_parser, main, outputs_to_json
from gpu_layers.interp.snippets import kernel_ptx

from conftest import ROOT

# out_f[i] = the bits of in_u[i] (a bit copy into a float32 buffer: NaN payloads survive);
# out_i[i] = -i (int32); out_q[i] = (2^40 + i) as u64
BODY = """\tld.param.u64 \t%rd1, [in_u];
\tld.param.u64 \t%rd2, [out_f];
\tld.param.u64 \t%rd3, [out_i];
\tld.param.u64 \t%rd4, [out_q];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tcvta.to.global.u64 \t%rd2, %rd2;
\tcvta.to.global.u64 \t%rd3, %rd3;
\tcvta.to.global.u64 \t%rd4, %rd4;
\tmov.u32 \t%r1, %tid.x;
\tmul.wide.u32 \t%rd5, %r1, 4;
\tadd.s64 \t%rd6, %rd1, %rd5;
\tld.global.u32 \t%r2, [%rd6];
\tadd.s64 \t%rd7, %rd2, %rd5;
\tst.global.u32 \t[%rd7], %r2;
\tneg.s32 \t%r3, %r1;
\tadd.s64 \t%rd8, %rd3, %rd5;
\tst.global.u32 \t[%rd8], %r3;
\tcvt.u64.u32 \t%rd9, %r1;
\tadd.s64 \t%rd9, %rd9, 1099511627776;
\tmul.wide.u32 \t%rd10, %r1, 8;
\tadd.s64 \t%rd11, %rd4, %rd10;
\tst.global.u64 \t[%rd11], %rd9;
\tret;
"""
PTX = kernel_ptx(BODY, params=[("in_u", "u64"), ("out_f", "u64"), ("out_i", "u64"), ("out_q", "u64")],
                 name="copy_bits")
# +0, -0, 0.1f, smallest subnormal, +inf, -inf, canonical NaN, NaN with a payload, negative NaN
IN_BITS = [0x00000000, 0x80000000, 0x3DCCCCCD, 0x00000001, 0x7F800000, 0xFF800000, 0x7FFFFFFF,
           0x7FC00001, 0xFFC00000]
N = len(IN_BITS)


def _value(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


@pytest.fixture
def case_file(tmp_path):
    case = {"name": "copy_bits", "kernel": "copy_bits", "ptx": PTX, "grid": [1], "block": [N],
            "args": [{"name": "in_u", "type": "u32*", "data": IN_BITS},
                     {"name": "out_f", "type": "f32*", "data": [0.0] * N, "output": True},
                     {"name": "out_i", "type": "i32*", "data": [7] * N, "output": True},
                     {"name": "out_q", "type": "u64*", "data": [0] * N, "output": True}]}
    p = tmp_path / "case.json"
    p.write_text(json.dumps(case))
    return p


def _cli(*argv):
    """The real command line, in a subprocess: (exit status, stdout, stderr)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "gpu_layers", *argv], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=300)
    return p.returncode, p.stdout, p.stderr


def test_run_prints_readable_values_as_valid_json(case_file):
    rc, out, err = _cli("run", str(case_file))
    assert rc == 0, err
    assert "NaN" not in out and "Infinity" not in out          # no non-JSON literals
    got = json.loads(out)
    assert list(got) == ["out_f", "out_i", "out_q"]
    f = got["out_f"]
    assert f[4:] == ["inf", "-inf", "nan", "nan", "nan"]
    assert f[0] == 0.0 and str(f[0]) == "0.0" and str(f[1]) == "-0.0"      # the sign of zero survives
    for b, v in zip(IN_BITS[:4], f[:4]):       # finite values round-trip to the same float32 bits
        assert struct.unpack("<I", struct.pack("<f", v))[0] == b
    assert f[2] == _value(0x3DCCCCCD) and f[3] == _value(1)
    assert got["out_i"] == [-i for i in range(N)]
    assert got["out_q"] == [2**40 + i for i in range(N)]


def test_run_bits_prints_raw_hex_with_nan_payloads(case_file):
    rc, out, err = _cli("run", str(case_file), "--bits")
    assert rc == 0, err
    got = json.loads(out)
    assert got["out_f"] == [f"{b:08x}" for b in IN_BITS]
    assert got["out_f"][7] == "7fc00001" and got["out_f"][8] == "ffc00000"
    assert got["out_i"] == [f"{(-i) & 0xFFFFFFFF:08x}" for i in range(N)]
    assert got["out_i"][1] == "ffffffff"
    assert got["out_q"] == [f"{2**40 + i:016x}" for i in range(N)]


def test_run_bits_matches_the_truth_json_format(tmp_path, capsys):
    """--bits on a gpu-truth case prints exactly truth.json's "bits" for every output buffer."""
    from conftest import require_gpu_truth

    truth_dir = require_gpu_truth()
    cases = json.loads((truth_dir / "cases.json").read_text())
    truth = json.loads((truth_dir / "truth.json").read_text())["results"]
    for name in ("reduce_sum_f32", "i64_arith", "vec_add_i32"):
        case = dict(next(c for c in cases if c["name"] == name))
        case["source"] = str(truth_dir / case["source"])
        case["ptx"] = (truth_dir / case["source"]).with_suffix(".ptx").read_text()   # no nvcc needed
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(case))
        assert main(["run", str(p), "--bits"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got == {buf: t["bits"] for buf, t in truth[name].items()}, name


def test_run_errors_exit_with_status_2(tmp_path):
    rc, out, err = _cli("run", str(tmp_path / "missing.json"), "--bits")
    assert rc == 2 and out == "" and err.startswith("error: ")


def test_parser_knows_every_subcommand():
    p = build_parser()
    for argv in (["ptx", "k.cu"], ["run", "c.json"], ["demo"], ["kl", "--host", "tiny", "--machine", "regfile", "--text", "t"]):
        assert p.parse_args(argv).command == argv[0]
    assert p.parse_args(["run", "c.json"]).bits is False
    assert p.parse_args(["run", "c.json", "--bits"]).bits is True


def test_float32_outputs_round_trip_exactly():
    vals = np.array([0.1, 1 / 3, -2.5e-38, 3.4028235e38], dtype=np.float32)
    back = np.array(json.loads(outputs_to_json({"y": vals}))["y"], dtype=np.float32)
    assert back.view(np.uint32).tolist() == vals.view(np.uint32).tolist()


def test_unknown_subcommand_is_refused():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["frobnicate"])
