"""`python -m gpu_layers demo`: one kernel end to end, from CUDA source to checked outputs.

  1. compile a small CUDA kernel from the suite with the pip-installed nvcc (sandboxed),
  2. show a few lines of its PTX,
  3. parse and validate the PTX against what the machine supports,
  4. run it on the reference SIMT interpreter with 4 lanes (inputs, outputs, step counts),
  5. check every output element, bit for bit, against an independent numpy reference.

Exit status 0 when everything matches, 1 otherwise. `main(args)` takes the argparse namespace of
the CLI; an optional `case` attribute picks another suite case (default: isqrt_u32).
"""
from __future__ import annotations

import sys
import time

import numpy as np

DEFAULT_CASE = "isqrt_u32"


def _say(msg=""):
    print(msg, flush=True)


def _fmt_array(a: np.ndarray, limit: int = 16) -> str:
    vals = a.tolist()
    if a.dtype == np.float32:
        vals = [float(np.float32(v)) for v in vals]
        body = ", ".join(repr(v) for v in vals[:limit])
    else:
        body = ", ".join(str(v) for v in vals[:limit])
    more = f", ... ({len(vals)} in all)" if len(vals) > limit else ""
    return f"[{body}{more}]"


def _ptx_excerpt(ptx: str, kernel: str, n: int = 14) -> list:
    lines = ptx.splitlines()
    start = next((i for i, l in enumerate(lines) if ".entry" in l and kernel in l), 0)
    head = [lines[start].rstrip()] if lines else []
    body = [l.rstrip() for l in lines[start + 1:]
            if l.strip() and not l.strip().startswith(("//", ".param", ".reg", ".shared", ".local", "(", ")", "{"))]
    return head + body[:n]


def run_demo(case_name: str = DEFAULT_CASE, lanes: int = 4) -> int:
    """Run the demo; returns the exit status."""
    from gpu_layers.cases import parse_case
    from gpu_layers.errors import QwenGPUError
    from gpu_layers.interp import run_case
    from gpu_layers.nvcc import compile_cuda, find_nvcc
    from gpu_layers.ptx import parse_ptx
    from gpu_layers.ptx.validator import validate
    from gpu_layers.suite import CASES_PATH, SUITE_DIR, raw_cases
    from gpu_layers.suite.reference import REFERENCES

    raw = raw_cases()
    if case_name not in raw:
        _say(f"error: no suite case named {case_name!r}; try one of: {', '.join(sorted(raw))}")
        return 2
    obj = raw[case_name]
    case = parse_case(obj, SUITE_DIR, path=CASES_PATH)
    source = case.source.read_text(encoding="utf-8")
    grid, block = tuple(case.grid), tuple(case.block)
    nthreads = int(np.prod(grid) * np.prod(block))

    _say("qwenGPU demo: a CUDA kernel compiled to PTX and run on the reference SIMT machine")
    _say(f"kernel {case.kernel!r} from gpu_layers/suite/{case.source.name}:")
    _say()
    for line in source.rstrip().splitlines():
        _say(f"    {line}")
    _say()

    try:
        # 1. compile
        _say(f"[1/5] compiling with nvcc ({find_nvcc().parent.parent.name} package, arch {case.arch}) ...")
        t0 = time.perf_counter()
        ptx = compile_cuda(source, arch=case.arch)
        _say(f"      done in {time.perf_counter() - t0:.2f} s: {len(ptx.splitlines())} lines of PTX")

        # 2. show some PTX
        _say("[2/5] the start of the kernel's PTX:")
        for line in _ptx_excerpt(ptx, case.kernel):
            _say(f"      | {line}")
        _say("      | ...")

        # 3. parse and validate
        _say("[3/5] parsing and validating the PTX ...")
        module = parse_ptx(ptx)
        validate(module, case.kernel)
        kernel = module.kernel(case.kernel)
        ops = sorted({ins.name for ins in kernel.instructions})
        _say(f"      ok: {len(kernel.instructions)} instructions, {len(ops)} distinct forms, all supported")

        # 4. run
        _say(f"[4/5] running on the interpreter: grid {list(grid)} x block {list(block)} = {nthreads} threads, "
             f"{lanes} lanes")
        for a in case.args:
            if a.is_buffer and not a.output:
                _say(f"      in  {a.name:>10} = {_fmt_array(a.data)}")
            elif not a.is_buffer:
                _say(f"      in  {a.name:>10} = {a.value}")
        t0 = time.perf_counter()
        res = run_case(case, lanes=lanes)
        dt = time.perf_counter() - t0
        for name, arr in res.outputs.items():
            _say(f"      out {name:>10} = {_fmt_array(arr)}")
        _say(f"      {res.steps} warp-instruction steps, {res.lane_issues} lane-group issues "
             f"({lanes}-lane groups), {dt * 1000:.0f} ms")

        # 5. check
        _say("[5/5] checking against the independent numpy reference ...")
        want = REFERENCES[case_name](obj)
        total = bad = 0
        for name, exp in want.items():
            got = res.outputs[name]
            w = {4: np.uint32, 8: np.uint64}[exp.dtype.itemsize]
            diff = np.nonzero(got.view(w) != exp.view(w))[0]
            total += exp.size
            bad += len(diff)
            if len(diff):
                i = diff[:5]
                _say(f"      MISMATCH in {name} at {i.tolist()}: got {got[i].tolist()}, expected {exp[i].tolist()}")
    except QwenGPUError as e:
        _say(f"error: {e}")
        return 1
    if bad:
        _say(f"FAILED: {bad} of {total} output elements differ from the reference")
        return 1
    _say(f"      all {total} output elements match bit for bit")
    _say("demo finished: CUDA -> nvcc -> PTX -> SIMT interpreter -> exact outputs")
    return 0


def main(args=None) -> int:
    case_name = getattr(args, "case", None) or DEFAULT_CASE
    lanes = getattr(args, "lanes", None) or 4
    return run_demo(case_name, lanes=lanes)


if __name__ == "__main__":
    sys.exit(main())
