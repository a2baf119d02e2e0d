"""What a task is: a statement, a fixed kernel signature, launches with inputs, and a checker.

A task fixes the kernel the model must write (its name and C parameter list), so a launch is well
defined. Each task has several input sets (edge cases included): the arguments of one launch and
its grid. The checker is plain numpy: `expected(inputs)` computes what every output buffer must
hold after the launch from the inputs alone (independent of the interpreter), and `compare` says
how exactly (bits, or a float tolerance for kernels whose natural solutions may round in another
order). A task whose answer is not unique supplies `check` instead, a property test.

Buffers are logical arrays (`uint8` text, `float64` doubles, ...). The interpreter's buffers are
int32/uint32/int64/uint64/float32 arrays, so bytes travel packed into uint32 words (little
endian, zero padded) and doubles as their uint64 bit patterns; `to_storage` / `from_storage`
convert. Output buffers start filled with a sentinel, and are usually longer than the part the
task defines, so a kernel that forgets a bounds check or writes nothing is caught.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

CUDA_DIR = Path(__file__).resolve().parent / "cuda"

# C element type -> (short name, logical numpy dtype, interpreter scalar type or None)
CTYPES = {
    "int": ("i32", np.int32, "i32"),
    "unsigned int": ("u32", np.uint32, "u32"),
    "long long": ("i64", np.int64, "i64"),
    "unsigned long long": ("u64", np.uint64, "u64"),
    "float": ("f32", np.float32, "f32"),
    "double": ("f64", np.float64, None),          # buffers only (no double scalars in launches)
    "unsigned char": ("u8", np.uint8, None),       # buffers only
}

# What an output buffer holds before the launch (recognisable, and wrong for every task).
SENTINELS = {
    "i32": -123456789, "u32": 0xDEADBEEF, "i64": -1234567890123, "u64": 0xFEEDFACECAFEBEEF,
    "f32": -1.5e30, "f64": -1.5e300, "u8": 0xAB,
}

MAX_BUFFER_ELEMENTS = 4096


@dataclass(frozen=True)
class Param:
    """One kernel parameter. kind: "in" (const T*), "out" / "inout" (T*), "scalar" (T)."""
    name: str
    ctype: str
    kind: str

    def __post_init__(self):
        if self.ctype not in CTYPES:
            raise ValueError(f"unknown C type {self.ctype!r}")
        if self.kind not in ("in", "out", "inout", "scalar"):
            raise ValueError(f"unknown parameter kind {self.kind!r}")
        if self.kind == "scalar" and CTYPES[self.ctype][2] is None:
            raise ValueError(f"{self.ctype} scalars cannot be launch arguments")

    @property
    def is_buffer(self) -> bool:
        return self.kind != "scalar"

    @property
    def short(self) -> str:
        return CTYPES[self.ctype][0]

    @property
    def dtype(self):
        return CTYPES[self.ctype][1]

    def c_decl(self) -> str:
        if self.kind == "scalar":
            return f"{self.ctype} {self.name}"
        const = "const " if self.kind == "in" else ""
        return f"{const}{self.ctype}* {self.name}"


@dataclass
class InputSet:
    """The arguments of one launch (logical arrays and Python scalars) and its grid."""
    name: str
    values: dict
    grid: tuple
    block: tuple
    dynamic_shared_bytes: int = 0

    def describe(self, task: "Task", limit: int = 12) -> str:
        """A short human/model readable description of the inputs (for feedback)."""
        parts = []
        for p in task.params:
            v = self.values[p.name]
            if p.kind == "scalar":
                parts.append(f"{p.name} = {v}")
            elif p.kind in ("in", "inout"):
                parts.append(f"{p.name} = {_show(v, p, limit)}")
        return ", ".join(parts)


def _show(arr, p: Param, limit: int) -> str:
    if p.short == "u8":
        b = bytes(np.asarray(arr, dtype=np.uint8).tolist())
        s = repr(b[:48])
        return s + (f"... ({len(b)} bytes)" if len(b) > 48 else "")
    vals = np.asarray(arr).tolist()
    body = ", ".join(_fmt(x) for x in vals[:limit])
    return f"[{body}{', ...' if len(vals) > limit else ''}] ({len(vals)} element{'s' if len(vals) != 1 else ''})"


def _fmt(x) -> str:
    if isinstance(x, float):
        return repr(float(np.float32(x))) if abs(x) < 3.5e38 else repr(x)
    return str(x)


@dataclass(frozen=True)
class Exact:
    """Every element bit for bit (floats: -0.0 and 0.0 differ; NaNs compare by being NaN)."""
    def __call__(self, got, want):
        got, want = np.asarray(got), np.asarray(want)
        if got.dtype.kind == "f":
            same = (got == want) & (np.signbit(got) == np.signbit(want))
            same |= np.isnan(got) & np.isnan(want)
            return ~same
        return got != want


@dataclass(frozen=True)
class Close:
    """|got - want| <= atol + rtol * |want| (NaN/inf must match exactly)."""
    rtol: float = 1e-5
    atol: float = 0.0

    def __call__(self, got, want):
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        finite = np.isfinite(want)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(got - want)
            bad = ~(err <= self.atol + self.rtol * np.abs(want))
        bad = np.where(finite, bad, ~((got == want) | (np.isnan(got) & np.isnan(want))))
        return bad


@dataclass
class Mismatch:
    input_set: str
    buffer: str
    index: int
    expected: object
    got: object
    count: int          # differing elements in this buffer
    total: int          # elements compared

    def as_dict(self) -> dict:
        return {"input_set": self.input_set, "buffer": self.buffer, "index": self.index,
                "expected": _jsonable(self.expected), "got": _jsonable(self.got),
                "count": self.count, "total": self.total}

    def sentence(self) -> str:
        return (f"{self.buffer}[{self.index}] = {_fmt(_jsonable(self.got))}, expected "
                f"{_fmt(_jsonable(self.expected))} ({self.count} of {self.total} elements of "
                f"{self.buffer} differ)")


def _jsonable(x):
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    return x


@dataclass
class Task:
    name: str
    title: str
    statement: str
    kernel: str
    params: tuple
    launch: str                                   # how it is launched, in words (the prompt says it)
    make_inputs: Callable[[], list]               # -> [InputSet], deterministic
    reference: str                                # file under agent/tasks/cuda/
    wrong: tuple                                  # (old, new, what is wrong): a subtle bug in the reference
    kinds: tuple = ()
    level: int = 1                                # 1 trivial, 2 medium, 3 hard for a 2B model
    expected: Callable | None = None              # InputSet -> {out name: logical array}
    compare: dict = field(default_factory=dict)   # out name -> Exact() / Close(...)
    check: Callable | None = None                 # (InputSet, outputs) -> [Mismatch]  (property checker)
    step_budget: int = 1_000_000
    _inputs: list | None = field(default=None, repr=False)

    def __post_init__(self):
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"task {self.name}: duplicate parameter names")
        if (self.expected is None) == (self.check is None):
            raise ValueError(f"task {self.name}: give exactly one of expected= or check=")
        if not any(p.kind in ("out", "inout") for p in self.params):
            raise ValueError(f"task {self.name}: no output buffer")

    # ------------------------------------------------------------------ derived
    def signature(self) -> str:
        return f'extern "C" __global__ void {self.kernel}({", ".join(p.c_decl() for p in self.params)})'

    @property
    def outputs(self) -> list:
        return [p for p in self.params if p.kind in ("out", "inout")]

    def inputs(self) -> list:
        if self._inputs is None:
            sets = self.make_inputs()
            for s in sets:
                self._check_input_set(s)
            self._inputs = sets
        return self._inputs

    def reference_source(self) -> str:
        return (CUDA_DIR / self.reference).read_text(encoding="utf-8")

    def wrong_source(self) -> str:
        old, new, _ = self.wrong
        src = self.reference_source()
        if src.count(old) != 1:
            raise ValueError(f"task {self.name}: the wrong-kernel mutation {old!r} must occur exactly once "
                             f"in {self.reference} (found {src.count(old)})")
        return src.replace(old, new)

    def fingerprint(self) -> str:
        """sha256 of what defines the task (statement, signature, launch, inputs): recorded per attempt."""
        h = hashlib.sha256()
        h.update(json.dumps([self.name, self.statement, self.signature(), self.launch]).encode())
        for s in self.inputs():
            h.update(json.dumps([s.name, list(s.grid), list(s.block), s.dynamic_shared_bytes]).encode())
            for p in self.params:
                v = s.values[p.name]
                h.update(np.asarray(v).tobytes() if p.is_buffer else repr(v).encode())
        return h.hexdigest()

    # ------------------------------------------------------------------ checking
    def check_outputs(self, s: InputSet, outputs: dict) -> list:
        """Mismatches of one launch's outputs (logical arrays), first differing element per buffer."""
        if self.check is not None:
            return list(self.check(s, outputs))
        want = self.expected(s)
        out = []
        for p in self.outputs:
            got = np.asarray(outputs[p.name])
            exp = np.asarray(want[p.name], dtype=p.dtype)
            if got.shape != exp.shape:
                out.append(Mismatch(s.name, p.name, -1, f"{exp.shape[0]} elements", f"{got.shape[0]} elements",
                                    1, 1))
                continue
            bad = np.nonzero(self.compare.get(p.name, Exact())(got, exp))[0]
            if len(bad):
                i = int(bad[0])
                out.append(Mismatch(s.name, p.name, i, exp[i], got[i], int(len(bad)), int(len(exp))))
        return out

    def _check_input_set(self, s: InputSet):
        where = f"task {self.name}, input set {s.name!r}"
        if set(s.values) != {p.name for p in self.params}:
            raise ValueError(f"{where}: values for {sorted(s.values)}, parameters {[p.name for p in self.params]}")
        for p in self.params:
            v = s.values[p.name]
            if p.is_buffer:
                a = np.asarray(v)
                if a.dtype != p.dtype or a.ndim != 1 or not 1 <= len(a) <= MAX_BUFFER_ELEMENTS:
                    raise ValueError(f"{where}: {p.name} must be a 1-D {np.dtype(p.dtype)} array of 1.."
                                     f"{MAX_BUFFER_ELEMENTS} elements, got {a.dtype}{a.shape}")
        if len(s.grid) != 3 or len(s.block) != 3:
            raise ValueError(f"{where}: grid and block must be 3-tuples")


# ---------------------------------------------------------------------- storage conversion
def to_storage(p: Param, value):
    """A logical buffer -> the interpreter's array (bytes packed in uint32, doubles as uint64 bits)."""
    a = np.ascontiguousarray(np.asarray(value, dtype=p.dtype))
    if p.short == "u8":
        pad = (-len(a)) % 4
        return np.frombuffer(a.tobytes() + b"\0" * pad, dtype="<u4").astype(np.uint32)
    if p.short == "f64":
        return a.view(np.uint64).copy()
    return a.copy()


def from_storage(p: Param, stored, length: int):
    """The interpreter's array -> the logical buffer of `length` elements."""
    s = np.ascontiguousarray(stored)
    if p.short == "u8":
        return np.frombuffer(s.astype("<u4").tobytes(), dtype=np.uint8)[:length].copy()
    if p.short == "f64":
        return s.astype(np.uint64).view(np.float64)[:length].copy()
    return s[:length].astype(p.dtype).copy()


# ---------------------------------------------------------------------- helpers for task files
def grid_for(n: int, block: int) -> tuple:
    return (max(1, -(-n // block)), 1, 1)


def filled(p_short: str, n: int, value=None):
    """An output buffer of n elements holding the sentinel (or `value`)."""
    dt = {v[0]: v[1] for v in CTYPES.values()}[p_short]
    return np.full(n, SENTINELS[p_short] if value is None else value, dtype=dt)


def text_bytes(s) -> np.ndarray:
    if isinstance(s, str):
        s = s.encode("latin-1")
    return np.frombuffer(bytes(s), dtype=np.uint8).copy()
