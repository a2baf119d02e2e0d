"""The reference SIMT machine: one kernel launch, executed deterministically.

Decisions (the definition of the machine; the compiled model is checked against this):

* Threads. Grid and block are up to 3D. Thread and block ids are linearised x fastest
  (id = x + X*(y + Y*z)). A warp is 32 consecutive linear thread ids of one block; the last warp
  of a block may be partial (its missing lanes never exist and count as exited).
* Order. Blocks run one after another in linear block order, each to completion (a block that
  waits for a later block never finishes: the step budget ends it). Within a block the warps are
  scheduled round-robin (warp 0, 1, ..., one warp-instruction each per turn, skipping warps with
  nothing runnable). Everything is deterministic. (Machine code only: after an instruction in
  Kernel.holds the same warp keeps the turn; PTX never has any.)
* Scheduling inside a warp (the cursor rule). Each thread has its own PC; each warp has a
  cursor, initially 0. A warp executes the lowest PC at or after its cursor among its runnable
  threads (the lowest PC overall when none is at or after it), with every runnable thread at that
  PC active; the cursor then moves to that PC + 1. Guards (@p / @!p) select which active threads
  execute; a branch sends executing threads to the target and the others on.
  Consequences: a converged warp runs as one; the two sides of an if/else run in program order and
  rejoin at the join point; a taken backward branch passes the turn to threads waiting further on,
  so every group of threads is picked within two sweeps of the program (forward progress: a spin
  lock, a ticket lock or a flag hand-off inside a warp terminates, as under Volta's independent
  thread scheduling). Threads that leave a loop early run ahead, so a warp reconverges after a
  divergent loop only at the next warp- or block-synchronising instruction (as CUDA promises:
  `__syncwarp` reconverges, nothing else does). Results never depend on the rule for race-free
  kernels; the trace does.
* Barriers. `bar.sync 0` / `barrier.sync 0` (and `bar.sync 0, N` only with N == block size) is
  block-wide: a thread that executes it waits; when every non-exited thread of the block waits,
  all are released.
* The machine's warp barrier (machine code only: `bar.warp.sync -1` at an index in
  Kernel.warp_barriers; PTX never has one). The block barrier's rule for one warp: a thread that
  executes it waits; after the step at which every non-exited thread of its warp waits (the last
  arrives, or the last one not waiting exits), all are released. The compiled machine waits for a
  warp's lanes this way before its warp exchanges in blocks of several warps.
* Warp-synchronous instructions (shfl.sync, vote.sync, match.sync, bar.warp.sync). A thread that
  executes one waits until every non-exited thread its membermask names has arrived at the same
  instruction (for bar.warp.sync: at any bar.warp.sync); the instruction then executes once for
  all of them together and they go on. Threads are never waited for once exited. A wait that can
  never end (the others wait at a block barrier, or at another instruction, with nothing left to
  run) is a deadlock error naming who waits for whom.
* Undefined values. A register never written, the result of an undefined operation (integer
  division by zero, signed MIN / -1) and a load of memory nothing has written (no byte of the
  access; never-written bytes of a partly written access read as 0, struct padding) are poison.
  Poison flows through moves, arithmetic, conversions and comparisons; selp takes only the
  selected operand (and the predicate) into account; and/or with a dominating operand (x & 0,
  x | ~0, also on predicates) are defined. Poison is an error (UninitializedRead, naming the
  register, line and thread, and where the value became undefined) only when it becomes
  observable: a guard or branch condition, an address, a value stored to memory, an atomic's
  operand, a membermask, a vote or match operand, or a shuffle source that a reader consumes.
  So outputs never hold poison.
* Machine lanes. `lanes` (a divisor of 32, default 4) is the lane count of the compiled machine:
  a warp-instruction's active threads are issued in groups of `lanes` consecutive lane ids,
  skipping groups without an active thread. Results never depend on `lanes`; `lane_issues`
  counts the groups, `steps` the warp-instructions.
* Trace. Each step is (block, warp, pc, active mask); `fingerprint` is the sha256 over all steps
  (each packed little-endian as 4 x u32), `trace` the list itself when asked for.
* State. Registers hold raw bits of their declared width (None: poison). Memory is
  byte-addressed with per-byte initialised bits (see memory.py for the address map). Out-of-range
  or misaligned accesses raise OutOfBounds; more than `step_budget` steps raise
  StepBudgetExceeded.
* Issue groups are formed from the threads at the warp's PC (before the guard is evaluated).
* Undefined behaviour raises ExecutionError instead of guessing: a warp-synchronous instruction
  executed by a thread outside its own membermask; a shfl reading a lane that does not take part
  (or has exited); cvta.to.shared/local of an address outside that window; `bar.sync 0, N` with
  N != block size.
* Launch limits (LaunchError): block dims <= (1024, 1024, 64) and <= 1024 threads per block;
  grid dims <= (2^31-1, 65535, 65535) and at most 2^20 threads per launch; shared memory
  (static + dynamic) <= 48 KiB; local memory <= 16 MiB per block (all its threads: the
  interpreter's host memory); the block must respect the kernel's .maxntid / .reqntid;
  arguments must match the .param list in count and size.
"""
from __future__ import annotations

import hashlib
import sys
from array import array
from dataclasses import dataclass, field

import numpy as np

from gpu_layers.errors import (
    ExecutionError, LaunchError, QwenGPUError, StepBudgetExceeded, UninitializedRead,
)
from gpu_layers.interp.decode import WARP_BARRIER, Program
from gpu_layers.interp.memory import GlobalMemory, Region
from gpu_layers.ptx.ir import Kernel, Module
from gpu_layers.ptx.validator import validate

DEFAULT_STEP_BUDGET = 2_000_000
MAX_SHARED_BYTES = 48 * 1024
MAX_THREADS_PER_BLOCK = 1024
MAX_THREADS_PER_LAUNCH = 1 << 20
MAX_LOCAL_BYTES_PER_BLOCK = 16 << 20     # local memory of one block's threads together (host RAM)

SCALAR_BYTES = {"i32": 4, "u32": 4, "i64": 8, "u64": 8, "f32": 4, "f64": 8}



@dataclass
class LaunchResult:
    buffers: list                      # per argument: numpy array after the launch (None for scalars)
    steps: int
    lane_issues: int
    fingerprint: str
    trace: list | None = None


@dataclass
class Scalar:
    """A typed scalar kernel argument ("i32", "u32", "i64", "u64", "f32")."""
    type: str
    value: object


# thread states
RUN, BARRIER, EXITED, SYNC, WBARRIER = 0, 1, 2, 3, 4


@dataclass
class _Block:
    shared: Region
    alive: int
    index: tuple = (0, 0, 0)
    waiting: int = 0
    exited: bool = False      # some thread exited since the live-warp list was last pruned
    warps: list = field(default_factory=list)


class Warp:
    """One warp's state: register columns, per-thread PCs and states, the scheduling cursor."""
    __slots__ = ("ok", "R", "pc", "st", "run", "conv", "cpc", "runmask", "cursor", "parked",
                 "gone", "porig", "shared", "local", "glob", "params", "index", "block_id", "tids",
                 "block_dim", "block_idx", "block", "wwait", "wgen")

    def thread_name(self, l):
        bx, by, bz = self.block_idx
        t = self.tids[l]
        X, Y, _ = self.block_dim
        return f"(block ({bx},{by},{bz}), thread ({t % X},{(t // X) % Y},{t // (X * Y)}))"

    def origin(self, col, lane, name):
        """Where the undefined value in (col, lane) came from, for error messages."""
        return self.porig.get((col, lane)) or f"{name} was never written"


def _dims(v, what):
    if isinstance(v, int):
        v = [v]
    v = list(v)
    if not 1 <= len(v) <= 3 or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in v):
        raise LaunchError(f"{what} must be 1 to 3 positive integers, got {v!r}")
    v = [int(x) for x in v] + [1] * (3 - len(v))
    if any(x < 1 for x in v):
        raise LaunchError(f"{what} dimensions must be >= 1, got {v}")
    return tuple(v)


def _pack_scalar(p, a, i):
    """Bytes of scalar argument a for param p."""
    pbytes = p.size
    if isinstance(a, Scalar):
        t, v = a.type, a.value
        if t not in SCALAR_BYTES:
            raise LaunchError(f"argument {i} ({p.name}): unknown scalar type {t!r}")
        if SCALAR_BYTES[t] != pbytes:
            raise LaunchError(f"argument {i} ({p.name}): a {t} does not fit parameter .{p.type} "
                              f"({pbytes} bytes)")
        if t == "f32":
            if p.type not in ("f32", "b32", "u32", "s32"):
                raise LaunchError(f"argument {i} ({p.name}): f32 passed to .{p.type}")
            return np.float32(v).tobytes()
        if t == "f64":
            if p.type not in ("f64", "b64", "u64", "s64"):
                raise LaunchError(f"argument {i} ({p.name}): f64 passed to .{p.type}")
            return np.float64(v).tobytes()
        lo, hi = ((-(1 << (8 * pbytes - 1)), (1 << (8 * pbytes - 1)) - 1) if t[0] == "i"
                  else (0, (1 << (8 * pbytes)) - 1))
        v = int(v)
        if not lo <= v <= hi:
            raise LaunchError(f"argument {i} ({p.name}): {v} is out of range for {t}")
        return (v & ((1 << (8 * pbytes)) - 1)).to_bytes(pbytes, "little")
    if isinstance(a, (bool, np.bool_)):
        raise LaunchError(f"argument {i} ({p.name}): booleans are not kernel arguments")
    if isinstance(a, (int, np.integer)):
        if p.type in ("f32", "f64"):
            raise LaunchError(f"argument {i} ({p.name}): integer passed to an .{p.type} parameter")
        v = int(a)
        if not -(1 << (8 * pbytes - 1)) <= v < (1 << (8 * pbytes)):
            raise LaunchError(f"argument {i} ({p.name}): {v} does not fit .{p.type}")
        return (v & ((1 << (8 * pbytes)) - 1)).to_bytes(pbytes, "little")
    if isinstance(a, (float, np.floating)):
        if p.type == "f64":
            return np.float64(a).tobytes()
        if p.type != "f32":
            raise LaunchError(f"argument {i} ({p.name}): float passed to .{p.type}")
        return np.float32(a).tobytes()
    raise LaunchError(f"argument {i} ({p.name}): unsupported argument {type(a).__name__}")


_PROGRAMS: dict = {}


def program_for(kernel: Kernel) -> Program:
    """Validate and decode a kernel once (cached by identity, least recently used evicted first:
    a caller holding a decoded program, e.g. one whose poison mode a test switched, keeps getting
    the same object while it keeps using it)."""
    key = id(kernel)
    hit = _PROGRAMS.get(key)
    if hit is not None and hit[0] is kernel:
        _PROGRAMS[key] = _PROGRAMS.pop(key)            # most recently used last
        return hit[1]
    if kernel.module is not None:
        validate(kernel.module, kernel.name)
    else:
        validate(Module(kernels={kernel.name: kernel}), kernel.name)
    prog = Program(kernel)
    while len(_PROGRAMS) >= 256:
        del _PROGRAMS[next(iter(_PROGRAMS))]
    _PROGRAMS[key] = (kernel, prog)
    return prog


@dataclass
class _Config:
    grid: tuple
    block: tuple
    nthreads: int
    nblocks: int
    nwarps: int
    lanes: int
    budget: int
    shared_size: int = 0


def launch(kernel, grid, block, args, dynamic_shared_bytes: int = 0, *, lanes: int = 4,
           step_budget: int | None = None, trace: bool = False, observer=None, before=None,
           buffer_offsets=None) -> LaunchResult:
    """Run one launch of `kernel` (a Kernel, or a Module with one kernel).

    args, in .param order: a numpy array is a global buffer (its pointer is passed); a `Scalar`,
    Python int or float is a scalar. Buffers are copied; the results are in `.buffers`.
    observer(warp, decoded instruction, pc, active lanes, lanes that executed it), if given, is
    called after every step (the machine-level oracle reads write-backs through it); before(warp,
    decoded instruction, pc, active lanes, lanes whose guard holds), if given, just before a step
    executes (the memory map checks the machine's bounds there; it may raise to stop the launch).
    buffer_offsets: {argument index: bytes} added to that buffer's address (a multiple of 16 below
    2**31; default 0): where a machine that packs every buffer into one small memory puts it.
    """
    if isinstance(kernel, Module):
        kernel = kernel.kernel()
    cfg = _check_launch(kernel, grid, block, lanes, dynamic_shared_bytes, step_budget)
    prog = program_for(kernel)
    cfg.shared_size = _shared_size(prog, dynamic_shared_bytes)
    if prog.layout.local_size * cfg.nthreads > MAX_LOCAL_BYTES_PER_BLOCK:
        raise LaunchError(f"kernel needs {prog.layout.local_size} bytes of local memory per thread, "
                          f"{prog.layout.local_size * cfg.nthreads} for a block of {cfg.nthreads}; at most "
                          f"{MAX_LOCAL_BYTES_PER_BLOCK} per block")
    glob, param_region, buf_regions = _bind_arguments(kernel, prog, args, buffer_offsets)
    run = _Run(prog, cfg, trace)
    run.observer = observer
    run.before = before
    for bid in range(cfg.nblocks):
        run.block(_make_block(prog, cfg, bid, glob, param_region))
    return run.result(_read_buffers(buf_regions, len(args)))


# ------------------------------------------------------------------------- launch preparation


def _check_launch(kernel, grid, block, lanes, dynamic_shared_bytes, step_budget) -> _Config:
    """Grid, block and lane limits, and the kernel's own .maxntid / .reqntid."""
    grid = _dims(grid, "grid")
    block = _dims(block, "block")
    if block[0] > 1024 or block[1] > 1024 or block[2] > 64:
        raise LaunchError(f"block {block} exceeds the per-dimension limits (1024, 1024, 64)")
    nthreads = block[0] * block[1] * block[2]
    if nthreads > MAX_THREADS_PER_BLOCK:
        raise LaunchError(f"block {block} has {nthreads} threads; at most {MAX_THREADS_PER_BLOCK}")
    if grid[0] > 2**31 - 1 or grid[1] > 65535 or grid[2] > 65535:
        raise LaunchError(f"grid {grid} exceeds the per-dimension limits")
    nblocks = grid[0] * grid[1] * grid[2]
    if nblocks * nthreads > MAX_THREADS_PER_LAUNCH:
        raise LaunchError(f"launch of {nblocks * nthreads} threads exceeds {MAX_THREADS_PER_LAUNCH}")
    if not isinstance(lanes, int) or lanes < 1 or 32 % lanes:
        raise LaunchError(f"lanes must divide 32, got {lanes!r}")
    if not isinstance(dynamic_shared_bytes, int) or dynamic_shared_bytes < 0:
        raise LaunchError(f"dynamic_shared_bytes must be >= 0, got {dynamic_shared_bytes!r}")
    for line, text in kernel.directives:
        words = text.replace(",", " ").split()
        if words and words[0] in (".maxntid", ".reqntid"):
            dims = [int(x) for x in words[1:] if x.isdigit()]
            limit = 1
            for x in dims:
                limit *= x
            if words[0] == ".maxntid" and nthreads > limit:
                raise LaunchError(f"block {block} has {nthreads} threads; the kernel declares "
                                  f".maxntid {', '.join(map(str, dims))} (line {line})")
            if words[0] == ".reqntid" and tuple(dims + [1] * (3 - len(dims))) != block:
                raise LaunchError(f"block {block} differs from the kernel's .reqntid "
                                  f"{', '.join(map(str, dims))} (line {line})")
    budget = DEFAULT_STEP_BUDGET if step_budget is None else int(step_budget)
    return _Config(grid, block, nthreads, nblocks, (nthreads + 31) // 32, lanes, budget)


def _shared_size(prog, dynamic_shared_bytes):
    L = prog.layout
    size = max(L.shared_static, L.dynamic_base + dynamic_shared_bytes) if dynamic_shared_bytes \
        else L.shared_static
    if size > MAX_SHARED_BYTES:
        raise LaunchError(f"kernel needs {size} bytes of shared memory; at most {MAX_SHARED_BYTES}")
    return size


def _bind_arguments(kernel, prog, args, offsets=None):
    """Arguments -> the param space and global buffers: (memory, param region, buffer regions).
    offsets: {argument index: bytes added to the buffer's address} (launch's buffer_offsets)."""
    params = kernel.params
    if len(args) != len(params):
        raise LaunchError(f"kernel {kernel.name} takes {len(params)} arguments, got {len(args)}")
    L = prog.layout
    glob = GlobalMemory()
    pbytes = bytearray(L.param_size)
    buf_regions = []
    for i, (p, a) in enumerate(zip(params, args)):
        off, size = L.params[p.name]
        if isinstance(a, np.ndarray):
            if size != 8:
                raise LaunchError(f"argument {i} ({p.name}): a buffer needs a 64-bit parameter, "
                                  f"the kernel declares .{p.type}")
            if a.dtype not in (np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64):
                raise LaunchError(f"argument {i} ({p.name}): unsupported buffer dtype {a.dtype}")
            arr = np.ascontiguousarray(a)
            boff = (offsets or {}).get(i, 0)
            if not (isinstance(boff, int) and 0 <= boff < 1 << 31 and boff % 16 == 0):
                raise LaunchError(f"argument {i} ({p.name}): buffer offset {boff!r} is not a multiple of "
                                  "16 in [0, 2**31)")
            base = glob.add(p.name, arr.tobytes(), boff)
            pbytes[off:off + 8] = base.to_bytes(8, "little")
            buf_regions.append((i, arr.dtype, len(arr), glob.regions[-1]))
        else:
            pbytes[off:off + size] = _pack_scalar(p, a, i)
    return glob, Region("kernel parameters", 0, len(pbytes), bytes(pbytes)), buf_regions


def _make_block(prog, cfg, bid, glob, param_region) -> _Block:
    """A block's shared memory and warps, every thread runnable at PC 0."""
    grid, block = cfg.grid, cfg.block
    bidx = (bid % grid[0], (bid // grid[0]) % grid[1], bid // (grid[0] * grid[1]))
    shared = Region(f"shared memory (block {bidx})", 0, cfg.shared_size)
    blk = _Block(shared=shared, alive=cfg.nthreads, index=bidx)
    constcols = {c: tuple([v] * 32) for c, v in prog.constcols.items()}
    mutable_cols = list(range(prog.nregs)) + prog.scratch
    ncols = len(prog.colnames)
    local_size = prog.layout.local_size
    for w in range(cfg.nwarps):
        W = Warp()
        n = min(32, cfg.nthreads - 32 * w)
        W.tids = [32 * w + l for l in range(32)]
        R = [None] * ncols
        fill = [None] * n + [0] * (32 - n)
        for c in mutable_cols:
            R[c] = list(fill)
        for c, col in constcols.items():
            R[c] = col
        for name, c in prog.specials.items():
            R[c] = tuple(_special(name, W.tids[l], l, w, cfg.nwarps, block, grid, bidx)
                         for l in range(32))
        W.R = R
        W.ok = set()
        W.pc = [0] * 32
        W.st = [RUN] * n + [EXITED] * (32 - n)
        W.gone = ((1 << 32) - 1) & ~((1 << n) - 1)     # lanes that have exited (or never existed)
        W.run = list(range(n))
        W.conv = True
        W.cpc = 0
        W.cursor = 0
        W.parked = {}
        W.wwait = 0          # threads waiting at the machine's warp barrier
        W.wgen = 0           # its releases so far, mod 2 (the control unit's <w W H G>)
        W.porig = {}
        W.runmask = (1 << n) - 1
        W.shared = shared
        W.local = [Region(f"local memory of thread {W.tids[l]}", 0, local_size) for l in range(n)]
        W.glob = glob
        W.params = param_region
        W.index = w
        W.block_id = bid
        W.block_dim = block
        W.block_idx = bidx
        W.block = blk
        blk.warps.append(W)
    return blk


def _read_buffers(buf_regions, nargs):
    buffers = [None] * nargs
    for i, dtype, n, region in buf_regions:
        buffers[i] = np.frombuffer(bytes(region.data), dtype=dtype, count=n).copy()
    return buffers


# ------------------------------------------------------------------------------- execution


class _Run:
    """One launch in progress: counters, the trace, and the per-step execution."""

    def __init__(self, prog, cfg, trace):
        self.code = prog.code
        self.cfg = cfg
        self.steps = 0
        self.lane_issues = 0
        self.hasher = hashlib.sha256()
        self.tbuf = array("I")        # step records (block, warp, pc, mask), hashed as u32s
        self.trace = [] if trace else None
        self.group_cache = {}
        self.observer = None
        self.before = None
        self.holds = prog.kernel.holds        # machine code: the warp keeps the turn after these

    def result(self, buffers) -> LaunchResult:
        _flush(self.hasher, self.tbuf)
        return LaunchResult(buffers=buffers, steps=self.steps, lane_issues=self.lane_issues,
                            fingerprint=self.hasher.hexdigest(), trace=self.trace)

    def block(self, blk):
        """Run one block to completion: warps round-robin, one warp-instruction each per turn."""
        live = list(blk.warps)
        while live:
            progressed = False
            holds = self.holds
            for W in live:
                if W.run:
                    progressed = True
                    while self.step(W, blk) in holds and W.run:
                        pass
            if not progressed:
                if blk.alive:
                    raise ExecutionError(_deadlock_message(blk, self.code))
                break
            if blk.exited:
                live = [W for W in live if W.run or W.parked or W.wwait or BARRIER in W.st]
                blk.exited = False

    def step(self, W, blk):
        """Pick the warp's next instruction by the cursor rule, record the step, execute it.
        Returns its PC."""
        pc, active, amask = _pick(W)
        self.steps += 1
        code = self.code
        if self.steps > self.cfg.budget:
            raise StepBudgetExceeded(
                f"the launch ran more than {self.cfg.budget} warp-instruction steps (block "
                f"{W.block_idx}, warp {W.index}, line {code[pc].line}); an infinite loop?")
        g = self.group_cache.get(amask)
        if g is None:
            lanes = self.cfg.lanes
            gm = (1 << lanes) - 1
            g = sum(1 for k in range(32 // lanes) if (amask >> (k * lanes)) & gm)
            self.group_cache[amask] = g
        self.lane_issues += g
        tbuf = self.tbuf
        tbuf.extend((W.block_id, W.index, pc, amask))
        if len(tbuf) >= 1 << 18:
            _flush(self.hasher, tbuf)
        if self.trace is not None:
            self.trace.append((W.block_id, W.index, pc, amask))
        ins = code[pc]
        exe = _guarded(W, ins, active)
        if self.before is not None:
            self.before(W, ins, pc, active, exe)
        kind = ins.kind
        done = exe
        if kind == "op":
            if exe:
                _execute(W, ins, exe)
            _advance(W, active, pc + 1)
        elif kind == "warp":
            if ins.sync:
                done = _warp_sync(W, ins, pc, active, exe)
            else:
                if exe:
                    _execute(W, ins, exe, active)
                _advance(W, active, pc + 1)
        elif kind == "bra":
            if len(exe) == len(active):
                _advance(W, active, ins.target)
            elif not exe:
                _advance(W, active, pc + 1)
            else:
                _materialize(W)
                pcs = W.pc
                for l in active:
                    pcs[l] = pc + 1
                for l in exe:
                    pcs[l] = ins.target
                W.conv = False
        elif kind == "exit":
            if exe:
                _exit_threads(W, blk, exe, active, pc)
            else:
                _advance(W, active, pc + 1)
        elif kind == "bar":
            warp = ins.target == WARP_BARRIER
            if ins.target and not warp and ins.target != self.cfg.nthreads:
                raise ExecutionError(
                    f"line {ins.line}: `{ins.text}`: a barrier for {ins.target} threads in a "
                    f"block of {self.cfg.nthreads} is not supported")
            if exe:
                _materialize(W)
                st = W.st
                for l in active:
                    W.pc[l] = pc + 1
                for l in exe:
                    st[l] = WBARRIER if warp else BARRIER
                if warp:
                    W.wwait += len(exe)
                else:
                    blk.waiting += len(exe)
                _set_run(W)
            else:
                _advance(W, active, pc + 1)
        else:  # nop
            _advance(W, active, pc + 1)
        if self.observer is not None:
            self.observer(W, ins, pc, active, done)
        if blk.waiting and blk.waiting == blk.alive:
            _release_barrier(blk)
        if W.wwait and W.wwait == 32 - W.gone.bit_count():
            _release_warp_barrier(W)
        return pc


def _pick(W):
    """The cursor rule: (pc, active lanes, active mask) of the warp's next instruction."""
    run = W.run
    if W.conv:
        pc = W.cpc
        W.cursor = pc + 1
        return pc, run, W.runmask
    pcs = W.pc
    cur = W.cursor
    best = lowest = 1 << 62
    for l in run:
        p = pcs[l]
        if p < lowest:
            lowest = p
        if cur <= p < best:
            best = p
    pc = best if best != 1 << 62 else lowest
    W.cursor = pc + 1
    active = [l for l in run if pcs[l] == pc]
    if len(active) == len(run):
        W.conv = True
        W.cpc = pc
        return pc, run, W.runmask
    amask = 0
    for l in active:
        amask |= 1 << l
    return pc, active, amask


def _guarded(W, ins, active):
    """The active threads whose guard holds (a poisoned guard is observable: an error)."""
    if ins.guard is None:
        return active
    G = W.R[ins.guard]
    neg = ins.gneg
    exe = []
    for l in active:
        gv = G[l]
        if gv is None:
            raise UninitializedRead(
                f"line {ins.line}: `{ins.text}` is guarded by predicate {ins.gname}, which holds an "
                f"undefined value ({W.origin(ins.guard, l, ins.gname)}), {W.thread_name(l)}")
        if gv != neg:
            exe.append(l)
    return exe


def _execute(W, ins, exe, active=None):
    """Run a handler on the executing lanes, applying the instruction's poison rule."""
    R = W.R
    ok = W.ok                  # columns known to hold no poison in any lane
    poisoned = None
    for c, name in ins.reads:
        if c in ok:
            continue
        C = R[c]
        if None not in C:
            ok.add(c)
            continue
        bad = [l for l in exe if C[l] is None]
        if not bad:
            continue
        if c in ins.lenient:
            continue
        if ins.pmode == "strict":
            l = bad[0]
            raise UninitializedRead(
                f"line {ins.line}: `{ins.text}` uses register {name}, which holds an undefined value "
                f"({W.origin(c, l, name)}), {W.thread_name(l)}")
        if poisoned is None:
            poisoned = {}
        for l in bad:
            poisoned.setdefault(l, (c, name))
    run_lanes = exe
    if poisoned:
        run_lanes = _poison_lanes(W, ins, exe, poisoned)
    try:
        if run_lanes:
            if active is None:
                ins.fn(W, run_lanes)
            else:
                ins.fn(W, run_lanes, active)
    except QwenGPUError as e:
        raise type(e)(f"line {ins.line}: `{ins.text}`: {e}") from None
    if ins.may_poison:
        _note_new_poison(W, ins, run_lanes)


def _poison_lanes(W, ins, exe, poisoned):
    """Apply the poison rule to lanes with an undefined input; return the lanes still to run."""
    R = W.R
    mode = ins.pmode
    keep = []
    for l in exe:
        src = poisoned.get(l)
        if src is None:
            keep.append(l)
        elif mode == "select":
            pcol, acol, bcol = ins.pargs           # selp d, a, b, p: d = p ? a : b
            pv = R[pcol][l]
            if pv is not None:
                src = (acol, poisoned[l][1]) if pv else (bcol, poisoned[l][1])
                if R[src[0]][l] is not None:
                    keep.append(l)                 # the selected operand is defined
                    continue
                src = (src[0], _name_of(ins, src[0]))
            _poison_dsts(W, ins, l, src)
        elif mode in ("and", "or"):
            full = ins.pargs[0][1]
            for col, M in ins.pargs:
                v = R[col][l]
                if v is not None and v & M == (0 if mode == "and" else M):
                    R[ins.dsts[0]][l] = 0 if mode == "and" else full    # x & 0, x | ~0
                    break
            else:
                _poison_dsts(W, ins, l, src)
        else:
            _poison_dsts(W, ins, l, src)
    return keep


def _name_of(ins, col):
    return next((n for c, n in ins.reads if c == col), "an operand")


def _poison_dsts(W, ins, l, src):
    c, name = src
    why = W.porig.get((c, l)) or f"{name} was never written; read at line {ins.line}: `{ins.text}`"
    R = W.R
    for d in ins.dsts:
        R[d][l] = None
        W.porig[(d, l)] = why
        W.ok.discard(d)


def _note_new_poison(W, ins, lanes):
    """Record where poison made from clean inputs (div by zero, unwritten memory) came from."""
    R = W.R
    for d in ins.dsts:
        D = R[d]
        if None in D:
            W.ok.discard(d)
            for l in lanes:
                if D[l] is None:
                    W.porig[(d, l)] = f"line {ins.line}: `{ins.text}`: {ins.may_poison}"


def _warp_sync(W, ins, pc, active, exe):
    """A warp-synchronous instruction: wait for the threads the membermasks name, then run once."""
    others = [l for l in active if l not in exe]
    key = pc if ins.sync == "pc" else -1
    parked = W.parked.pop(key, ())
    if not exe and not parked:
        _advance(W, active, pc + 1)
        return []
    M = W.R[ins.mcol]
    for l in exe:
        if M[l] is None:
            raise UninitializedRead(
                f"line {ins.line}: `{ins.text}`: the membermask holds an undefined value "
                f"({W.origin(ins.mcol, l, 'the membermask')}), {W.thread_name(l)}")
    group = sorted(set(exe) | set(parked))
    ready = _ready(W, M, group)
    _materialize(W)
    st, pcs = W.st, W.pc
    for l in others:
        pcs[l] = pc + 1
    waiting = [l for l in group if l not in ready]
    if ready:
        _execute(W, ins, ready, ready)
        for l in ready:
            st[l] = RUN
            pcs[l] += 1                # each thread's own bar.warp.sync
    for l in waiting:
        st[l] = SYNC
    if waiting:
        W.parked[key] = waiting
    _set_run(W)
    return ready


def _ready(W, M, group):
    """The largest subset of `group` whose membermasks name only threads in it or exited ones."""
    ready = list(group)
    while True:
        have = W.gone
        for l in ready:
            have |= 1 << l
        keep = [l for l in ready if not (M[l] & ~have)]
        if len(keep) == len(ready):
            return keep
        ready = keep


def _exit_threads(W, blk, exe, active, pc):
    _materialize(W)
    st = W.st
    for l in exe:
        st[l] = EXITED
        W.gone |= 1 << l
    blk.alive -= len(exe)
    blk.exited = True
    for l in active:
        if st[l] == RUN:
            W.pc[l] = pc + 1
    # threads waiting at a warp-synchronous instruction are not waiting for exited ones
    for key, lanes in list(W.parked.items()):
        del W.parked[key]
        for l in lanes:
            st[l] = RUN         # they execute the instruction again, now without the exited
    _set_run(W)


def _wake(W, state):
    """Every thread of warp W in `state` (a barrier's wait) runs again."""
    _materialize(W)
    st = W.st
    for l in range(32):
        if st[l] == state:
            st[l] = RUN
    _set_run(W)


def _release_barrier(blk):
    for V in blk.warps:
        _wake(V, BARRIER)
    blk.waiting = 0


def _release_warp_barrier(W):
    _wake(W, WBARRIER)
    W.wwait = 0
    W.wgen ^= 1


def _deadlock_message(blk, code):
    bx, by, bz = blk.index
    parts = []
    for V in blk.warps:
        for key, lanes in V.parked.items():
            l = lanes[0]
            ins = code[V.pc[l]]
            need = 0
            for m in lanes:
                need |= V.R[ins.mcol][m] or 0
            have = V.gone
            for m in lanes:
                have |= 1 << m
            missing = [j for j in range(32) if (need & ~have) >> j & 1]
            where = []
            for j in missing[:4]:
                s = V.st[j]
                what = (f"waits at the block barrier" if s == BARRIER else
                        f"waits at line {code[V.pc[j]].line}" if s == SYNC else "cannot run")
                where.append(f"lane {j} {what}")
            parts.append(f"warp {V.index}: {len(lanes)} thread(s) wait at line {ins.line} "
                         f"(`{ins.text}`) for lane(s) {missing} named in the membermask, which never "
                         f"arrive ({'; '.join(where)})")
        if V.wwait:
            parts.append(f"warp {V.index}: {V.wwait} thread(s) wait at the warp barrier")
    if blk.waiting:
        parts.append(f"{blk.waiting} thread(s) wait at the block barrier")
    return (f"block ({bx},{by},{bz}) deadlocked ({blk.waiting} threads waiting at the barrier, "
            f"{blk.alive} alive): " + "; ".join(parts))


def _flush(hasher, tbuf):
    """Hash the buffered step records as little-endian u32s and empty the buffer."""
    if sys.byteorder != "little":
        tbuf.byteswap()
    hasher.update(tbuf.tobytes())
    del tbuf[:]


def _advance(W, active, newpc):
    if W.conv:
        W.cpc = newpc
    else:
        pcs = W.pc
        for l in active:
            pcs[l] = newpc


def _materialize(W):
    """Leave converged mode: write the shared PC into every runnable thread's PC."""
    if W.conv:
        pcs = W.pc
        for l in W.run:
            pcs[l] = W.cpc
        W.conv = False


def _set_run(W):
    st = W.st
    W.run = [l for l in range(32) if st[l] == RUN]
    m = 0
    for l in W.run:
        m |= 1 << l
    W.runmask = m
    W.conv = False


def _special(name, tid, lane, warp, nwarps, block, grid, bidx):
    X, Y, _ = block
    comp = {"x": 0, "y": 1, "z": 2}
    if name.startswith("%tid."):
        return (tid % X, (tid // X) % Y, tid // (X * Y))[comp[name[-1]]]
    if name.startswith("%ntid."):
        return block[comp[name[-1]]]
    if name.startswith("%ctaid."):
        return bidx[comp[name[-1]]]
    if name.startswith("%nctaid."):
        return grid[comp[name[-1]]]
    if name == "%laneid":
        return lane
    if name == "%warpid":
        return warp
    if name == "%nwarpid":
        return nwarps
    if name in ("%smid", "%gridid"):
        return 0
    if name == "%nsmid":
        return 1
    lt = (1 << lane) - 1
    return {"%lanemask_eq": 1 << lane, "%lanemask_lt": lt, "%lanemask_le": lt | (1 << lane),
            "%lanemask_gt": 0xFFFFFFFF & ~(lt | (1 << lane)), "%lanemask_ge": 0xFFFFFFFF & ~lt}[name]
