"""State snapshots of a launch: the machine's registers, predicates and memory at sampled steps.

    rec = record(kernel, grid, block, args, dynamic_shared_bytes=0, max_snapshots=256)
    rec.snapshots[i]          a Snapshot: step number, warp, PC, instruction, lane masks, register
                              values (raw bits, None where undefined) of every thread of the warp
                              that executed the step, the registers the step wrote, and the bytes
                              of every buffer and of the block's shared memory (bounded)
    rec.total_steps, rec.stride, rec.error
    attach_tokens(rec, tokens)   the token stream of the same launch (gpu_layers.machine.protocol):
                                 each kept snapshot gets the tokens its step emitted

Snapshots come from the interpreter's `launch(..., observer=...)` hook, called after every step,
so a snapshot is the state *after* its step. Memory is bounded by sampling: every step is kept
until `max_snapshots` are held, then every other one is dropped and only every 2nd (4th, ...)
step is kept from then on, so a run of any length keeps at most `max_snapshots` evenly spaced
snapshots, plus the last step (the final state, or the state where the launch failed). Buffers
and shared memory are kept up to `memory_bytes` bytes each per snapshot.

`Recorder` is the observer itself; it also counts steps (`steps`, readable from another thread
for progress), stops the launch past a `deadline` (time.monotonic() value, raising
TimeBudgetExceeded) or when `cancel()` returns true (Cancelled).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from gpu_layers.errors import ExecutionError
from gpu_layers.interp.machine import launch, program_for

DEFAULT_MAX_SNAPSHOTS = 256
DEFAULT_MEMORY_BYTES = 4096
_CHECK_EVERY = 256            # steps between deadline / cancel checks


class TimeBudgetExceeded(ExecutionError):
    """The launch ran longer than its time budget."""


class Cancelled(ExecutionError):
    """The launch was stopped on request (the page went away)."""


@dataclass
class Snapshot:
    step: int                 # 0-based: the step-th warp-instruction of the launch
    block: int                # linear block id
    block_idx: tuple
    warp: int
    pc: int
    line: int                 # PTX line of the instruction
    text: str                 # the instruction
    active: int               # lane mask of the threads at this PC
    executed: int             # lane mask of the threads that executed it (guard true; branch taken)
    nthreads: int             # threads that exist in this warp (lanes 0..nthreads-1)
    regs: np.ndarray          # [register, thread] raw bits (uint64; 0 where undefined)
    undef: np.ndarray         # [register, thread] True where the value is undefined (poison)
    written: tuple            # indices (into Recording.reg_names) of the registers the step writes
    memory: dict              # buffer name -> bytes (bounded); "shared" -> the block's shared memory
    tokens: list = field(default_factory=list)   # tokens this step emitted (after attach_tokens)

    def value(self, reg: int, thread: int):
        """A register's raw bits in one thread, None where undefined."""
        return None if self.undef[reg, thread] else int(self.regs[reg, thread])


@dataclass
class Recording:
    kernel: str
    reg_names: list           # declared registers, in declaration order
    reg_bits: list            # their widths (1 for predicates)
    buffers: list             # [(name, numpy dtype)] of the buffer arguments, in argument order
    snapshots: list
    total_steps: int = 0
    stride: int = 1           # every stride-th step is kept
    error: str | None = None  # why the launch stopped early (the snapshots lead up to it)
    error_type: str | None = None
    tokens_total: int | None = None

    def previous(self, i: int) -> Snapshot | None:
        """The last snapshot before snapshots[i] of the same warp of the same block."""
        s = self.snapshots[i]
        for j in range(i - 1, -1, -1):
            p = self.snapshots[j]
            if p.block == s.block and p.warp == s.warp:
                return p
        return None


class Recorder:
    """The launch observer that keeps sampled snapshots (see the module docstring)."""

    def __init__(self, prog, buffer_names, *, max_snapshots: int = DEFAULT_MAX_SNAPSHOTS,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES, deadline: float | None = None,
                 cancel=None, on_step=None):
        if max_snapshots < 2:
            raise ValueError("max_snapshots must be at least 2")
        self.prog = prog
        self.nregs = prog.nregs
        self.buffer_names = list(buffer_names)
        self.max = max_snapshots
        self.memory_bytes = memory_bytes
        self.deadline = deadline
        self.cancel = cancel
        self.on_step = on_step
        self.steps = 0
        self.stride = 1
        self.snaps: list[Snapshot] = []
        self.last = None
        self._dsts = {}

    def __call__(self, W, ins, pc, active, done):
        step = self.steps
        self.steps = step + 1
        self.last = (W, ins, pc, active, done, step)
        if step % self.stride == 0:
            self.snaps.append(self._snapshot(W, ins, pc, active, done, step))
            if len(self.snaps) > self.max:
                self.stride *= 2
                self.snaps = [s for s in self.snaps if s.step % self.stride == 0]
        if step % _CHECK_EVERY == 0:
            if self.on_step is not None:
                self.on_step(self.steps)
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise TimeBudgetExceeded(f"the launch ran past its time budget after {self.steps} steps")
            if self.cancel is not None and self.cancel():
                raise Cancelled(f"stopped on request after {self.steps} steps")

    def finish(self):
        """Keep the last step seen (the final state, or where the launch failed)."""
        if self.last is not None and (not self.snaps or self.snaps[-1].step != self.last[-1]):
            W, ins, pc, active, done, step = self.last
            self.snaps.append(self._snapshot(W, ins, pc, active, done, step))
        if self.on_step is not None:
            self.on_step(self.steps)

    def _written(self, ins):
        key = id(ins)
        hit = self._dsts.get(key)
        if hit is None:
            hit = self._dsts[key] = (ins, tuple(sorted({c for c in ins.dsts if c < self.nregs})))
        return hit[1]

    def _snapshot(self, W, ins, pc, active, done, step) -> Snapshot:
        n = len(W.local)                    # one local-memory region per thread that exists
        R = W.R
        undef = np.zeros((self.nregs, n), dtype=bool)
        regs = np.zeros((self.nregs, n), dtype=np.uint64)
        for c in range(self.nregs):
            col = R[c][:n]
            if None in col:
                undef[c] = [v is None for v in col]
                col = [0 if v is None else v for v in col]
            regs[c] = col
        mem = {}
        lim = self.memory_bytes
        for name, region in zip(self.buffer_names, W.glob.regions):
            mem[name] = bytes(region.data[:lim])
        if W.shared.size:
            mem["shared"] = bytes(W.shared.data[:lim])
        am = em = 0
        for l in active:
            am |= 1 << l
        for l in done:
            em |= 1 << l
        return Snapshot(step=step, block=W.block_id, block_idx=tuple(W.block_idx), warp=W.index, pc=pc,
                        line=ins.line, text=ins.text, active=am, executed=em, nthreads=n, regs=regs,
                        undef=undef, written=self._written(ins), memory=mem)


def record(kernel, grid, block, args, dynamic_shared_bytes: int = 0, *, lanes: int = 4,
           step_budget: int | None = None, max_snapshots: int = DEFAULT_MAX_SNAPSHOTS,
           memory_bytes: int = DEFAULT_MEMORY_BYTES, deadline: float | None = None, cancel=None,
           on_step=None, buffer_names=None) -> Recording:
    """Run one launch (as gpu_layers.interp.launch) and keep sampled snapshots of its state.

    An ExecutionError during the launch (a fault, the step or time budget) does not raise: the
    recording keeps the snapshots up to it and names the error. Errors before the first step
    (launch configuration, arguments, unsupported PTX) raise as from `launch`."""
    prog = program_for(kernel)
    names = list(buffer_names) if buffer_names is not None else \
        [p.name for p, a in zip(kernel.params, args) if isinstance(a, np.ndarray)]
    buffers = [(n, a.dtype) for n, a in zip(names, [a for a in args if isinstance(a, np.ndarray)])]
    rec = Recorder(prog, names, max_snapshots=max_snapshots, memory_bytes=memory_bytes, deadline=deadline,
                   cancel=cancel, on_step=on_step)
    error = error_type = None
    try:
        launch(kernel, grid, block, list(args), dynamic_shared_bytes, lanes=lanes, step_budget=step_budget,
               observer=rec)
    except ExecutionError as e:
        if rec.steps == 0:
            raise
        error, error_type = str(e), type(e).__name__
    rec.finish()
    reg_names = prog.colnames[:prog.nregs]
    return Recording(kernel=kernel.name, reg_names=list(reg_names),
                     reg_bits=[prog.regbits[n] for n in reg_names], buffers=buffers, snapshots=rec.snaps,
                     total_steps=rec.steps, stride=rec.stride, error=error, error_type=error_type)


def step_starts(tokens) -> list:
    """Index of the first token of every step in a protocol token stream: a step begins at its
    `<wi>` token, or at the `<w>` naming its warp just before it (blocks of several warps), or at
    the `<blk>` token before those when a block starts there."""
    starts = []
    for i, t in enumerate(tokens):
        if t[0] == "wi":
            j = i
            if j and tokens[j - 1][0] == "w":
                j -= 1
            if j and tokens[j - 1][0] == "blk":
                j -= 1
            starts.append(j)
    return starts


def step_end(tokens, starts, k) -> int:
    """End (exclusive) of step k's tokens: the next step's start, or the first `<dump>`/`<halt>`."""
    if k + 1 < len(starts):
        return starts[k + 1]
    i = starts[k] + 1
    while i < len(tokens) and tokens[i][0] not in ("dump", "halt", "blk"):
        i += 1
    return i


def attach_tokens(rec: Recording, tokens, max_per_step: int = 64) -> None:
    """Give each kept snapshot the tokens its step emitted (at most max_per_step of them). The
    stream must come from the same launch (same machine code, configuration and inputs)."""
    starts = step_starts(tokens)
    if len(starts) < rec.total_steps:
        raise ValueError(f"the token stream has {len(starts)} steps, the recording {rec.total_steps}")
    rec.tokens_total = len(tokens)
    for s in rec.snapshots:
        a, b = starts[s.step], step_end(tokens, starts, s.step)
        s.tokens = list(tokens[a:min(b, a + max_per_step)])
