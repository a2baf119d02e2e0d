"""The reference SIMT interpreter: the definition of the machine (see machine.py for the rules).

    run_case(case, lanes=4, step_budget=None, trace=False) -> RunResult
        .outputs       {buffer name: numpy array (int32/uint32/int64/uint64/float32/float64), full length}
                       for every buffer marked "output" (every buffer if none is marked)
        .buffers       {buffer name: numpy array} for every buffer argument
        .steps         warp-instruction steps
        .lane_issues   lane-group issues (groups of `lanes` consecutive lanes with an active thread)
        .fingerprint   sha256 over the step trace (block, warp, pc, active mask)
        .trace         the step list when trace=True, else None

    launch(kernel_ir, grid, block, args, dynamic_shared_bytes=0, lanes=4, step_budget=None,
           trace=False) -> LaunchResult       (lower level; see machine.launch)

Parsing and validation (UnsupportedPTX listing every problem) happen before anything runs.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpu_layers.interp.machine import (  # noqa: F401
    DEFAULT_STEP_BUDGET, LaunchResult, Scalar, launch, program_for,
)
from gpu_layers.ptx.parser import parse_ptx


@dataclass
class RunResult:
    outputs: dict
    buffers: dict
    steps: int
    lane_issues: int
    fingerprint: str
    trace: list | None = None


_MODULES: dict = {}


def module_for(ptx_text: str):
    """Parse PTX once per text (cached)."""
    m = _MODULES.get(ptx_text)
    if m is None:
        m = parse_ptx(ptx_text)
        if len(_MODULES) > 256:
            _MODULES.clear()
        _MODULES[ptx_text] = m
    return m


def launch_args(case) -> list:
    """A case's arguments as `launch` takes them: a fresh copy of each buffer, Scalars."""
    return [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in case.args]


def run_case(case, lanes: int = 4, step_budget: int | None = None, trace: bool = False) -> RunResult:
    """Run a `gpu_layers.cases.Case` on the reference interpreter."""
    module = module_for(case.ptx())
    kernel = module.kernel(case.kernel)
    args = launch_args(case)
    res = launch(kernel, case.grid, case.block, args, case.dynamic_shared_bytes, lanes=lanes,
                 step_budget=step_budget, trace=trace)
    buffers = {a.name: res.buffers[i] for i, a in enumerate(case.args) if a.is_buffer}
    outs = [a.name for a in case.args if a.is_buffer and a.output]
    outputs = {n: buffers[n] for n in outs} if outs else dict(buffers)
    return RunResult(outputs=outputs, buffers=buffers, steps=res.steps, lane_issues=res.lane_issues,
                     fingerprint=res.fingerprint, trace=res.trace)
