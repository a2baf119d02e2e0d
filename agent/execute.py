"""One kernel source through the pipeline: nvcc -> PTX validator -> signature -> run -> checker.

`evaluate(code, task, backend)` never raises on bad code: every way a kernel can fail becomes an
`Evaluation` with a verdict, a one-line reason and the details the model gets as feedback:

    verdict            stage      meaning
    no_code            extract    nothing that looks like a kernel in the reply
    compile_error      compile    nvcc (sandboxed, gpu_layers.nvcc) refused it
    unsupported        validate   the PTX validator names constructs the machine does not run
    signature_mismatch signature  no entry with the task's name, or other parameters
    runtime_error      run        a fault on some input set: out of bounds, undefined value, step budget
    wrong              check      it ran, exactly, but some output differs from the checker's
    correct            check      every input set passes the checker
    unchecked          validate   an ad-hoc task (no inputs, no checker): compiled and validated only
    internal_error     any        a bug of qwenGPU itself (recorded as such, never blamed on the model)

"Executed exactly" and "correct" are separate facts: on the interpreter backend every completed
run is exact by definition, and an exact run of a wrong program is still wrong.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from gpu_layers.errors import (
    CaseError, CompileError, ExecutionError, LaunchError, PTXSyntaxError, QwenGPUError, UnsupportedPTX,
)

ARCH = "sm_75"
MAX_DETAIL_LINES = 12
MAX_OUTPUT_VALUES = 32          # per output buffer, in the record
MAX_REASON_CHARS = 400
# Local arrays live in the interpreter's memory once per thread: bound them (CUDA allows 512 KiB per
# thread; a model-written `int a[1 << 24];` would otherwise allocate gigabytes before the first step).
MAX_LOCAL_BYTES_PER_THREAD = 64 * 1024

VERDICTS = ("correct", "wrong", "no_code", "compile_error", "unsupported", "signature_mismatch", "runtime_error",
            "unchecked", "internal_error")


@dataclass
class Evaluation:
    verdict: str
    stage: str
    reason: str
    details: list = field(default_factory=list)   # lines for the model's feedback
    code: str | None = None
    ptx_sha256: str | None = None
    compile_ok: bool | None = None
    compile_messages: list = field(default_factory=list)
    validate_ok: bool | None = None
    validate_problems: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    entry: str | None = None
    run_sets: list = field(default_factory=list)   # per input set: name, steps, lane_issues, fingerprint, seconds, ...
    run_error: str | None = None
    executed: bool | None = None
    executed_exactly: bool | None = None
    correct: bool | None = None
    first_mismatch: dict | None = None
    inputs_passed: int = 0
    inputs_total: int = 0
    seconds: dict = field(default_factory=dict)    # compile, validate, run, check

    @property
    def run_steps(self) -> int | None:
        return sum(s["steps"] for s in self.run_sets) if self.run_sets else None

    @property
    def run_seconds(self) -> float | None:
        return sum(s["seconds"] for s in self.run_sets) if self.run_sets else None

    @property
    def run_tokens(self) -> int | None:
        toks = [s.get("tokens") for s in self.run_sets]
        return sum(toks) if toks and all(t is not None for t in toks) else None


def _short(s: str, n: int = MAX_REASON_CHARS) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def find_entry(module, kernel: str) -> str | None:
    """The .entry named `kernel`, or the one C++ mangled name of it (_Z<len><kernel>...)."""
    entries = [k for k in module.kernels.values() if k.is_entry]
    for k in entries:
        if k.name == kernel:
            return k.name
    mangled = [k.name for k in entries if k.name.startswith(f"_Z{len(kernel)}{kernel}")]
    return mangled[0] if len(mangled) == 1 else None


def _ptx_param_ok(p, want) -> bool:
    size = p.size
    if want.is_buffer:
        return size == 8
    if want.short == "f32":
        return p.type in ("f32", "b32")
    if want.short in ("i32", "u32"):
        return size == 4 and p.type != "f32"
    return size == 8


def signature_problems(kernel_ir, task) -> list:
    want = task.params
    have = kernel_ir.params
    if len(have) != len(want):
        return [f"the task's kernel takes {len(want)} parameters ({', '.join(p.c_decl() for p in want)}); "
                f"yours takes {len(have)}"]
    out = []
    for i, (p, w) in enumerate(zip(have, want)):
        if not _ptx_param_ok(p, w):
            out.append(f"parameter {i + 1} should be `{w.c_decl()}`, but yours is a .{p.type} "
                       f"({p.size} bytes) in the PTX")
    return out


def _storage_args(task, s):
    from agent.tasks.spec import CTYPES, to_storage

    args = []
    for p in task.params:
        v = s.values[p.name]
        if p.is_buffer:
            args.append(to_storage(p, v))
        else:
            args.append((CTYPES[p.ctype][2], float(v) if p.short == "f32" else int(v)))
    return args


def _bounded_outputs(task, outputs) -> dict:
    out = {}
    for p in task.outputs:
        a = np.asarray(outputs[p.name])
        vals = a[:MAX_OUTPUT_VALUES].tolist()
        vals = [repr(v) if isinstance(v, float) and not np.isfinite(v) else v for v in vals]
        out[p.name] = {"len": int(a.shape[0]), "head": vals}
    return out


def evaluate(code: str | None, task, backend, *, arch: str = ARCH, extract_note: str = "") -> Evaluation:
    """Run `code` through every stage for `task` (a Task, or None for an ad-hoc statement)."""
    try:
        return _evaluate(code, task, backend, arch, extract_note)
    except Exception as e:  # a bug of ours: record it honestly, never crash the loop
        tb = traceback.format_exc(limit=6)
        return Evaluation("internal_error", "internal", _short(f"qwenGPU internal error: {type(e).__name__}: {e}"),
                          details=tb.splitlines()[-MAX_DETAIL_LINES:], code=code)


def _evaluate(code, task, backend, arch, extract_note) -> Evaluation:
    from gpu_layers.cases import compile_cached
    from gpu_layers.ptx import fusion_warnings, parse_ptx, validate

    if not code:
        return Evaluation("no_code", "extract", extract_note or "no CUDA code found in the reply",
                          details=[extract_note] if extract_note else [])
    ev = Evaluation("?", "compile", "", code=code)
    # 1. nvcc, in its sandbox
    t0 = time.perf_counter()
    try:
        ptx = compile_cached(code, arch)
    except CompileError as e:
        ev.seconds["compile"] = time.perf_counter() - t0
        ev.compile_ok = False
        ev.compile_messages = e.messages[:200]
        errs = [m for m in e.messages if re.search(r"\berror\b", m)] or e.messages
        ev.verdict, ev.stage = "compile_error", "compile"
        ev.reason = _short(e.summary + (": " + errs[0] if errs else ""))
        ev.details = [e.summary] + errs[:MAX_DETAIL_LINES]
        return ev
    ev.seconds["compile"] = time.perf_counter() - t0
    ev.compile_ok = True
    ev.ptx_sha256 = hashlib.sha256(ptx.encode("utf-8")).hexdigest()
    # 2. the machine's validator
    t0 = time.perf_counter()
    ev.stage = "validate"
    try:
        module = parse_ptx(ptx)
    except PTXSyntaxError as e:
        ev.validate_ok = False
        ev.validate_problems = [str(e)]
        ev.verdict, ev.reason = "unsupported", _short(f"the PTX front end cannot read nvcc's output: {e}")
        ev.details = [str(e)]
        return ev
    want_name = task.kernel if task is not None else None
    if want_name is None:
        entries = [k.name for k in module.kernels.values() if k.is_entry]
        entry = entries[0] if len(entries) == 1 else None
        if entry is None:
            ev.verdict, ev.stage = "signature_mismatch", "signature"
            ev.reason = f"expected exactly one __global__ kernel, found {len(entries)}"
            ev.details = [ev.reason]
            return ev
    else:
        entry = find_entry(module, want_name)
        if entry is None:
            found = [k.name for k in module.kernels.values() if k.is_entry]
            ev.verdict, ev.stage = "signature_mismatch", "signature"
            ev.reason = _short(f"no kernel named {want_name!r} (found: {', '.join(found) or 'no __global__ kernel'})")
            ev.details = [ev.reason]
            return ev
    ev.entry = entry
    try:
        validate(module, entry)
    except UnsupportedPTX as e:
        ev.seconds["validate"] = time.perf_counter() - t0
        ev.validate_ok = False
        ev.validate_problems = e.problems[:200]
        ev.verdict = "unsupported"
        ev.reason = _short(f"{len(e.problems)} unsupported construct(s): {e.problems[0]}")
        ev.details = _unsupported_details(e.problems, ptx)
        return ev
    kir = module.kernel(entry)
    local = sum(v.size for v in kir.vars if v.space == "local")
    if local > MAX_LOCAL_BYTES_PER_THREAD:
        ev.seconds["validate"] = time.perf_counter() - t0
        ev.validate_ok = False
        msg = (f"the kernel uses {local} bytes of local memory per thread (arrays inside the kernel); the limit "
               f"is {MAX_LOCAL_BYTES_PER_THREAD} bytes")
        ev.validate_problems = [msg]
        ev.verdict, ev.reason, ev.details = "unsupported", msg, [msg]
        return ev
    ev.seconds["validate"] = time.perf_counter() - t0
    ev.validate_ok = True
    ev.warnings = fusion_warnings(kir)[:20]
    if task is None:
        ev.verdict, ev.stage = "unchecked", "validate"
        ev.reason = "compiled and validated; an ad-hoc task has no inputs or checker, so it was not run"
        return ev
    # 3. the fixed signature
    probs = signature_problems(kir, task)
    if probs:
        ev.verdict, ev.stage = "signature_mismatch", "signature"
        ev.reason = _short(probs[0])
        ev.details = probs
        return ev
    # 4. run every input set, 5. check
    from agent.tasks.spec import from_storage

    ev.stage = "run"
    sets = task.inputs()
    ev.inputs_total = len(sets)
    mismatches = []
    check_s = 0.0
    all_exact = True
    for s in sets:
        args = _storage_args(task, s)
        try:
            r = backend.run(ptx, entry, s.grid, s.block, s.dynamic_shared_bytes, args, task.step_budget)
        except (ExecutionError, LaunchError, CaseError) as e:
            ev.executed, ev.executed_exactly = False, False
            kind = _fault_kind(e)
            ev.run_error = _short(f"{kind}: {e}", 2000)
            ev.verdict = "runtime_error"
            ev.reason = _short(f"input set {s.name!r}: {kind}: {e}")
            msg = _param_names(str(e), entry, task)
            ev.details = [f"On the input set {s.name} ({s.describe(task)}), launched with grid {list(s.grid)} "
                          f"and block {list(s.block)}:", f"{kind}: {_short(msg, 1200)}"]
            ev.seconds["check"] = check_s
            return ev
        except QwenGPUError as e:
            ev.executed, ev.executed_exactly = False, False
            ev.run_error = _short(str(e), 2000)
            ev.verdict, ev.reason = "runtime_error", _short(f"input set {s.name!r}: {e}")
            ev.details = [ev.reason]
            return ev
        all_exact = all_exact and bool(r.exact)
        t0 = time.perf_counter()
        outputs = {p.name: from_storage(p, r.buffers[i], len(np.asarray(s.values[p.name])))
                   for i, p in enumerate(task.params) if p.kind in ("out", "inout")}
        mm = task.check_outputs(s, outputs)
        check_s += time.perf_counter() - t0
        ev.run_sets.append({"input_set": s.name, "steps": r.steps, "lane_issues": r.lane_issues,
                            "fingerprint": r.fingerprint, "seconds": round(r.seconds, 6), "tokens": r.tokens,
                            "exact": r.exact, "passed": not mm, "outputs": _bounded_outputs(task, outputs),
                            "mismatches": [m.as_dict() for m in mm[:4]]})
        if mm:
            mismatches.append((s, mm))
        else:
            ev.inputs_passed += 1
    ev.seconds["check"] = check_s
    ev.executed, ev.executed_exactly = True, all_exact
    ev.stage = "check"
    if mismatches:
        s, mm = mismatches[0]
        ev.verdict, ev.correct = "wrong", False
        ev.first_mismatch = mm[0].as_dict()
        ev.reason = _short(f"wrong output on {len(mismatches)} of {len(sets)} input sets; first on {s.name!r}: "
                           f"{mm[0].sentence()}")
        ev.details = [f"It is wrong on {len(mismatches)} of {len(sets)} input sets. On the input set {s.name} "
                      f"({s.describe(task)}), grid {list(s.grid)}, block {list(s.block)}:"] + \
            [f"  {m.sentence()}" for m in mm[:3]]
        return ev
    ev.verdict, ev.correct = "correct", True
    ev.reason = f"correct on all {len(sets)} input sets"
    return ev


def _param_names(msg: str, entry: str, task) -> str:
    """nvcc names parameters <entry>_param_<i>: say the task's names instead."""
    for i, p in enumerate(task.params):
        msg = msg.replace(f"'{entry}_param_{i}'", f"`{p.name}`").replace(f"{entry}_param_{i}", p.name)
    return msg


def _fault_kind(e) -> str:
    names = {"OutOfBounds": "out-of-bounds memory access", "UninitializedRead": "use of an undefined value",
             "StepBudgetExceeded": "step budget exceeded", "LaunchError": "launch error",
             "CaseError": "launch error"}
    return names.get(type(e).__name__, "runtime fault")


def _unsupported_details(problems: list, ptx: str) -> list:
    out = [f"nvcc compiled it, but the machine cannot run {len(problems)} construct(s) of the PTX:"]
    out += [f"  {p}" for p in problems[:MAX_DETAIL_LINES]]
    if len(problems) > MAX_DETAIL_LINES:
        out.append(f"  ... and {len(problems) - MAX_DETAIL_LINES} more")
    text = " ".join(problems)
    hints = []
    if "f64" in text:
        hints.append("double precision is not supported by this machine: use float")
    if "approx" in text or "not bit-defined" in text:
        hints.append("approximate math (expf, logf, sinf, __expf, rsqrtf, ...) is not supported: use +, -, *, /, "
                     "fmaf, sqrtf or integer arithmetic")
    if "call" in text:
        hints.append("function calls are not supported: mark device helpers __forceinline__")
    if hints:
        out.append("Hint: " + "; ".join(hints) + ".")
    return out


def evaluation_json(ev: Evaluation) -> str:
    return json.dumps(ev.run_sets, default=str)
