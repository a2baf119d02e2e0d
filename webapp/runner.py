"""Run one kernel for the app: CUDA source + launch form -> compile -> validate -> run -> compare.

    inp = KernelInput(source, grid="2,1,1", block="16,1,1", dynamic_shared_bytes=0, args_text=...)
    prep = prepare(inp, limits, progress)        # nvcc (sandboxed), PTX parse, validator, the case
    report = run_prepared(prep, limits, progress, cancel)

The interpreter backend runs the kernel twice:

  * the **reference interpreter** on nvcc's PTX: the definition of the machine (its outputs are
    the ones every other execution is compared with);
  * the **machine-code oracle** when the kernel lowers (gpu_layers.machine.lower): the lowered
    program on the interpreter, emitting the token stream the compiled model will emit
    (gpu_layers.machine.protocol); its outputs are decoded from the tokens alone.

The verdict compares the two bit for bit: "exact" or "differs". A kernel that does not lower yet
(f64 arithmetic, f32 atomics) runs on the reference alone ("reference only": nothing
to compare), and a lowered run that passes its step budget is "not compared". "Correct" is a separate fact:
for an unchanged suite example the reference interpreter's outputs are also checked against the
suite's independent numpy reference.

Every error a user can cause is a QwenGPUError (compile errors with nvcc's line numbers, the
unsupported instruction by name, launch errors, faults, step and time budgets); `explain` turns
one into a title and lines for the page.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from gpu_layers.errors import (
    CaseError, CompileError, ExecutionError, LaunchError, OutOfBounds, PTXSyntaxError, QwenGPUError,
    StepBudgetExceeded, UninitializedRead, UnsupportedPTX,
)
from gpu_layers.inspect import Cancelled, TimeBudgetExceeded
from webapp.argspec import parse_args, same_values
from webapp.limits import Limits


class InputError(QwenGPUError):
    """The form itself is not acceptable (size limits, launch dimensions)."""


@dataclass
class KernelInput:
    source: str
    grid: str = "1, 1, 1"
    block: str = "32, 1, 1"
    dynamic_shared_bytes: object = 0
    args_text: str = ""
    example: str | None = None          # the suite example the form was loaded from


@dataclass
class Progress:
    """Written by the worker, read by the page's poller (plain attributes; the GIL suffices)."""
    phase: str = "waiting"
    steps: int = 0                      # reference interpreter steps so far
    started: float = field(default_factory=time.monotonic)
    phase_started: float = field(default_factory=time.monotonic)
    tokens: int | None = None
    machine_steps: int | None = None
    machine_seconds: float | None = None

    def enter(self, phase: str):
        self.phase = phase
        self.phase_started = time.monotonic()


@dataclass
class Prepared:
    case: object                        # gpu_layers.cases.Case with the PTX inline
    kernel: object                      # the kernel's IR
    ptx: str
    lowered: object | None              # machine code, or None
    lower_problems: list
    compile_seconds: float
    example: str | None                 # set when the source is an unchanged suite example
    entry_note: str = ""


@dataclass
class OutputBuffer:
    name: str
    index: int                          # argument index
    reference: np.ndarray
    machine: np.ndarray | None          # decoded from the token stream (None: not run)
    expected: np.ndarray | None = None  # the suite's numpy reference (unchanged examples)

    @property
    def exact(self) -> bool | None:
        return None if self.machine is None else same_values(self.machine, self.reference)


@dataclass
class RunReport:
    kernel: str
    grid: tuple
    block: tuple
    nthreads: int
    outputs: list                       # [OutputBuffer]
    steps: int
    lane_issues: int
    ref_seconds: float
    compile_seconds: float
    lowered: bool
    lower_problems: list
    machine_steps: int | None = None
    machine_issues: int | None = None
    tokens: int | None = None
    dump_tokens: int | None = None
    machine_seconds: float | None = None
    machine_error: str | None = None
    verdict: str = "reference-only"     # exact | differs | reference-only | not-compared
    backend: str = "interp"             # the second execution: "interp" (oracle) or "model"
    prompt_tokens: int | None = None    # model: tokens of the prompt (program, launch, memory)
    correct: bool | None = None
    correct_note: str = ""
    entry_note: str = ""

    @property
    def tokens_per_s(self) -> float | None:
        if self.tokens is None or not self.machine_seconds:
            return None
        return self.tokens / self.machine_seconds


# ----------------------------------------------------------------------------------- preparing


def parse_dims(text, what: str) -> tuple:
    if isinstance(text, (int, float)):
        text = str(int(text))
    parts = [p for p in re.split(r"[,x×\s]+", str(text).strip()) if p]
    if not 1 <= len(parts) <= 3 or not all(re.fullmatch(r"\d+", p) for p in parts):
        raise InputError(f"{what} must be 1 to 3 positive integers like '2, 1, 1', got {str(text)[:40]!r}")
    dims = [int(p) for p in parts] + [1] * (3 - len(parts))
    if any(d < 1 for d in dims):
        raise InputError(f"{what} dimensions must be at least 1, got {dims}")
    return tuple(dims)


def _entry(module, wanted: str | None):
    entries = [k.name for k in module.kernels.values() if k.is_entry]
    if not entries:
        raise InputError("the source defines no __global__ kernel")
    if wanted in entries:
        return wanted, ""
    if len(entries) == 1:
        return entries[0], ""
    return entries[0], f"the source defines {len(entries)} kernels; running the first, {entries[0]}"


def prepare(inp: KernelInput, limits: Limits, progress: Progress | None = None) -> Prepared:
    from gpu_layers.cases import compile_cached, parse_case
    from gpu_layers.machine import lower
    from gpu_layers.ptx import parse_ptx, validate
    from webapp.examples import get as get_example

    progress = progress or Progress()
    src = inp.source or ""
    nbytes = len(src.encode("utf-8"))
    if not src.strip():
        raise InputError("the CUDA source is empty")
    if nbytes > limits.max_source_bytes:
        raise InputError(f"the CUDA source has {nbytes} bytes; at most {limits.max_source_bytes}")
    grid = parse_dims(inp.grid, "grid")
    block = parse_dims(inp.block, "block")
    nthreads = int(np.prod(grid)) * int(np.prod(block))
    if nthreads > limits.max_threads:
        raise InputError(f"the launch has {nthreads} threads; at most {limits.max_threads} here")
    try:
        dsm = int(float(inp.dynamic_shared_bytes or 0))
    except (TypeError, ValueError):
        raise InputError(f"dynamic shared memory must be a number of bytes, got {inp.dynamic_shared_bytes!r}") from None
    raw_args = parse_args(inp.args_text or "", max_elements=limits.max_buffer_elements,
                          max_chars=limits.max_args_chars)
    progress.enter("compiling")
    t0 = time.perf_counter()
    ptx = compile_cached(src)
    compile_s = time.perf_counter() - t0
    progress.enter("validating")
    module = parse_ptx(ptx)
    ex = get_example(inp.example) if inp.example else None
    name, note = _entry(module, ex.kernel if ex else None)
    validate(module, name)
    kernel = module.kernel(name)
    obj = {"name": inp.example or "kernel", "kernel": name, "ptx": ptx, "grid": list(grid), "block": list(block),
           "dynamic_shared_bytes": dsm, "args": raw_args}
    case = parse_case(obj)
    if len(case.args) != len(kernel.params):
        want = ", ".join(f"{p.name} (.{p.type})" for p in kernel.params)
        raise InputError(f"kernel {name} takes {len(kernel.params)} argument(s) ({want}); the form has "
                         f"{len(case.args)}: write one line per parameter, in order")
    lowered, problems = None, []
    try:
        lowered = lower(kernel)
    except UnsupportedPTX as e:
        problems = list(e.problems)
    unchanged = ex is not None and _normal(src) == _normal(ex.source)
    return Prepared(case=case, kernel=kernel, ptx=ptx, lowered=lowered, lower_problems=problems,
                    compile_seconds=compile_s, example=inp.example if unchanged else None, entry_note=note)


def _normal(src: str) -> str:
    """Source text up to line endings and trailing blanks (the editor may change those)."""
    return "\n".join(line.rstrip() for line in src.replace("\r\n", "\n").strip().split("\n"))


# ----------------------------------------------------------------------------------- running


class Watch:
    """A launch observer: counts steps into `progress`, enforces the deadline and cancellation."""

    def __init__(self, progress: Progress, deadline: float, cancel):
        self.progress, self.deadline, self.cancel = progress, deadline, cancel
        self.steps = 0

    def __call__(self, W, ins, pc, active, done):
        self.steps += 1
        if self.steps & 255 == 0:
            self.progress.steps = self.steps
            if time.monotonic() > self.deadline:
                raise TimeBudgetExceeded(f"the run passed its time budget after {self.steps} steps")
            if self.cancel():
                raise Cancelled("the page went away")


def launch_args(case):
    from gpu_layers.interp import launch_args as args_of

    return args_of(case)


def run_prepared(prep: Prepared, limits: Limits, progress: Progress | None = None, cancel=None,
                 backend: str = "interp") -> RunReport:
    """The reference run, then the second execution: the machine-code oracle (backend "interp")
    or the compiled machine core generating the trace itself (backend "model")."""
    from gpu_layers.interp import launch
    from gpu_layers.machine.protocol import decode_outputs, trace_tokens

    progress = progress or Progress()
    cancel = cancel or (lambda: False)
    case = prep.case
    deadline = time.monotonic() + limits.time_budget_s
    out_idx = [i for i, a in enumerate(case.args) if a.is_buffer and a.output] or \
        [i for i, a in enumerate(case.args) if a.is_buffer]
    progress.enter("reference")
    watch = Watch(progress, deadline, cancel)
    t0 = time.perf_counter()
    res = launch(prep.kernel, case.grid, case.block, launch_args(case), case.dynamic_shared_bytes, lanes=4,
                 step_budget=limits.step_budget, observer=watch)
    ref_s = time.perf_counter() - t0
    progress.steps = res.steps
    outputs = [OutputBuffer(case.args[i].name, i, res.buffers[i], None) for i in out_idx]
    rep = RunReport(kernel=prep.kernel.name, grid=case.grid, block=case.block,
                    nthreads=int(np.prod(case.grid)) * int(np.prod(case.block)), outputs=outputs,
                    steps=res.steps, lane_issues=res.lane_issues, ref_seconds=ref_s,
                    compile_seconds=prep.compile_seconds, lowered=prep.lowered is not None,
                    lower_problems=prep.lower_problems, entry_note=prep.entry_note)
    if backend == "model":
        _run_model(prep, rep, outputs, out_idx, limits, progress, cancel)
    elif prep.lowered is not None:
        progress.enter("machine")
        t0 = time.perf_counter()
        like = launch_args(case)
        try:
            tr = trace_tokens(prep.lowered, case.grid, case.block, like, case.dynamic_shared_bytes, lanes=4,
                              outputs=out_idx, step_budget=limits.machine_step_budget)
        except StepBudgetExceeded:
            rep.verdict = "not-compared"
            rep.machine_error = (f"the machine-code run passed its budget of {limits.machine_step_budget:,} machine "
                                 f"steps (lowered code expands multiplies and divides into 32-step loops), so "
                                 f"its outputs were not compared")
        else:
            rep.machine_seconds = time.perf_counter() - t0
            decoded = decode_outputs(tr.tokens, like)
            for o in outputs:
                o.machine = decoded.get(o.index)
            rep.machine_steps, rep.machine_issues = tr.steps, tr.issues
            rep.tokens = len(tr.tokens)
            rep.dump_tokens = sum(1 for t in tr.tokens if t[0] in ("dump", "x"))
            progress.tokens, progress.machine_steps = rep.tokens, tr.steps
            progress.machine_seconds = rep.machine_seconds
            rep.verdict = "exact" if all(o.exact for o in outputs) else "differs"
            del tr
    _check_example(prep, rep)
    progress.enter("done")
    return rep


def _run_model(prep: Prepared, rep: RunReport, outputs, out_idx, limits: Limits, progress: Progress, cancel):
    """The launch inside the model: the machine core's compiled layers (the fast executor) generate
    the trace and the dump from the prompt; the outputs are decoded from the generated tokens."""
    from gpu_layers.machine.backend import model_prompt, run_kernel_model, shared_core

    case = prep.case
    args = launch_args(case)
    rep.backend = "model"
    try:                                   # refusals first: they need no compiled core
        prompt = model_prompt(prep.kernel, case.grid, case.block, args, out_idx, case.dynamic_shared_bytes)
    except QwenGPUError as e:
        rep.machine_error = f"the machine core does not run this kernel: {e}"
        return
    progress.enter("loading")
    core = shared_core()                   # compiled on first use (minutes), then cached on disk
    progress.enter("model")
    deadline = time.monotonic() + limits.model_time_budget_s
    t0 = time.perf_counter()

    def tick(n):
        progress.tokens, progress.machine_seconds = n, time.perf_counter() - t0
        if cancel():
            raise Cancelled("the run was cancelled")
        if time.monotonic() > deadline:
            raise TimeBudgetExceeded(f"{n:,} tokens in {limits.model_time_budget_s:.0f} s")

    try:
        dec, got, dt = run_kernel_model(prep.kernel, case.grid, case.block, args, out_idx,
                                        case.dynamic_shared_bytes, max_tokens=limits.model_max_tokens,
                                        core=core, prompt=prompt, on_tokens=tick)
    except TimeBudgetExceeded as e:
        rep.verdict = "not-compared"
        rep.machine_error = (f"the model's run passed its time budget ({e}; about 1,000 tokens/s on this "
                             "CPU), so its outputs were not compared")
        return
    except ExecutionError as e:            # a fault, a failed check, the step budget
        rep.verdict = "not-compared"
        rep.machine_error = str(e)
        return
    rep.tokens, rep.machine_seconds, rep.prompt_tokens = len(got), dt, len(prompt[0])
    rep.dump_tokens = sum(1 for t in got if t.startswith(("<xa ", "<xc ")))
    progress.tokens, progress.machine_seconds = len(got), dt
    for o in outputs:
        o.machine = dec.get(o.index)
    rep.verdict = "exact" if all(o.exact for o in outputs) else "differs"


def _check_example(prep: Prepared, rep: RunReport):
    """For an unchanged suite example: the reference outputs against the suite's numpy reference."""
    if prep.example is None:
        rep.correct_note = "no independent reference for an edited or new kernel"
        return
    from gpu_layers.suite.reference import REFERENCES

    fn = REFERENCES.get(prep.example)
    if fn is None:
        rep.correct_note = "this example has no numpy reference"
        return
    try:
        want = fn(prep.case)
    except Exception as e:   # the reference may not understand edited inputs
        rep.correct_note = f"the numpy reference could not check these inputs ({type(e).__name__})"
        return
    ok = True
    for o in rep.outputs:
        w = want.get(o.name)
        if w is None:
            continue
        o.expected = np.asarray(w, dtype=o.reference.dtype)
        ok = ok and same_values(o.reference, o.expected)
    rep.correct = ok
    rep.correct_note = ("matches the suite's independent numpy reference, bit for bit" if ok else
                        "differs from the suite's independent numpy reference")


# ----------------------------------------------------------------------------------- errors


def explain(e: BaseException, source: str | None = None) -> tuple[str, list]:
    """(title, lines) for the page; never a stack trace."""
    if isinstance(e, CompileError):
        lines = list(e.messages) or [e.summary]
        if source:
            src_lines = source.splitlines()
            for m in e.messages:
                hit = re.match(r"kernel\.cu\((\d+)\): error", m)
                if hit and 1 <= int(hit.group(1)) <= len(src_lines):
                    n = int(hit.group(1))
                    lines.append(f"line {n} of your source: {src_lines[n - 1].strip()}")
                    break
        return f"Compile error: {e.summary}", lines
    if isinstance(e, UnsupportedPTX):
        return (f"Unsupported: the machine does not run {len(e.problems)} construct(s) of this PTX "
                f"(lines of nvcc's PTX)", list(e.problems))
    if isinstance(e, PTXSyntaxError):
        return "The PTX front end cannot read nvcc's output", [str(e)]
    if isinstance(e, (InputError, CaseError)):
        return "The launch form has a problem", [str(e)]
    if isinstance(e, LaunchError):
        return "The launch is not valid", [str(e)]
    if isinstance(e, OutOfBounds):
        return "Out-of-range memory access", [str(e)]
    if isinstance(e, UninitializedRead):
        return "Use of an undefined value", [str(e)]
    if isinstance(e, StepBudgetExceeded):
        return "Step budget exceeded", [str(e)]
    if isinstance(e, TimeBudgetExceeded):
        return "Time budget exceeded", [str(e)]
    if isinstance(e, Cancelled):
        return "Stopped", [str(e)]
    if isinstance(e, ExecutionError):
        return "The kernel failed while running", [str(e)]
    if isinstance(e, QwenGPUError):
        return "Error", [str(e)]
    return "Internal error (a bug of qwenGPU, not of your kernel)", [f"{type(e).__name__}: {e}"]


# ----------------------------------------------------------------------------------- threading


class Job:
    """fn(*args) in a daemon thread; `result`, `error` when `done`."""

    def __init__(self, fn, *args):
        self.result = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self.thread.start()

    def _run(self, fn, args):
        try:
            self.result = fn(*args)
        except BaseException as e:     # handed to the page, rendered by explain()
            self.error = e
        finally:
            self.done.set()
