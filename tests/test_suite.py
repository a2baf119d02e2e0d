"""The project's kernel suite (gpu_layers/suite): every case compiled with nvcc, run on the reference
interpreter (4 lanes) and compared bit for bit with the independent references."""
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from gpu_layers.suite import CASES_PATH, SUITE_DIR, kernel_names, load_suite, raw_cases
from gpu_layers.suite import reference as R
from gpu_layers.suite.reference import REFERENCES

RAW = raw_cases()
CASES = {c.name: c for c in load_suite()}


@pytest.fixture(scope="module", autouse=True)
def _warm_ptx_cache():
    """Compile every kernel once, two at a time (the cache makes later runs free)."""
    with ThreadPoolExecutor(2) as ex:
        list(ex.map(lambda c: c.ptx(), {c.source: c for c in CASES.values()}.values()))


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def compare(name, got, want):
    problems = []
    assert set(got) >= set(want), f"{name}: missing outputs {set(want) - set(got)}"
    for buf, exp in want.items():
        g = got[buf]
        if g.dtype != exp.dtype or g.shape != exp.shape:
            problems.append(f"{buf}: {g.dtype}{g.shape} != {exp.dtype}{exp.shape}")
            continue
        bad = np.nonzero(bits(g) != bits(exp))[0]
        if len(bad):
            i = bad[:6]
            problems.append(f"{buf}: {len(bad)} element(s) differ at {i.tolist()}: "
                            f"interp {g[i].tolist()} reference {exp[i].tolist()}")
    return problems


def test_suite_size_and_reference_coverage():
    assert len(kernel_names()) >= 50
    assert set(RAW) == set(REFERENCES), (
        f"cases without reference: {sorted(set(RAW) - set(REFERENCES))}; "
        f"references without case: {sorted(set(REFERENCES) - set(RAW))}")
    on_disk = {p.stem for p in SUITE_DIR.glob("*.cu")}
    assert on_disk == set(kernel_names()), f"unused .cu: {on_disk - set(kernel_names())}"


def test_cases_respect_the_format_limits():
    for name, c in RAW.items():
        threads = np.prod(c["grid"]) * np.prod(c["block"])
        assert threads <= 128, name
        assert c["features"], name
        for a in c["args"]:
            if a["type"].endswith("*"):
                assert 1 <= len(a["data"]) <= 256, (name, a["name"])
                if a["type"] == "f32*":
                    for v in a["data"]:
                        assert isinstance(v, str) or float(np.float32(v)) == v, (name, a["name"], v)
                if a["type"] == "f64*":
                    for v in a["data"]:
                        assert v in ("nan", "inf", "-inf") or isinstance(v, float), (name, a["name"], v)


@pytest.mark.parametrize("name", sorted(RAW))
def test_case_matches_reference(name):
    from gpu_layers.interp import run_case

    case = CASES[name]
    want = REFERENCES[name](RAW[name])
    res = run_case(case, lanes=4)
    problems = compare(name, res.outputs, want)
    assert not problems, f"{name}: " + "; ".join(problems)
    assert res.steps > 0 and res.lane_issues >= res.steps


_EXACT_FACTORS = (r"0f(3F000000|3E800000|BE800000|BF000000|40000000|3F800000)|"
                  r"0d(3FE0|3FD0|BFD0|BFE0|4000|3FF0)000000000000")


def _fusable_chains(ptx):
    """Plain mul.f32/f64 results feeding a plain add/sub of the same type (ptxas may fuse those
    into an fma)."""
    products = {}
    found = []
    for line in ptx.splitlines():
        m = re.match(r"\s*(?:@!?%p\d+\s+)?(mul|add|sub)\.(f32|f64)\s+(%fd?\d+),\s*([^;]+);", line)
        if not m:
            continue
        op, dst, srcs = m.group(1), m.group(3), [s.strip() for s in m.group(4).split(",")]
        if op == "mul":
            # a product by a power of two is exact: fused or not, the result is the same
            exact = any(re.fullmatch(_EXACT_FACTORS, s) for s in srcs)
            products[dst] = exact
        else:
            found += [line.strip() for s in srcs if s in products and not products[s]]
    return found


def test_no_fusable_float_chains():
    bad = {}
    for c in {c.source: c for c in CASES.values()}.values():
        chains = _fusable_chains(c.ptx())
        if chains:
            bad[c.kernel] = chains
    assert not bad, f"plain mul.f32 -> add.f32 chains (use __fmul_rn/__fadd_rn): {bad}"


# --- the references check themselves against known answers ----------------------------------
def test_reference_helpers_known_values():
    assert R.rc4(b"Key", 10).hex() == "eb9f7781b734ca72a719"
    assert R.rc4(b"Wiki", 6).hex() == "6044db6d41b7"
    assert R.cdiv(-7, 2) == -3 and R.crem(-7, 2) == -1 and R.crem(7, -2) == 1
    assert R.byte_perm(0x33221100, 0x77665544, 0x7531) == 0x77553311
    one, third = np.float32(1.0), np.float32(1 / 3)
    assert R.fdiv(one, np.float32(3.0)) == third
    assert np.float32(1 / 3) > R.Fraction(1, 3)          # nearest float32 to 1/3 is above it
    assert R.fdiv(one, np.float32(3.0), "ru") == third
    assert R.fdiv(one, np.float32(3.0), "rz") == np.nextafter(third, np.float32(0))
    assert R.fdiv(-one, np.float32(3.0), "rd") == -third
    big = np.float32(3e38)
    assert np.isinf(R.fmul(big, big)) and R.fmul(big, big, "rz") == np.finfo(np.float32).max
    assert R.fmul(-big, big, "ru") == -np.finfo(np.float32).max
    # fma rounds once: (1 + 2^-23)(1 - 2^-23) - 1 = -2^-46 exactly, lost by mul-then-add
    a, b = np.float32(1 + 2.0**-23), np.float32(1 - 2.0**-23)
    assert R.fma(a, b, np.float32(-1.0)) == np.float32(-(2.0**-46))
    assert R.fadd(R.fmul(a, b), np.float32(-1.0)) == 0.0
    assert R.round_f32(R.Fraction(2**24 + 1)) == np.float32(2**24)       # tie to even
    assert R.round_f32(R.Fraction(2**24 + 3)) == np.float32(2**24 + 4)
    assert R.f2i(np.float32(2.5), "rn", *R.I32R) == 2 and R.f2i(np.float32(-2.5), "rn", *R.I32R) == -2
    assert R.f2i(np.float32(3e9), "rz", *R.I32R) == 2**31 - 1 and R.f2i(np.float32(-1.0), "rn", *R.U32R) == 0
    assert R.shfl(list(range(32)), 12, "bfly", 9, 8) == 5 and R.shfl(list(range(32)), 3, "bfly", 9, 8) == 3
    assert R.shfl(list(range(32)), 9, "up", 3, 8) == 9 and R.shfl(list(range(32)), 11, "up", 3, 8) == 8
    # float64 helpers
    tenth = R.F64(0.1)                                    # nearest double to 1/10 is above it
    assert R.Fraction(float(tenth)) > R.Fraction(1, 10)
    assert R.ddiv(1.0, 10.0) == tenth and R.ddiv(1.0, 10.0, "ru") == tenth
    assert R.ddiv(1.0, 10.0, "rz") == np.nextafter(tenth, 0) == R.ddiv(1.0, 10.0, "rd")
    assert R.ddiv(-1.0, 10.0, "rd") == -tenth and R.ddiv(-1.0, 10.0, "ru") == -np.nextafter(tenth, 0)
    big = np.finfo(np.float64).max
    assert np.isinf(R.dmul(1e308, 10.0)) and R.dmul(1e308, 10.0, "rz") == big == R.dmul(1e308, 10.0, "rd")
    assert R.dmul(-1e308, 10.0, "ru") == -big and R.dmul(1e-300, 1e-300, "ru") == 5e-324
    a, b = 1 + 2.0**-52, 1 - 2.0**-52
    assert R.dfma(a, b, -1.0) == -(2.0**-104) and R.dadd(R.dmul(a, b), -1.0) == 0.0
    assert R.round_f64(R.Fraction(2**53 + 1)) == 2.0**53 and R.round_f64(R.Fraction(2**53 + 3)) == 2.0**53 + 4
    assert R.dsqrt(2.0, "rz") == np.nextafter(np.sqrt(2.0), 0) and R.dsqrt(2.0, "ru") == np.sqrt(2.0)
    assert R.d2i(2.5, "rn", *R.I32R) == 2 and R.d2i(float("nan"), "rz", *R.I32R) == -(2**31)
    assert R.d2i(float("nan"), "rz", *R.U64R) == 2**63 and R.f2i(np.float32("nan"), "rz", *R.I64R) == -(2**63)
    assert R.d2f(3.5e38, "rz") == np.finfo(np.float32).max and np.isinf(R.d2f(3.5e38, "rn"))
    assert R.dmin(0.0, -0.0) == 0.0 and np.signbit(R.dmin(0.0, -0.0)) and not np.signbit(R.dmax(-0.0, 0.0))


def test_cases_file_is_generated_from_make_cases():
    """cases.json must be exactly what make_cases.py writes (edit the generator, not the JSON)."""
    import json

    from gpu_layers.suite import make_cases

    assert json.loads(CASES_PATH.read_text()) == json.loads(json.dumps(make_cases.build()))


@pytest.mark.parametrize("lanes", [1, 2, 8, 32])
def test_outputs_and_steps_do_not_depend_on_lane_count(lanes):
    """The machine's lane count changes how a warp is issued, never what it computes."""
    from gpu_layers.interp import run_case

    for name in sorted(RAW):
        base = run_case(CASES[name], lanes=4)
        other = run_case(CASES[name], lanes=lanes)
        assert not compare(name, other.outputs, base.outputs), (name, lanes)
        assert other.steps == base.steps, (name, lanes)
        if lanes == 32:
            assert other.lane_issues == other.steps, name


def test_compare_sees_single_bit_and_signed_zero_differences():
    a = {"x": np.array([1.0, 0.0], dtype=np.float32), "y": np.array([5, 6], dtype=np.int64)}
    b = {"x": np.array([1.0, -0.0], dtype=np.float32), "y": np.array([5, 6 ^ (1 << 62)], dtype=np.int64)}
    assert not compare("t", a, a)
    probs = compare("t", b, a)
    assert len(probs) == 2 and "x: 1 element" in probs[0] and "y: 1 element" in probs[1]
    assert compare("t", {"x": a["x"].astype(np.int32), "y": a["y"]}, a)


def test_gpu_check_script_marshals_every_dtype(tmp_path):
    """scripts/gpu_check_suite.py without a GPU: a stand-in for CuPy whose kernel launch is the
    interpreter shows that the script passes f32/f64 scalars and buffers with the right types."""
    import importlib.util
    import types

    from gpu_layers.cases import DTYPES
    from gpu_layers.interp import Scalar, launch
    from gpu_layers.ptx import parse_ptx

    spec = importlib.util.spec_from_file_location("gpu_check_suite", SUITE_DIR.parents[1] / "scripts" / "gpu_check_suite.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert {k: np.dtype(v) for k, v in mod.SCALAR_DTYPES.items()} == {k: np.dtype(v) for k, v in DTYPES.items()}
    kinds = {np.dtype(v): k for k, v in DTYPES.items()}

    class Module:
        def __init__(self, path):
            self.ptx = open(path).read()

        def get_function(self, name):
            def fn(grid, block, args, shared_mem=0):
                conv = [a if isinstance(a, np.ndarray) else Scalar(kinds[np.asarray(a).dtype], a.item())
                        for a in args]
                res = launch(parse_ptx(self.ptx).kernel(name), grid, block, conv, shared_mem)
                for a, b in zip(args, res.buffers):
                    if b is not None:
                        a[...] = b
            return fn

    cp = types.SimpleNamespace(asarray=np.array, asnumpy=np.array, RawModule=lambda path: Module(path),
                               cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: None)))
    runner = mod.GpuRunner(cp, "9.0", False, None)
    for name in ("f64_arith", "f64_atomic_add", "f32_promote_f64", "nan_results", "horner_poly"):
        got = runner.run(CASES[name])
        problems = compare(name, got, REFERENCES[name](RAW[name]))
        assert not problems, problems
