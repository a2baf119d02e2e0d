"""The reference interpreter against outputs a real NVIDIA H200 produced (../shared/gpu-truth)."""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from gpu_layers.cases import load_cases
from gpu_layers.interp import run_case

from conftest import ROOT, TRUTH_DIR, require_gpu_truth


def _case_params():
    """One parameter per gpu-truth case. Without the folder: one placeholder, so that each test
    still runs and `require_gpu_truth` fails it under CI (skips it elsewhere); an empty parameter
    list would make pytest skip the tests silently, even under CI."""
    if not (TRUTH_DIR / "cases.json").is_file():
        return [pytest.param(None, id="gpu-truth-missing")]
    cases = load_cases(TRUTH_DIR / "cases.json")
    for c in cases:
        # the PTX beside the source (nvcc 13.5, sm_75); test_nvcc_reproduces_ptx checks that our
        # compiler gives exactly this text
        c.ptx_text = c.source.with_suffix(".ptx").read_text(encoding="utf-8")
    return [pytest.param(c, id=c.name) for c in cases]


CASES = _case_params()


@pytest.fixture(scope="module")
def truth():
    return json.loads((require_gpu_truth() / "truth.json").read_text())["results"]


def _bits(arr):
    u = arr.view({4: np.uint32, 8: np.uint64}[arr.dtype.itemsize])
    return [format(int(x), f"0{arr.dtype.itemsize * 2}x") for x in u]


def test_all_cases_present(truth):
    names = [p.values[0].name for p in CASES]
    assert len(names) == 43
    assert set(names) == set(truth)


@pytest.mark.parametrize("case", CASES)
def test_matches_gpu_bit_for_bit(case, truth):
    res = run_case(case)
    expected = truth[case.name]
    assert set(res.outputs) == set(expected)
    for name, exp in expected.items():
        got = res.outputs[name]
        assert str(got.dtype) == exp["dtype"]
        assert _bits(got) == [b.lower() for b in exp["bits"]], f"{case.name}.{name}"


@pytest.mark.parametrize("case", CASES)
def test_results_do_not_depend_on_lanes(case):
    require_gpu_truth()
    runs = {lanes: run_case(case, lanes=lanes) for lanes in (1, 2, 4, 8, 32)}
    base = runs[4]
    for lanes, r in runs.items():
        assert r.steps == base.steps
        assert r.fingerprint == base.fingerprint
        for name, arr in base.outputs.items():
            assert _bits(r.outputs[name]) == _bits(arr)
    # fewer lanes never means fewer issues
    issues = [runs[k].lane_issues for k in (1, 2, 4, 8, 32)]
    assert issues == sorted(issues, reverse=True)
    assert runs[32].lane_issues == base.steps


def test_nvcc_reproduces_ptx(tmp_path, monkeypatch):
    """The pip nvcc, run for real on every gpu-truth source, gives exactly the recorded PTX.

    The PTX cache is isolated (an empty QWENGPU_CACHE) and every nvcc process start is counted,
    so a cached or otherwise stale PTX cannot make this pass."""
    import gpu_layers.nvcc as nvcc_mod
    from gpu_layers.cases import compile_cached

    sources = sorted(require_gpu_truth().glob("*.cu"))
    assert len(sources) == 43
    monkeypatch.setenv("QWENGPU_CACHE", str(tmp_path / "cache"))
    nvcc_path = str(nvcc_mod.find_nvcc())
    started = []
    real_popen = nvcc_mod.subprocess.Popen

    class CountingPopen(real_popen):
        def __init__(self, cmd, *a, **kw):
            if nvcc_path in cmd:
                started.append(cmd)
            super().__init__(cmd, *a, **kw)

    monkeypatch.setattr(nvcc_mod.subprocess, "Popen", CountingPopen)

    def differs(cu):
        ptx = compile_cached(cu.read_text(encoding="utf-8"), "sm_75")
        return cu.name if ptx != cu.with_suffix(".ptx").read_text(encoding="utf-8") else None

    with ThreadPoolExecutor(2) as ex:
        diffs = [d for d in ex.map(differs, sources) if d]
    assert diffs == []
    assert len(started) == len(sources)          # nvcc ran once per source, nothing came from a cache
    assert all("-arch=sm_75" in c and "--ptx" in c for c in started)
    assert len(list((tmp_path / "cache" / "ptx").glob("*.ptx"))) == len(sources)


def _pytest_without_truth(tmp_path, ci: bool):
    """Run this module's truth tests in a subprocess with QWENGPU_GPU_TRUTH at an empty folder."""
    empty = tmp_path / "no-truth"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["QWENGPU_GPU_TRUTH"] = str(empty)
    if ci:
        env["CI"] = "true"
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rA",
                        "tests/test_gpu_truth.py", "-k", "not without_truth"],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    return p.returncode, p.stdout + p.stderr


TRUTH_TESTS = ("test_all_cases_present", "test_matches_gpu_bit_for_bit[gpu-truth-missing]",
               "test_results_do_not_depend_on_lanes[gpu-truth-missing]", "test_nvcc_reproduces_ptx")


def _outcomes(out):
    """{test id: PASSED / FAILED / ERROR / SKIPPED} from pytest -v's per-test lines."""
    res = {}
    for line in out.splitlines():
        if line.startswith("tests/test_gpu_truth.py::"):
            words = line.split()
            if len(words) >= 2 and words[1] in ("PASSED", "FAILED", "ERROR", "SKIPPED"):
                res[words[0].split("::", 1)[1]] = words[1]
    return res


def test_without_truth_ci_fails_loudly(tmp_path):
    rc, out = _pytest_without_truth(tmp_path, ci=True)
    assert rc == 1, out
    assert "gpu-truth folder not found" in out
    # every test fails (the parametrized ones included); none is skipped or passes
    outcomes = _outcomes(out)
    assert set(outcomes) == set(TRUTH_TESTS), out
    assert set(outcomes.values()) <= {"FAILED", "ERROR"}, outcomes
    assert "skipped" not in out and "passed" not in out, out


def test_without_truth_a_developer_skips(tmp_path):
    rc, out = _pytest_without_truth(tmp_path, ci=False)
    assert rc == 0, out
    outcomes = _outcomes(out)
    assert outcomes == {t: "SKIPPED" for t in TRUTH_TESTS}, out
    assert "gpu-truth folder not found" in out
