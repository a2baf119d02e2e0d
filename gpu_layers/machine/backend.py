"""The model backend (`run --backend model`, the app's "Inside the model", the agent's
`--backend model`): a launch runs inside the compiled machine core, through the fast executor.

The host prepares the kernel (core.machine_kernel: flattened, lowered for one warp, allocated),
writes the prompt (program, launch, buffers: no part of the kernel is computed here), lets the
model generate every token of the trace and the dump, and decodes the output buffers from the
generated tokens alone. The compiled core (about 2 minutes and 7 GB to compile on a 2-core CPU)
is cached on disk ($QWENGPU_CACHE or ~/.cache/qwengpu, core/core-<key>.pkl, keyed by the source
of every module the circuit comes from) and loaded on later runs; `shared_core` keeps one per
process for concurrent runs (each run has its own state).

Faults: `<fault>` (an access outside the memory map) raises OutOfBounds naming the PC and lane,
or, at one of the lowering's checks (Kernel.checks: a partial membermask, a shuffle of a lane that
exited, a misaligned vector, a local access out of range), ExecutionError saying what failed;
a launch that does not reach `<end>` within the token budget raises StepBudgetExceeded.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import sys
import threading
import time
from pathlib import Path

from gpu_layers.errors import ExecutionError, OutOfBounds, StepBudgetExceeded

_SOURCES = ("machine/core.py", "machine/memunit.py", "machine/memory_map.py", "machine/control.py",
            "machine/regfile.py", "craft/assemble.py", "craft/fast.py", "craft/fast_head.py",
            "craft/circuit.py", "craft/fields.py", "craft/recycle.py", "craft/physics.py", "craft/blocks/alu.py",
            "craft/blocks/memory.py", "craft/blocks/base.py", "craft/blocks/logic.py")


def cache_dir() -> Path:
    from gpu_layers.cases import cache_root

    return cache_root() / "core"


def core_key() -> str:
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for rel in _SOURCES:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes())
    return h.hexdigest()[:16]


def load_core(progress=None):
    """(FastMachine, {token: id}) of the machine core for Qwen3.5-2B's per-layer shapes: from the
    cache, or compiled (and cached) on first use."""
    from gpu_layers.craft.testing import TINY
    from gpu_layers.hosts import REAL_2B_TEXT_CONFIG
    from gpu_layers.machine.core import build_core_fast

    path = cache_dir() / f"core-{core_key()}.pkl"
    if path.is_file():
        with open(path, "rb") as f:
            return pickle.load(f)
    say = progress or (lambda msg: None)
    say(f"compiling the machine core (first use; cached in {path}) ...")
    t = time.time()
    fm, ids = build_core_fast({k: REAL_2B_TEXT_CONFIG[k] for k in TINY}, check=False)
    say(f"compiled in {time.time() - t:.0f} s")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        pickle.dump((fm, ids), f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)
    for old in path.parent.glob("core-*.pkl"):       # cores of earlier sources: never loaded again
        if old != path:
            old.unlink(missing_ok=True)
    return fm, ids


_SHARED = {}
_SHARED_LOCK = threading.Lock()


def shared_core(progress=None):
    """load_core once per process (the app's concurrent runs share it: each run has its own
    state, the compiled layers are read-only)."""
    with _SHARED_LOCK:
        key = core_key()
        if key not in _SHARED:
            _SHARED.clear()
            _SHARED[key] = load_core(progress)
        return _SHARED[key]


def model_prompt(kernel, grid, block, args, outputs, dynamic_shared_bytes=0):
    """(prompt tokens, machine kernel) of a launch, or the refusal (a QwenGPUError naming what the
    machine core does not run). Cheap: nothing is compiled or run."""
    from gpu_layers.machine.core import machine_kernel, prompt_tokens

    mk, grid, block = machine_kernel(kernel, grid, block, args)
    return prompt_tokens(mk, grid, block, args, outputs, dynamic_shared_bytes), mk


def case_tokens(case) -> tuple[list[str], list[str]]:
    """(prompt, stream) of a gpu_layers.cases.Case's launch as the core runs it, from the oracle
    (core.launch_tokens: trace and dump): the token sequence the benchmarks feed the core."""
    from gpu_layers.interp import launch_args, module_for
    from gpu_layers.machine.core import launch_tokens, machine_kernel

    args = launch_args(case)
    mk, grid, block = machine_kernel(module_for(case.ptx()).kernel(case.kernel), case.grid, case.block, args)
    outs = [i for i, a in enumerate(case.args) if a.is_buffer and a.output]
    prompt, want, _, _ = launch_tokens(mk, grid, block, args, outs, case.dynamic_shared_bytes)
    return prompt, want


def run_kernel_model(kernel, grid, block, args, outputs, dynamic_shared_bytes=0, max_tokens: int = 5_000_000,
                     progress=None, core=None, prompt=None, on_tokens=None, engine: str = "fast",
                     checkpoint=None):
    """Run a launch inside the model: `kernel` (PTX IR), `args` (interp.launch_args), `outputs`
    (buffer argument indices the dump returns); `prompt`: model_prompt's result, if already made.
    Returns ({argument index: array decoded from the generated tokens}, generated tokens,
    seconds). progress(message) gets the compile notice, a line every 1,000 tokens and one at
    the end; on_tokens(n), if given, is called instead of the lines (either may raise to stop
    the run). engine: "fast" (the fast executor on the compiled core) or "stock" (a spliced
    checkpoint of the core, `checkpoint` or the cached tiny-host build, through stock generate:
    machine.stock_engine)."""
    from gpu_layers.machine import memory_map as MM
    from gpu_layers.machine.core import CoreError, run_core

    if prompt is None:
        prompt, mk = model_prompt(kernel, grid, block, args, outputs, dynamic_shared_bytes)
    else:
        prompt, mk = prompt
    if engine not in ("fast", "stock"):
        raise ValueError(f"engine must be fast or stock, not {engine!r}")
    if engine == "stock":
        from gpu_layers.machine.stock_engine import shared_engine

        stock = shared_engine(checkpoint, progress)
    elif checkpoint is not None:
        from gpu_layers.machine.stock_engine import check_core_build

        check_core_build(checkpoint)        # the fast executor runs the very core the build holds
    if engine == "fast":
        fm, ids = core or shared_core(progress)
    t = time.time()
    tick = on_tokens or ((lambda n: progress(f"{n} machine tokens, {n / (time.time() - t):.0f} tokens/s"))
                         if progress else None)
    if engine == "stock":
        got = stock.run(prompt, max_tokens, tick)
        finished = got[-1] in ("<end>", "<fault>")
    else:
        try:                                # run_core raises CoreError when the budget runs out
            got, _ = run_core(fm, ids, prompt, max_tokens=max_tokens, progress=tick)
            finished = True
        except CoreError:
            finished = False
    if not finished:
        raise StepBudgetExceeded(f"the model did not finish the launch within {max_tokens} machine "
                                 "tokens; an infinite loop?")
    dt = time.time() - t
    if progress and not on_tokens:
        progress(f"{len(got)} machine tokens generated in {dt:.1f} s ({len(got) / max(dt, 1e-9):.0f} tokens/s)")
    if got[-1] == "<fault>":
        pc = next((int(x.split()[2]) for x in reversed(got) if x.startswith("<wi ")), None)
        lane = int(got[-2][4:-1]) if got[-2].startswith("<mt ") else "the first executed"
        if pc in mk.checks:
            raise ExecutionError(f"line {mk.instructions[pc].line}: {mk.checks[pc]}; the model stopped there "
                                 f"(machine PC {pc}, lane {lane} of its lane group)")
        raise OutOfBounds(f"the machine refused a memory access (outside the buffers, misaligned, or "
                          f"outside shared memory): machine PC {pc} `{mk.instructions[pc]}`, lane {lane} "
                          "of its lane group")
    return MM.decode_dump(got, MM.layout(args, outputs), {i: args[i] for i in outputs}), got, dt


def run_case_model(case, max_tokens: int = 5_000_000, progress=None, core=None, engine: str = "fast",
                   checkpoint=None):
    """Run a gpu_layers.cases.Case inside the model. Returns ({output name: array}, generated
    tokens). progress(message) gets the compile notice and a line every 1,000 tokens; engine and
    checkpoint: run_kernel_model's."""
    from gpu_layers.interp import launch_args, module_for

    args = launch_args(case)
    bufs = [i for i, a in enumerate(case.args) if a.is_buffer]
    outs = [i for i in bufs if case.args[i].output] or bufs
    dec, got, _ = run_kernel_model(module_for(case.ptx()).kernel(case.kernel), case.grid, case.block, args, outs,
                                   case.dynamic_shared_bytes, max_tokens, progress, core, engine=engine,
                                   checkpoint=checkpoint)
    return {case.args[i].name: dec[i] for i in outs}, got


def stderr_progress(msg: str):
    print(msg, file=sys.stderr, flush=True)
