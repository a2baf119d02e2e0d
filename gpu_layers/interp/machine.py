"""The reference SIMT machine: one kernel launch, executed deterministically.

Decisions (the definition of the machine; the compiled model is checked against this):

* Threads. Grid and block are up to 3D. Thread and block ids are linearised x fastest
  (id = x + X*(y + Y*z)). A warp is 32 consecutive linear thread ids of one block; the last warp
  of a block may be partial (its missing lanes never exist).
* Order. Blocks run one after another in linear block order, each to completion. Within a block
  the warps are scheduled round-robin (warp 0, 1, ..., one warp-instruction each per turn,
  skipping warps with nothing runnable). Everything is deterministic.
* Reconvergence (min-PC). Each thread has its own PC. A warp executes the instruction at the
  lowest PC among its runnable threads, with every runnable thread at that PC active. Exited
  threads and threads waiting at a barrier are not runnable. Guards (@p / @!p) then select which
  active threads execute; a branch sends executing threads to the target and the others on.
* Barriers. `bar.sync 0` / `barrier.sync 0` (and `bar.sync 0, N` only with N == block size) is
  block-wide: a thread that executes it waits; when every non-exited thread of the block waits,
  all are released.
* Machine lanes. `lanes` (a divisor of 32, default 4) is the lane count of the compiled machine:
  a warp-instruction's active threads are issued in groups of `lanes` consecutive lane ids,
  skipping groups without an active thread. Results never depend on `lanes`; `lane_issues`
  counts the groups, `steps` the warp-instructions.
* Trace. Each step is (block, warp, pc, active mask); `fingerprint` is the sha256 over all steps
  (each packed little-endian as 4 x u32), `trace` the list itself when asked for.
* State. Registers hold raw bits of their declared width; reading one never written raises
  UninitializedRead naming the register, the line and the thread. Memory is byte-addressed with
  per-byte initialised bits (see memory.py for the address map). Out-of-range or misaligned
  accesses raise OutOfBounds; more than `step_budget` steps raise StepBudgetExceeded.
* Issue groups are formed from the threads at the warp's PC (before the guard is evaluated).
* Uninitialised registers (strict rule). A thread that executes an instruction (its guard, if
  any, holds) must have written every register the instruction reads, plain copies (`mov`) and
  stores included; threads whose guard is false read nothing. nvcc's PTX for all 43 gpu-truth
  kernels satisfies this. A guard predicate itself must have been written by every thread at
  that PC.
* Undefined behaviour raises ExecutionError instead of guessing: integer div/rem by zero and
  signed MIN / -1; shfl/vote/bar.warp.sync whose membermask names a thread that does not execute
  it (or executed by a thread outside its own mask); a shfl reading a non-participating lane;
  cvta.to.shared/local of an address outside that window; `bar.sync 0, N` with N != block size.
* Launch limits (LaunchError): block dims <= (1024, 1024, 64) and <= 1024 threads per block;
  grid dims <= (2^31-1, 65535, 65535) and at most 2^20 threads per launch; shared memory
  (static + dynamic) <= 48 KiB; the block must respect the kernel's .maxntid / .reqntid;
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
from gpu_layers.interp.decode import Program
from gpu_layers.interp.memory import GlobalMemory, Region
from gpu_layers.ptx.ir import Kernel, Module
from gpu_layers.ptx.validator import validate

DEFAULT_STEP_BUDGET = 2_000_000
MAX_SHARED_BYTES = 48 * 1024
MAX_THREADS_PER_BLOCK = 1024
MAX_THREADS_PER_LAUNCH = 1 << 20

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


@dataclass
class _Block:
    shared: Region
    alive: int
    waiting: int = 0
    exited: bool = False      # some thread exited since the live-warp list was last pruned
    warps: list = field(default_factory=list)


class Warp:
    __slots__ = ("ok", "R", "pc", "st", "run", "conv", "cpc", "runmask", "shared", "local", "glob",
                 "params", "index", "block_id", "tids", "block_dim", "block_idx", "block")

    def thread_name(self, l):
        bx, by, bz = self.block_idx
        t = self.tids[l]
        X, Y, _ = self.block_dim
        return f"(block ({bx},{by},{bz}), thread ({t % X},{(t // X) % Y},{t // (X * Y)}))"


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
    """Validate and decode a kernel once (cached by identity)."""
    key = id(kernel)
    hit = _PROGRAMS.get(key)
    if hit is not None and hit[0] is kernel:
        return hit[1]
    if kernel.module is not None:
        validate(kernel.module, kernel.name)
    else:
        validate(Module(kernels={kernel.name: kernel}), kernel.name)
    prog = Program(kernel)
    if len(_PROGRAMS) > 256:
        _PROGRAMS.clear()
    _PROGRAMS[key] = (kernel, prog)
    return prog


def launch(kernel, grid, block, args, dynamic_shared_bytes: int = 0, *, lanes: int = 4,
           step_budget: int | None = None, trace: bool = False) -> LaunchResult:
    """Run one launch of `kernel` (a Kernel, or a Module with one kernel).

    args, in .param order: a numpy array is a global buffer (its pointer is passed); a `Scalar`,
    Python int or float is a scalar. Buffers are copied; the results are in `.buffers`.
    """
    if isinstance(kernel, Module):
        kernel = kernel.kernel()
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
    budget = DEFAULT_STEP_BUDGET if step_budget is None else int(step_budget)

    for line, text in kernel.directives:      # .maxntid / .reqntid bound the block size
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

    prog = program_for(kernel)
    L = prog.layout
    shared_size = max(L.shared_static, L.dynamic_base + dynamic_shared_bytes) if dynamic_shared_bytes \
        else L.shared_static
    if shared_size > MAX_SHARED_BYTES:
        raise LaunchError(f"kernel needs {shared_size} bytes of shared memory; at most {MAX_SHARED_BYTES}")

    # arguments -> param space and global buffers
    params = kernel.params
    if len(args) != len(params):
        raise LaunchError(f"kernel {kernel.name} takes {len(params)} arguments, got {len(args)}")
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
            base = glob.add(p.name, arr.tobytes())
            pbytes[off:off + 8] = base.to_bytes(8, "little")
            buf_regions.append((i, arr.dtype, len(arr), glob.regions[-1]))
        else:
            pbytes[off:off + size] = _pack_scalar(p, a, i)
    param_region = Region("kernel parameters", 0, len(pbytes), bytes(pbytes))

    code = prog.code
    ncols = len(prog.colnames)
    constcols = {c: tuple([v] * 32) for c, v in prog.constcols.items()}
    mutable_cols = list(range(prog.nregs)) + prog.scratch
    group_cache: dict = {}
    ngroups = 32 // lanes
    gmask = (1 << lanes) - 1

    steps = 0
    lane_issues = 0
    hasher = hashlib.sha256()
    tbuf = array("I")          # step records (block, warp, pc, mask), hashed as little-endian u32s
    trace_list = [] if trace else None
    nwarps = (nthreads + 31) // 32
    X, Y, Z = block

    for bid in range(nblocks):
        bidx = (bid % grid[0], (bid // grid[0]) % grid[1], bid // (grid[0] * grid[1]))
        shared = Region(f"shared memory (block {bidx})", 0, shared_size)
        blk = _Block(shared=shared, alive=nthreads)
        for w in range(nwarps):
            W = Warp()
            n = min(32, nthreads - 32 * w)
            W.tids = [32 * w + l for l in range(32)]
            R = [None] * ncols
            fill = [None] * n + [0] * (32 - n)
            for c in mutable_cols:
                R[c] = list(fill)
            for c, col in constcols.items():
                R[c] = col
            for name, c in prog.specials.items():
                R[c] = tuple(_special(name, W.tids[l], l, w, nwarps, block, grid, bidx)
                             for l in range(32))
            W.R = R
            W.ok = set()
            W.pc = [0] * 32
            W.st = [0] * n + [2] * (32 - n)
            W.run = list(range(n))
            W.conv = True
            W.cpc = 0
            W.runmask = (1 << n) - 1
            W.shared = shared
            W.local = [Region(f"local memory of thread {W.tids[l]}", 0, L.local_size) for l in range(n)]
            W.glob = glob
            W.params = param_region
            W.index = w
            W.block_id = bid
            W.block_dim = block
            W.block_idx = bidx
            W.block = blk
            blk.warps.append(W)

        live = list(blk.warps)
        while live:
            progressed = False
            for W in live:
                run = W.run
                if not run:
                    continue
                progressed = True
                # ---- pick the instruction: lowest PC among runnable threads
                if W.conv:
                    pc = W.cpc
                    active = run
                    amask = W.runmask
                else:
                    pcs = W.pc
                    pc = min([pcs[l] for l in run])
                    active = [l for l in run if pcs[l] == pc]
                    if len(active) == len(run):
                        W.conv = True
                        W.cpc = pc
                        amask = W.runmask
                    else:
                        amask = 0
                        for l in active:
                            amask |= 1 << l
                steps += 1
                if steps > budget:
                    raise StepBudgetExceeded(
                        f"the launch ran more than {budget} warp-instruction steps (block {bidx}, "
                        f"warp {W.index}, line {code[pc].line}); an infinite loop?")
                g = group_cache.get(amask)
                if g is None:
                    g = sum(1 for k in range(ngroups) if (amask >> (k * lanes)) & gmask)
                    group_cache[amask] = g
                lane_issues += g
                tbuf.extend((bid, W.index, pc, amask))
                if len(tbuf) >= 1 << 18:
                    _flush(hasher, tbuf)
                if trace_list is not None:
                    trace_list.append((bid, W.index, pc, amask))
                ins = code[pc]
                R = W.R
                # ---- guard
                if ins.guard is not None:
                    G = R[ins.guard]
                    exe = []
                    neg = ins.gneg
                    for l in active:
                        gv = G[l]
                        if gv is None:
                            raise UninitializedRead(
                                f"line {ins.line}: `{ins.text}` reads predicate {ins.gname} before it "
                                f"is written, {W.thread_name(l)}")
                        if gv != neg:
                            exe.append(l)
                else:
                    exe = active
                # ---- execute
                kind = ins.kind
                if kind == "op" or kind == "warp":
                    if exe:
                        ok = W.ok       # columns known to be written in every lane
                        for c, name in ins.reads:
                            if c in ok:
                                continue
                            C = R[c]
                            if None in C:
                                for l in exe:
                                    if C[l] is None:
                                        raise UninitializedRead(
                                            f"line {ins.line}: `{ins.text}` reads register {name} before "
                                            f"it is written, {W.thread_name(l)}")
                            else:
                                ok.add(c)
                        try:
                            if kind == "op":
                                ins.fn(W, exe)
                            else:
                                ins.fn(W, exe, active)
                        except QwenGPUError as e:
                            raise type(e)(f"line {ins.line}: `{ins.text}`: {e}") from None
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
                        _materialize(W)
                        st = W.st
                        for l in exe:
                            st[l] = 2
                        blk.alive -= len(exe)
                        blk.exited = True
                        _set_run(W)
                        for l in active:
                            if st[l] == 0:
                                W.pc[l] = pc + 1
                    else:
                        _advance(W, active, pc + 1)
                elif kind == "bar":
                    if ins.target and ins.target != nthreads:
                        raise ExecutionError(
                            f"line {ins.line}: `{ins.text}`: a barrier for {ins.target} threads in a "
                            f"block of {nthreads} is not supported")
                    if exe:
                        _materialize(W)
                        st = W.st
                        for l in active:
                            W.pc[l] = pc + 1
                        for l in exe:
                            st[l] = 1
                        blk.waiting += len(exe)
                        _set_run(W)
                    else:
                        _advance(W, active, pc + 1)
                else:  # nop
                    _advance(W, active, pc + 1)
                # ---- barrier release
                if blk.waiting and blk.waiting == blk.alive:
                    for V in blk.warps:
                        _materialize(V)
                        st = V.st
                        for l in range(32):
                            if st[l] == 1:
                                st[l] = 0
                        _set_run(V)
                    blk.waiting = 0
            if not progressed:
                if blk.alive:
                    raise ExecutionError(f"block {bidx} deadlocked ({blk.waiting} threads waiting, "
                                         f"{blk.alive} alive)")
                break
            if blk.exited:
                live = [W for W in live if W.run or 1 in W.st]     # drop warps that are done
                blk.exited = False

    _flush(hasher, tbuf)
    buffers = [None] * len(args)
    for i, dtype, n, region in buf_regions:
        buffers[i] = np.frombuffer(bytes(region.data), dtype=dtype, count=n).copy()
    return LaunchResult(buffers=buffers, steps=steps, lane_issues=lane_issues,
                        fingerprint=hasher.hexdigest(), trace=trace_list)


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
    W.run = [l for l in range(32) if st[l] == 0]
    m = 0
    for l in W.run:
        m |= 1 << l
    W.runmask = m
    W.conv = False


def _special(name, tid, lane, warp, nwarps, block, grid, bidx):
    X, Y, Z = block
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
