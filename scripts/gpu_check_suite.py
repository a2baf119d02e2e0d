#!/usr/bin/env python3
"""Run the kernel suite on a real NVIDIA GPU (CuPy) and compare, bit for bit, with the reference
interpreter and the independent references; write a truth.json in the gpu-truth format.

    python scripts/gpu_check_suite.py                         # the project's suite
    python scripts/gpu_check_suite.py --out truth.json        # also record the GPU's outputs
    python scripts/gpu_check_suite.py --cases ../shared/gpu-truth/cases.json \
        --reference ../shared/gpu-truth/reference.py          # any case file + reference module
    python scripts/gpu_check_suite.py --from-source           # compile the .cu with NVRTC instead

Needs an NVIDIA GPU and CuPy (`pip install cupy-cuda13x`, or cupy-cuda12x for a CUDA 12 driver).
By default each case's PTX is the one the interpreter runs (pip nvcc, `Case.ptx()`), with its
`.version` line lowered to --ptx-version (a CUDA 13.0 driver refuses PTX ISA 9.5), JIT-loaded by
the driver. Each case is launched --repeat times; every launch must give the same bits.
Exit status: 0 all equal, 1 some mismatch or failure, 2 no GPU / no CuPy / bad arguments.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# every scalar type of the case format (gpu_layers.cases.SCALAR_TYPES), f64 included; buffers keep
# their numpy dtype (float64 buffers travel as they are)
SCALAR_DTYPES = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64, "f32": np.float32,
                 "f64": np.float64}


def die(msg: str, status: int = 2):
    print(f"gpu_check_suite: {msg}", file=sys.stderr)
    sys.exit(status)


def import_cupy():
    try:
        import cupy  # noqa: F401
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        die(f"CuPy is not available ({type(e).__name__}: {e}).\n"
            "  This script needs an NVIDIA GPU and CuPy, e.g. `pip install cupy-cuda13x`; it is never run in CI.")
    import cupy

    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        die(f"no usable NVIDIA GPU: {type(e).__name__}: {e}")
    if n < 1:
        die("no NVIDIA GPU found (cupy.cuda.runtime.getDeviceCount() == 0)")
    return cupy


def load_reference(path: Path | None):
    if path is None:
        from gpu_layers.suite.reference import REFERENCES

        return REFERENCES
    spec = importlib.util.spec_from_file_location("case_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.REFERENCES


def bits_of(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def hex_bits(a: np.ndarray) -> list:
    width = 2 * a.dtype.itemsize
    return [format(int(b), f"0{width}x") for b in bits_of(a)]


def json_values(a: np.ndarray) -> list:
    out = []
    for v in a.tolist():
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            out.append(repr(v))
        else:
            out.append(v)
    return out


def count_diff(a: np.ndarray, b: np.ndarray) -> int:
    if a.dtype != b.dtype or a.shape != b.shape:
        return max(a.size, b.size)
    return int(np.count_nonzero(bits_of(a) != bits_of(b)))


class GpuRunner:
    def __init__(self, cupy, ptx_version: str, from_source: bool, arch: str | None):
        self.cp = cupy
        self.ptx_version = ptx_version
        self.from_source = from_source
        self.arch = arch
        self.tmp = tempfile.TemporaryDirectory(prefix="gpu-check-")
        self._modules = {}

    def module(self, case):
        key = (str(case.source), case.ptx_text, self.from_source)
        if key in self._modules:
            return self._modules[key]
        if self.from_source:
            if case.source is None:
                raise RuntimeError("case has no CUDA source (inline PTX): cannot use --from-source")
            opts = ("-std=c++17",) + ((f"-arch={self.arch}",) if self.arch else ())
            mod = self.cp.RawModule(code=case.source.read_text(encoding="utf-8"), options=opts, backend="nvrtc")
        else:
            from gpu_layers.nvcc import ptx_version_for_driver

            ptx = case.ptx()
            if self.ptx_version:
                ptx = ptx_version_for_driver(ptx, self.ptx_version)
            path = Path(self.tmp.name, f"k{len(self._modules)}.ptx")
            path.write_text(ptx, encoding="utf-8")
            mod = self.cp.RawModule(path=str(path))
        self._modules[key] = mod
        return mod

    def run(self, case) -> dict:
        cp = self.cp
        fn = self.module(case).get_function(case.kernel)
        args, bufs = [], {}
        for a in case.args:
            if a.is_buffer:
                d = cp.asarray(np.ascontiguousarray(a.data))
                bufs[a.name] = d
                args.append(d)
            else:
                args.append(SCALAR_DTYPES[a.elem_type](a.value))
        fn(tuple(case.grid), tuple(case.block), tuple(args), shared_mem=case.dynamic_shared_bytes)
        cp.cuda.runtime.deviceSynchronize()
        outs = [a.name for a in case.args if a.is_buffer and a.output] or list(bufs)
        return {n: cp.asnumpy(bufs[n]) for n in outs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=Path, default=None, help="case file (default: gpu_layers/suite/cases.json)")
    ap.add_argument("--reference", type=Path, default=None,
                    help="a Python file defining REFERENCES (default: gpu_layers.suite.reference)")
    ap.add_argument("--out", type=Path, default=None, help="write the GPU's outputs here (gpu-truth truth.json format)")
    ap.add_argument("--names", nargs="*", default=None, help="only these cases")
    ap.add_argument("--repeat", type=int, default=2, help="launches per case (all must agree)")
    ap.add_argument("--ptx-version", default="9.0", help="lower the PTX .version line to this ('' keeps it)")
    ap.add_argument("--from-source", action="store_true", help="compile the .cu with NVRTC instead of loading PTX")
    ap.add_argument("--arch", default=None, help="NVRTC -arch with --from-source (e.g. sm_90)")
    ap.add_argument("--no-interp", action="store_true", help="skip the interpreter comparison")
    ap.add_argument("--lanes", type=int, default=4)
    args = ap.parse_args(argv)

    cp = import_cupy()

    from gpu_layers.cases import load_cases
    from gpu_layers.errors import QwenGPUError

    cases_path = args.cases or (ROOT / "gpu_layers" / "suite" / "cases.json")
    if not cases_path.is_file():
        die(f"no case file {cases_path}")
    cases = load_cases(cases_path)
    if args.names:
        unknown = set(args.names) - {c.name for c in cases}
        if unknown:
            die(f"unknown case(s): {sorted(unknown)}")
        cases = [c for c in cases if c.name in args.names]
    refs = load_reference(args.reference)
    raw = {o["name"]: o for o in json.loads(cases_path.read_text())}
    runner = GpuRunner(cp, args.ptx_version, args.from_source, args.arch)

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    gpu_name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    print(f"GPU: {gpu_name}  driver {cp.cuda.runtime.driverGetVersion()}  runtime {cp.cuda.runtime.runtimeGetVersion()}"
          f"  CuPy {cp.__version__}  cases: {cases_path}")
    hdr = f"{'case':28} {'elements':>8} {'gpu=ref':>8} {'gpu=interp':>10} {'repeat':>7}  note"
    print(hdr)
    print("-" * len(hdr))

    results, failures = {}, 0
    for case in cases:
        note = ""
        try:
            t0 = time.perf_counter()
            gpu = runner.run(case)
            same = True
            for _ in range(args.repeat - 1):
                again = runner.run(case)
                same &= all(count_diff(gpu[n], again[n]) == 0 for n in gpu)
            note = f"{(time.perf_counter() - t0) * 1000:.0f} ms"
        except Exception as e:
            failures += 1
            print(f"{case.name:28} {'-':>8} {'-':>8} {'-':>10} {'-':>7}  GPU FAILED: {type(e).__name__}: {e}")
            continue
        n_el = sum(a.size for a in gpu.values())
        ref_txt = interp_txt = "-"
        ok = same
        if case.name in refs:
            want = refs[case.name](raw[case.name])
            d = sum(count_diff(gpu[n], want[n]) for n in want)
            ref_txt = "yes" if d == 0 else f"{d} diff"
            ok &= d == 0
        else:
            ref_txt = "no ref"
        if not args.no_interp:
            try:
                from gpu_layers.interp import run_case

                got = run_case(case, lanes=args.lanes).outputs
                d = sum(count_diff(gpu[n], got[n]) for n in gpu)
                interp_txt = "yes" if d == 0 else f"{d} diff"
                ok &= d == 0
            except QwenGPUError as e:
                interp_txt = "unsupported"
                note += f"; interp: {str(e).splitlines()[0]}"
        failures += not ok
        print(f"{case.name:28} {n_el:>8} {ref_txt:>8} {interp_txt:>10} {'same' if same else 'DIFFER':>7}  {note}")
        results[case.name] = {n: {"dtype": str(a.dtype), "bits": hex_bits(a), "values": json_values(a)}
                              for n, a in gpu.items()}

    print("-" * len(hdr))
    print(f"{len(results)} of {len(cases)} cases ran on the GPU; {failures} with a mismatch or failure")
    if args.out:
        meta = {"gpu": gpu_name, "driver_api": cp.cuda.runtime.driverGetVersion(),
                "recorded": datetime.date.today().isoformat(),
                "how": ("CUDA source compiled with NVRTC" if args.from_source else
                        f"pip-nvcc PTX (.version lowered to {args.ptx_version or 'unchanged'}) JIT-loaded by the driver")
                       + f", launched {args.repeat}x with the case's inputs (scripts/gpu_check_suite.py)",
                "cases": os.path.relpath(cases_path, ROOT) if cases_path.is_relative_to(ROOT) else str(cases_path)}
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
