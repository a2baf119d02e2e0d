"""Launch cases: the JSON format shared with ../shared/gpu-truth (see its README).

A case file holds one case object or a list of them:

    {"name": "saxpy_f32", "source": "saxpy_f32.cu", "kernel": "saxpy_f32",
     "grid": [2,1,1], "block": [4,1,1], "dynamic_shared_bytes": 0,
     "args": [{"name": "n", "type": "i32", "value": 7},
              {"name": "y", "type": "f32*", "data": [...], "output": true}],
     "features": [...]}

Scalar types `i32 u32 i64 u64 f32 f64`; a buffer type adds `*` and has `data` (its full initial
contents), optionally `"output": true`. Exactly one of `source` (a .cu path, relative to the case
file's folder) or `ptx` (PTX text inline) gives the kernel; a case may carry both, `ptx` wins.
Optional: `arch` (default "sm_75"), `features`, `dynamic_shared_bytes` (default 0). f32 values
and f64 values may also be the strings "nan", "inf", "-inf" (a NaN with chosen bits goes through
an integer buffer and a bit cast in the kernel). Validation is strict (CaseError names the case and
the field); launch limits are checked again by the interpreter (LaunchError).

`Case.ptx()` returns the PTX: the inline text, or the source compiled with
gpu_layers.nvcc.compile_cuda and cached on disk under $QWENGPU_CACHE/ptx/ (default
~/.cache/qwengpu/ptx/) as <sha256(source NUL arch)>.ptx.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpu_layers.errors import CaseError

SCALAR_TYPES = ("i32", "u32", "i64", "u64", "f32", "f64")
DTYPES = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64, "f32": np.float32,
          "f64": np.float64}
RANGES = {"i32": (-2**31, 2**31 - 1), "u32": (0, 2**32 - 1), "i64": (-2**63, 2**63 - 1),
          "u64": (0, 2**64 - 1)}
MAX_BUFFER_ELEMENTS = 1 << 20
_CASE_KEYS = {"name", "source", "ptx", "kernel", "grid", "block", "dynamic_shared_bytes", "args",
              "features", "arch", "description"}
_ARG_KEYS = {"name", "type", "value", "data", "output"}


@dataclass
class CaseArg:
    name: str
    type: str                   # "i32", ..., "f32*", ...
    value: object = None        # scalars: int or float
    data: np.ndarray | None = None   # buffers: initial contents
    output: bool = False

    @property
    def is_buffer(self) -> bool:
        return self.type.endswith("*")

    @property
    def elem_type(self) -> str:
        return self.type.rstrip("*")


@dataclass
class Case:
    name: str
    kernel: str
    grid: tuple
    block: tuple
    args: list
    dynamic_shared_bytes: int = 0
    source: Path | None = None
    ptx_text: str | None = None
    arch: str = "sm_75"
    features: list = field(default_factory=list)
    path: Path | None = None

    def ptx(self) -> str:
        """The case's PTX: inline, or compiled from `source` (cached on disk)."""
        if self.ptx_text is not None:
            return self.ptx_text
        if self.source is None:
            raise CaseError(f"case {self.name!r}: no 'source' or 'ptx'")
        try:
            src = self.source.read_text(encoding="utf-8")
        except OSError as e:
            raise CaseError(f"case {self.name!r}: cannot read source {self.source}: {e}") from None
        return compile_cached(src, self.arch)

    @property
    def outputs(self) -> list:
        return [a for a in self.args if a.is_buffer and a.output]


def cache_root() -> Path:
    """$QWENGPU_CACHE, else ~/.cache/qwengpu: compiled PTX (ptx/) and the compiled core (core/)."""
    root = os.environ.get("QWENGPU_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "qwengpu"


def cache_dir() -> Path:
    return cache_root() / "ptx"


def compile_cached(source: str, arch: str = "sm_75") -> str:
    """compile_cuda with an on-disk cache keyed by sha256(source NUL arch)."""
    key = hashlib.sha256(source.encode("utf-8") + b"\0" + arch.encode("utf-8")).hexdigest()
    path = cache_dir() / f"{key}.ptx"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    from gpu_layers.nvcc import compile_cuda

    ptx = compile_cuda(source, arch=arch)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(ptx, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass   # a read-only cache is not an error
    return ptx


def _err(where, msg):
    raise CaseError(f"{where}: {msg}")


def _dims(v, where, what):
    if not isinstance(v, list) or not 1 <= len(v) <= 3 or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in v):
        _err(where, f"'{what}' must be a list of 1 to 3 integers, got {v!r}")
    if any(x < 1 for x in v):
        _err(where, f"'{what}' dimensions must be >= 1, got {v!r}")
    v = list(v) + [1] * (3 - len(v))
    return tuple(v)


def _f32(x, where):
    if isinstance(x, str):
        m = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "+inf": math.inf}
        if x.lower() not in m:
            _err(where, f"bad f32 value {x!r}")
        return np.float32(m[x.lower()])
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        _err(where, f"f32 value must be a number, got {x!r}")
    v = float(x)
    with np.errstate(over="ignore"):
        f = np.float32(v)
    if math.isfinite(v) and not np.isfinite(f):
        _err(where, f"{x!r} overflows f32")
    return f


def _f64(x, where):
    if isinstance(x, str):
        m = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "+inf": math.inf}
        if x.lower() not in m:
            _err(where, f"bad f64 value {x!r}")
        return np.float64(m[x.lower()])
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        _err(where, f"f64 value must be a number, got {x!r}")
    try:
        v = float(x)
    except OverflowError:
        v = math.inf
    if isinstance(x, int) and v != x:
        _err(where, f"integer {x} is not exactly representable in f64")
    return np.float64(v)


def _int(x, t, where):
    if isinstance(x, bool) or not isinstance(x, int):
        _err(where, f"{t} value must be an integer, got {x!r}")
    lo, hi = RANGES[t]
    if not lo <= x <= hi:
        _err(where, f"{x} is out of range for {t} [{lo}, {hi}]")
    return x


def parse_case(obj, base_dir: Path | None = None, index: int = 0, path: Path | None = None) -> Case:
    """Validate one case object (already JSON-decoded)."""
    where = f"case #{index}"
    if not isinstance(obj, dict):
        _err(where, f"a case must be an object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        _err(where, "missing or empty 'name'")
    where = f"case {name!r}"
    unknown = set(obj) - _CASE_KEYS
    if unknown:
        _err(where, f"unknown field(s) {sorted(unknown)}")
    for k in ("kernel", "grid", "block", "args"):
        if k not in obj:
            _err(where, f"missing field '{k}'")
    kernel = obj["kernel"]
    if not isinstance(kernel, str) or not kernel:
        _err(where, "'kernel' must be a non-empty string")
    grid = _dims(obj["grid"], where, "grid")
    block = _dims(obj["block"], where, "block")
    if block[0] * block[1] * block[2] > 1024:
        _err(where, f"block {list(block)} has more than 1024 threads")
    dsm = obj.get("dynamic_shared_bytes", 0)
    if isinstance(dsm, bool) or not isinstance(dsm, int) or dsm < 0:
        _err(where, f"'dynamic_shared_bytes' must be an integer >= 0, got {dsm!r}")
    if dsm > 48 * 1024:
        _err(where, f"'dynamic_shared_bytes' {dsm} exceeds 48 KiB")
    source = obj.get("source")
    ptx = obj.get("ptx")
    if source is None and ptx is None:
        _err(where, "needs 'source' (a .cu file) or 'ptx'")
    src_path = None
    if source is not None:
        if not isinstance(source, str) or not source:
            _err(where, "'source' must be a path")
        src_path = Path(source)
        if not src_path.is_absolute():
            src_path = (base_dir or Path.cwd()) / src_path
    if ptx is not None and not isinstance(ptx, str):
        _err(where, "'ptx' must be a string")
    arch = obj.get("arch", "sm_75")
    if not isinstance(arch, str):
        _err(where, "'arch' must be a string")
    features = obj.get("features", [])
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        _err(where, "'features' must be a list of strings")
    raw_args = obj["args"]
    if not isinstance(raw_args, list):
        _err(where, "'args' must be a list")
    args = []
    seen = set()
    for i, a in enumerate(raw_args):
        aw = f"{where}, argument #{i}"
        if not isinstance(a, dict):
            _err(aw, "must be an object")
        unknown = set(a) - _ARG_KEYS
        if unknown:
            _err(aw, f"unknown field(s) {sorted(unknown)}")
        an = a.get("name")
        if not isinstance(an, str) or not an:
            _err(aw, "missing or empty 'name'")
        aw = f"{where}, argument {an!r}"
        if an in seen:
            _err(aw, "duplicate argument name")
        seen.add(an)
        t = a.get("type")
        if not isinstance(t, str) or t.rstrip("*") not in SCALAR_TYPES or t.count("*") > 1 or (
                "*" in t and not t.endswith("*")):
            _err(aw, f"unknown type {t!r} (scalars: {', '.join(SCALAR_TYPES)}; buffers add '*')")
        out = a.get("output", False)
        if not isinstance(out, bool):
            _err(aw, "'output' must be true or false")
        et = t.rstrip("*")
        if t.endswith("*"):
            if "value" in a:
                _err(aw, "a buffer has 'data', not 'value'")
            data = a.get("data")
            if not isinstance(data, list):
                _err(aw, "a buffer needs 'data' (a list of its initial elements)")
            if not data:
                _err(aw, "a buffer needs at least one element")
            if len(data) > MAX_BUFFER_ELEMENTS:
                _err(aw, f"more than {MAX_BUFFER_ELEMENTS} elements")
            if et == "f32":
                arr = np.array([_f32(x, f"{aw}[{j}]") for j, x in enumerate(data)], dtype=np.float32)
            elif et == "f64":
                arr = np.array([_f64(x, f"{aw}[{j}]") for j, x in enumerate(data)], dtype=np.float64)
            else:
                arr = np.array([_int(x, et, f"{aw}[{j}]") for j, x in enumerate(data)],
                               dtype=DTYPES[et])
            args.append(CaseArg(an, t, data=arr, output=out))
        else:
            if "data" in a:
                _err(aw, "a scalar has 'value', not 'data'")
            if out:
                _err(aw, "only buffers can be outputs")
            if "value" not in a:
                _err(aw, "missing 'value'")
            v = a["value"]
            v = float(_f32(v, aw)) if et == "f32" else float(_f64(v, aw)) if et == "f64" else _int(v, et, aw)
            args.append(CaseArg(an, t, value=v))
    return Case(name=name, kernel=kernel, grid=grid, block=block, args=args,
                dynamic_shared_bytes=dsm, source=src_path, ptx_text=ptx, arch=arch,
                features=list(features), path=path)


def load_cases(path) -> list:
    """All cases in a JSON file (one case object or a list of them)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except OSError as e:
        raise CaseError(f"{path}: cannot read: {e}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise CaseError(f"{path}: not valid JSON: {e}") from None
    objs = obj if isinstance(obj, list) else [obj]
    if not objs:
        raise CaseError(f"{path}: holds no cases")
    cases = [parse_case(o, path.parent, i, path) for i, o in enumerate(objs)]
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise CaseError(f"{path}: duplicate case name(s) {sorted(dup)}")
    return cases


def load_case(path, name: str | None = None) -> Case:
    """One case from a file: the only one, or the one called `name`."""
    cases = load_cases(path)
    if name is None:
        if len(cases) != 1:
            raise CaseError(f"{path} holds {len(cases)} cases; pick one with a name: "
                            f"{', '.join(c.name for c in cases)}")
        return cases[0]
    for c in cases:
        if c.name == name:
            return c
    raise CaseError(f"{path}: no case named {name!r} (cases: {', '.join(c.name for c in cases)})")
