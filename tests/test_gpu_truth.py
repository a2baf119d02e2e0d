"""The reference interpreter against outputs a real NVIDIA H200 produced (../shared/gpu-truth)."""
import json
from pathlib import Path

import numpy as np
import pytest

from gpu_layers.cases import load_cases
from gpu_layers.interp import run_case

from conftest import TRUTH_DIR, require_gpu_truth


@pytest.fixture(autouse=True)
def _truth_present():
    require_gpu_truth()


def _cases():
    if not (TRUTH_DIR / "cases.json").is_file():
        return []
    cases = load_cases(TRUTH_DIR / "cases.json")
    for c in cases:
        # the PTX beside the source (nvcc 13.5, sm_75); test_nvcc_reproduces_ptx checks that our
        # compiler gives exactly this text
        c.ptx_text = c.source.with_suffix(".ptx").read_text(encoding="utf-8")
    return cases


CASES = _cases()
IDS = [c.name for c in CASES]


@pytest.fixture(scope="module")
def truth():
    return json.loads((TRUTH_DIR / "truth.json").read_text())["results"]


def _bits(arr):
    u = arr.view({4: np.uint32, 8: np.uint64}[arr.dtype.itemsize])
    return [format(int(x), f"0{arr.dtype.itemsize * 2}x") for x in u]


def test_all_cases_present(truth):
    assert len(CASES) == 43
    assert set(IDS) == set(truth)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_matches_gpu_bit_for_bit(case, truth):
    res = run_case(case)
    expected = truth[case.name]
    assert set(res.outputs) == set(expected)
    for name, exp in expected.items():
        got = res.outputs[name]
        assert str(got.dtype) == exp["dtype"]
        assert _bits(got) == [b.lower() for b in exp["bits"]], f"{case.name}.{name}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_results_do_not_depend_on_lanes(case):
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


def test_nvcc_reproduces_ptx():
    from gpu_layers.cases import compile_cached

    diffs = []
    for cu in sorted(TRUTH_DIR.glob("*.cu")):
        ptx = compile_cached(cu.read_text(encoding="utf-8"), "sm_75")
        if ptx != cu.with_suffix(".ptx").read_text(encoding="utf-8"):
            diffs.append(cu.name)
    assert diffs == []
