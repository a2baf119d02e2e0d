"""Results never depend on the machine's lane count: every case of the suite and of gpu-truth runs
to the same outputs (bit for bit) and the same step trace for 1, 2, 4, 8 and 32 lanes."""
from gpu_layers.cases import load_cases
from gpu_layers.interp import run_case
from gpu_layers.suite import load_suite
from tests.conftest import require_gpu_truth

LANES = (1, 2, 4, 8, 32)


def _same(case):
    runs = [run_case(case, lanes=n) for n in LANES]
    base = runs[2]
    for n, r in zip(LANES, runs):
        assert r.fingerprint == base.fingerprint and r.steps == base.steps, (case.name, n)
        assert r.outputs.keys() == base.outputs.keys()
        for k, v in base.outputs.items():
            assert r.outputs[k].tobytes() == v.tobytes(), (case.name, n, k)
    issues = [r.lane_issues for r in runs]      # wider lanes never issue more groups
    assert issues == sorted(issues, reverse=True) and issues[-1] == base.steps, (case.name, issues)


def test_suite_cases_do_not_depend_on_lane_count():
    for case in load_suite():
        _same(case)


def test_gpu_truth_cases_do_not_depend_on_lane_count():
    cases = load_cases(require_gpu_truth() / "cases.json")
    assert len(cases) >= 40
    for case in cases:
        _same(case)
