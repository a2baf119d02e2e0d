"""Where a validated kernel runs: a pluggable backend, chosen by one option and recorded per attempt.

    backend = get_backend("auto" | "interp" | "model")
    result = backend.run(ptx, entry, grid, block, dynamic_shared_bytes, args, step_budget)

* `interp`: the reference SIMT interpreter (gpu_layers.interp, through its public run_case API).
  It is the definition of the machine, so a run that completes is exact by definition.
* `model`: the compiled machine core inside the model (gpu_layers.machine.backend: its compiled
  layers, run by the fast executor, generate the whole trace and the dump; the outputs are decoded
  from the generated tokens and compared with the interpreter's). Compiled on first use (two to
  three minutes, 8.3 GB) and cached; about 1,000 tokens/s on a 2-core CPU; kernels outside the
  core's scope (blocks of more than four warps, ...) raise a QwenGPUError naming why.
* `auto`: the interpreter (the model backend runs only when asked for: it is slow and compiles
  on first use).

`args` are the launch's arguments in parameter order: numpy arrays (global buffers, in the
interpreter's storage dtypes) or (type, value) scalar pairs ("i32", "u32", "i64", "u64", "f32").
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from gpu_layers.errors import QwenGPUError

BACKENDS = ("auto", "interp", "model")


class BackendUnavailable(QwenGPUError):
    """The requested backend cannot run on this installation (yet)."""


@dataclass
class RunOutput:
    buffers: list            # per argument: numpy array after the launch (None for scalars)
    steps: int               # trace length: warp-instruction steps
    lane_issues: int
    fingerprint: str         # sha256 of the step trace
    seconds: float
    tokens: int | None = None         # machine tokens generated (model backend only)
    exact: bool | None = None         # trace/outputs equal the interpreter's prediction

    @property
    def tokens_per_s(self) -> float | None:
        if self.tokens is None or self.seconds <= 0:
            return None
        return self.tokens / self.seconds


class Backend:
    name = "?"

    def run(self, ptx: str, entry: str, grid, block, dynamic_shared_bytes: int, args: list,
            step_budget: int) -> RunOutput:
        raise NotImplementedError


def _case(ptx, entry, grid, block, dynamic_shared_bytes, args):
    """The launch as a gpu_layers Case (every buffer an output, named arg{i})."""
    from gpu_layers.cases import Case, CaseArg

    cargs = []
    for i, a in enumerate(args):
        if isinstance(a, tuple):
            t, v = a
            cargs.append(CaseArg(f"arg{i}", t, value=v))
        else:
            cargs.append(CaseArg(f"arg{i}", {"int32": "i32", "uint32": "u32", "int64": "i64", "uint64": "u64",
                                              "float32": "f32"}[str(a.dtype)] + "*", data=a, output=True))
    return Case(name=f"agent:{entry}", kernel=entry, grid=tuple(grid), block=tuple(block), args=cargs,
                dynamic_shared_bytes=dynamic_shared_bytes, ptx_text=ptx)


class InterpreterBackend(Backend):
    """The reference interpreter (4 machine lanes)."""
    name = "interp"

    def __init__(self, lanes: int = 4):
        self.lanes = lanes

    def run(self, ptx, entry, grid, block, dynamic_shared_bytes, args, step_budget):
        from gpu_layers.interp import run_case

        case = _case(ptx, entry, grid, block, dynamic_shared_bytes, args)
        t0 = time.perf_counter()
        res = run_case(case, lanes=self.lanes, step_budget=step_budget)
        dt = time.perf_counter() - t0
        buffers = [res.buffers.get(f"arg{i}") if not isinstance(a, tuple) else None for i, a in enumerate(args)]
        return RunOutput(buffers=buffers, steps=res.steps, lane_issues=res.lane_issues, fingerprint=res.fingerprint,
                         seconds=dt, tokens=None, exact=True)


class ModelBackend(Backend):
    """The compiled machine core inside the model: the interpreter runs the reference first (its
    steps, trace fingerprint and any fault or budget error are the reference's), then the model
    generates the launch; `buffers` are decoded from its tokens, `exact` says whether they equal
    the reference's bit for bit."""
    name = "model"

    def __init__(self, max_tokens: int = 5_000_000):
        self.max_tokens = max_tokens

    @staticmethod
    def available() -> bool:
        return True

    def run(self, ptx, entry, grid, block, dynamic_shared_bytes, args, step_budget):
        from gpu_layers.machine.backend import run_case_model

        ref = InterpreterBackend().run(ptx, entry, grid, block, dynamic_shared_bytes, args, step_budget)
        case = _case(ptx, entry, grid, block, dynamic_shared_bytes, args)
        t0 = time.perf_counter()
        dec, got = run_case_model(case, max_tokens=self.max_tokens)
        dt = time.perf_counter() - t0
        buffers = [dec.get(f"arg{i}") if not isinstance(a, tuple) else None for i, a in enumerate(args)]
        exact = all(r is None or (b is not None and r.tobytes() == b.tobytes())
                    for r, b in zip(ref.buffers, buffers))
        return RunOutput(buffers=buffers, steps=ref.steps, lane_issues=ref.lane_issues,
                         fingerprint=ref.fingerprint, seconds=dt, tokens=len(got), exact=exact)


def get_backend(name: str = "auto") -> Backend:
    if name not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    if name == "model":
        return ModelBackend()
    return InterpreterBackend()
