"""The machine core: control unit, register file, operand fetch, ALU, memory unit and emitter in
one circuit. A kernel runs inside the model.

From the prompt (the program, the launch, global memory) the model generates the whole trace
itself: every control token (gpu_layers.machine.control), every `<g K L U S>` in full (which
lanes executed: the guard read from the register file; predicate results: the ALU's; undefined
lanes: the interpreter's poison rules, or a shared word never written; S: every executed lane
writes the same value), every `<d>` token (the ALU's result or the loaded word), the memory
unit's ticks `<mt J>` (gpu_layers.machine.memunit: one lane served per position), and after
`<halt>` the dump of the output buffers (`<xa A>` `<xc C X>` .. `<end>`), from which
memory_map.decode_dump reads the outputs. `launch_tokens` gives the oracle's whole sequence,
`run_core` makes the model generate it; warp-synchronous instructions' data is the one thing
the core does not compute (check_core teacher-forces it; they are refused by the register file
or lowering in practice).

Where a step executes (docs/machine.md section 2): group K' of an issue executes at the position
that predicts its `<g K' ..>` token, i.e. at the issue's `<wi>` or at the previous group's last
token. There the control unit's candidate groups name K' (an MLP stage turns them into the
register file's read address 32 (K' mod 4) + slot and the bank K' // 4), three read ports per
lane (operand a, operand b, the predicate q: the guard or selp's p) read the register file (each
port's copy in two banks of heads per lane, since a key head holds 128 slots and a warp's 8
groups x 32 registers are 256: only the addressed bank's read is enabled, a disabled read is an
exact zero, and the two reads add), the ALU of each lane computes,
and the results go into a latch (slot K'). The `<g>` token carries the executed lanes and the
predicate results down; the `<d>` tokens carry the value down (the register file commits them,
gpu_layers.machine.regfile). At `<g K>` and each `<d>` the emitter reads the latch at K and
picks the next nonzero chunk after the current one.

Operands are linear in what the layers read, so no stage selects them: a register read is gated
by its read enable (0 when the operand is not a register), the instruction's immediate and the
special registers (%tid.x = 4 K' + lane, %ctaid.x) are gated by an MLP stage that runs in the
same layer as the control unit's last one.

Prompt, per machine instruction P (gpu_layers.machine.datapath_program gives the fields):

  <pa P> <pc ..> <pd ..>   control word, destination (the control unit, the register file)
  <po OP wW DST>           ALU operation (alu.ALU_OPS) and width; DST none | pred | data;
  <po mem DST>             a memory instruction (no ALU operation); <po none>: control
  <pm ..>                  the memory instruction word (memory_map; <pm none> otherwise)
  <ps A B>                 operand codes: register slot 0..31, none, imm, tid, ctaid (a memory
                           instruction: A the address register, B a store's value register)
  <pq Q G N> / <pq none>   the predicate register read (slot Q), G = 1: it is the guard, N: negated
  <pi C X>                 chunk C (11 bits) of the immediate (zero chunks absent)
  <pe>                     the instruction's fields are complete: commits the immediate

then memory_map.prompt_tokens: `<nw N>` and the nonzero words of the buffers. The program is
three banked memories at the address `<pa>` left, read at the current PC (`cinst`, written at
`<wi>`): `pctl` (control word, destination, ps, pq: written at `<pq>`, read in layer 1, where the
control unit's issue and the register file's group state take it), `pop` (po and pm: written at
`<pm>`) and `imm` (at `<pe>`); a field whose token comes before its memory's write waits in a
one-slot register (`hold_pc`, `hold_pd`, `hold_ps`, `hold_po`, the immediate's chunks), reset at
`<pa>`. Seven memories of 8 banks were 56 heads; three of 15 banks are 45 (docs/machine.md §33),
each read enabled by the current PC's one-hot bank (`cbank`) into one field (§34).

Scope (`machine_kernel` prepares a PTX kernel and its launch: flattened to 1-D, lowered, in
blocks of one warp so that vectors, sub-word accesses and atomics are scalar word accesses,
allocated): blocks of up to 128 threads, four warps of 8 lane groups taking turns by the
interpreter's round robin (the control unit's `<w W H G>` before each `<wi W P H>`; the register
file in 4 x 2 banks per lane and port, bank 2 W + K // 4; %tid.x = 32 W + 4 K' + lane; the
warp of a pending group is kept with its state, since an issue's last group commits at the next
issue's `<wi>`, and nothing executes at `<w>`; warp exchanges wait at the machine's warp
barrier, `<pc wbar>`), programs of up to 1,920 machine
instructions (every program memory in 15 banks of 128: the 15 memories one layer holds, since
the control word is read in layer 1), up to 32 register-file slots per thread
(registers of different widths share slots past 32 machine registers: regalloc.allocate's joint
allocation), what the datapath computes (a form it does not, e.g. a saturating cvt, is refused
by name), the memory unit v0's accesses (memory_map); everything else is refused by name.

For Qwen3.5-2B's shapes: 24 layers, W 15,625, 130,569 tokens (W 30,229 before the banks of a
memory shared one read field, docs/machine.md §34; 27,579 and 121,609 tokens with 1,024 PCs; the
register file's read ports grow by a head per lane, bank and port, each head placed on its own,
and 16 KB of global memory takes 32 heads). The dense stock model would need about 59 GB in fp32: `build_core_fast` compiles layer by layer into the fast executor (its
vocabulary kept sparse: about 10 GB at peak); scripts/machine_core.py runs kernels in it and
gpu_layers.machine.inspect_state.core_registers reads the register file out of its state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpu_layers.craft import blocks as B
from gpu_layers.craft.assemble import compile_circuit
from gpu_layers.craft.blocks.alu import ALU_OPS, ALU_WIDTHS, PRED_OPS, alu
from gpu_layers.craft.blocks.base import MLPBuilder
from gpu_layers.craft.circuit import Circuit
from gpu_layers.craft.fields import Field, Lin, bits, dual, lsum, onehot, rail3
from gpu_layers.craft.machine_model import CompiledCircuit
from gpu_layers.errors import QwenGPUError
from gpu_layers.machine import control as C
from gpu_layers.machine import memory_map as MM
from gpu_layers.machine import memunit as MU
from gpu_layers.machine import regfile as R
from gpu_layers.machine.protocol import COPY, FILL, FILL_FREE, FILL_X0, lane_masks
from gpu_layers.ptx.ir import TYPE_BITS

LANES = R.LANES
GROUPS = 8                     # lane groups of 4: one whole warp of 32 threads
WARPS = 4                      # warps of a block (round robin, the control unit's <w W H G>)
THREADS = LANES * GROUPS * WARPS
GBITS = GROUPS.bit_length() - 1
WBITS_W = (WARPS - 1).bit_length()     # bits of a warp index
PCS = C.MAX_PCS               # machine PCs < 1,920: every program memory in 15 banks of 128
KINDS = ("nt", "nb", "pa", "pc", "pd", "po", "ps", "pq", "pi", "pe", "blk", "w", "wi", "g", "d", "halt") + MU.KINDS
SRC_NONE, SRC_IMM, SRC_TID, SRC_CTAID = 32, 33, 34, 35
SRC_NAMES = {SRC_NONE: "none", SRC_IMM: "imm", SRC_TID: "tid", SRC_CTAID: "ctaid"}
MODES = ("prop", "select", "and", "or")      # the interpreter's poison rules an ALU op can have
DSTS = ("none", "pred", "data")
# po word: op one-hot (36), width one-hot (3), mode one-hot (4), or-threshold (7 bits), dst (2)
PO_OP, PO_W, PO_MODE, PO_ORW, PO_DST = 0, len(ALU_OPS), len(ALU_OPS) + 3, len(ALU_OPS) + 7, len(ALU_OPS) + 14
PO_BITS = PO_DST + 2
# ps word: slot a (5), slot b (5), a: reg imm tid ctaid, b: reg imm
PS_BITS = 16
# pq word: slot (5), read, guard, negated
PQ_BITS = 8
IMM_CHUNKS = 6
BIGM = 100.0
COPY_PAIRS = [(i, j) for j in range(1, LANES) for i in range(j)]   # (source, copying lane)
COPY_PIECE = 4                 # bits compared at a time by the S = 2 test (_copies_previous)


class CoreError(QwenGPUError, ValueError):
    """A kernel, program or stream outside what the machine core v0 runs."""


def _src_name(code: int) -> str:
    return SRC_NAMES.get(code, str(code))


def tok_po(op: str | None, width: int = 32, dst: str = "none") -> str:
    """<po OP wW DST>, <po mem DST> (a memory instruction: no ALU op) or <po none>."""
    if op == "mem":
        return f"<po mem {dst}>"
    return "<po none>" if op is None else f"<po {op} w{width} {dst}>"


def tok_ps(a: int, b: int) -> str:
    return f"<ps {_src_name(a)} {_src_name(b)}>"


def tok_pq(q: int | None, guard: bool = False, neg: bool = False) -> str:
    return "<pq none>" if q is None else f"<pq {q} {int(guard)} {int(neg)}>"


def tok_pm(kind: str | None, space: str = "global", size: int = 4) -> str:
    """<pm ld|st g|s 4|8>: a memory instruction (space, bytes) or <pm none>."""
    if kind is None:
        return "<pm none>"
    return f"<pm {'ld' if kind == 'load' else 'st'} {space[0]} {size}>"


def tok_g(k: int, states: int, u: int, s: int) -> str:
    """The protocol's <g K L U S> (L: 2 bits per lane, lane 3 first as in `describe`)."""
    return f"<g {k} " + " ".join(str((states >> (2 * j)) & 3) for j in reversed(range(LANES))) + f" {u:04b} {s}>"


def tok_d(j: int, c: int, x: int) -> str:
    return f"<d {j} {c} {x:03x}>"


def mode_of(op: str) -> str:
    return {"selp": "select", "and": "and", "or": "or", "pand": "and", "por": "or"}.get(op, "prop")


class _Word:
    """A 64-bit operand as linear forms (duck-types a Field for the ALU: .n, .bit, .name)."""

    def __init__(self, name: str, lins: list):
        self.name, self.n, self._l = name, len(lins), lins

    def bit(self, i: int) -> Lin:
        return self._l[i]


class _OneHot:
    """A one-hot code read from the program (duck-types an onehot Field: .enc, .n, .hot, .name)."""

    enc = "onehot"

    def __init__(self, name: str, lins: list):
        self.name, self.n, self._l = name, len(lins), lins

    def hot(self, k: int) -> Lin:
        return self._l[k]


@dataclass
class Core(CompiledCircuit):
    label: ClassVar[str] = "the machine core"
    token_error: ClassVar[type] = CoreError


def machine_kernel(kernel, grid, block, args=()):
    """A PTX kernel and its launch as the core runs them: (machine code, grid, block).

    The launch is made one-dimensional (gpu_layers.machine.flatten: the datapath has only the
    linear thread and block indices) with its shape registers as immediates, the kernel lowered
    (blocks of one warp: memory instructions as scalar word accesses, gpu_layers.machine.
    word_memory; shuffles and votes through shared memory, gpu_layers.machine.warp_exchange: their
    sequences are atomic only when no other warp runs between their steps) and register-allocated;
    when that needs more register-file slots than there are, the fewest invariants live across
    float routines' calls that make it fit (constants, parameters, %tid.x and short pure chains of
    them, the cheapest first) are computed again after those calls or before their readers
    (gpu_layers.machine.remat) and the kernel allocated again. The machine's multiply and divide
    steps are written out (lower's straight_steps) and the float routines get their fast entries
    (gpu_layers.machine.fast_paths), written out at their sites (lower's inline_floats) unless
    the code is then longer than the program memory (PCS), else called;
    then the fast entries go (the largest first), then the steps loop, and if it is still
    longer, the float conversions become calls of routines with the mode in a register
    (gpu_layers.machine.cvt_routines): lower.LOWERINGS. Refused by name: more than THREADS threads per block; in a block of several warps,
    what the one-warp lowering makes a sequence (atomics, sub-word, vector and local accesses,
    shuffles, votes); sub-word accesses with a buffer that is not whole 32-bit words (a byte's
    word would be out of range where the byte is not)."""
    from gpu_layers.machine.flatten import flatten_launch, launch_constants
    from gpu_layers.machine.lower import LOWERINGS, lower
    from gpu_layers.machine.regalloc import allocate

    flat, grid, block = flatten_launch(kernel, grid, block)
    flat = launch_constants(flat, grid, block)
    _check_threads(block[0])                  # before the one-warp lowering, which needs it
    sub = next((ins for ins in flat.instructions if ins.opcode in ("ld", "st", "atom", "red")
                and "param" not in ins.modifiers and ins.types and TYPE_BITS.get(ins.types[-1], 32) < 32),
               None)
    odd = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.nbytes % 4]
    if sub is not None and odd:
        raise CoreError(f"line {sub.line}: `{sub}` is a sub-word access and buffer argument {odd[0]} "
                        f"has {args[odd[0]].nbytes} bytes: the machine reads bytes in whole 32-bit words, "
                        "so it needs buffers of whole words")
    warps = -(-block[0] // 32)
    if warps > 1:
        _check_several_warps(flat, block[0])
    for opts in LOWERINGS:                    # the first that fits the program memory, allocated
        code = lower(flat, one_warp=True, warps=warps, threads=block[0], **opts)
        if len(code.instructions) - _plain_moves(code) > PCS and opts is not LOWERINGS[-1]:
            continue                          # (allocation drops at most the register copies)
        mk, _ = allocate(code)
        if _slots_needed(mk) > R.REGS:        # invariants computed again after calls instead
            mk = _fit_registers(code, mk)
        if len(mk.instructions) <= PCS:
            break
    return mk, grid, block


def _fit_registers(code, mk):
    """The allocated kernel with the fewest of remat.candidates (the cheapest first) computed
    again, each where it takes fewer copies, that fits the register file (binary search on how
    many: more copies never need more slots here, and each copy is a step); `mk` when none does."""
    from gpu_layers.machine.regalloc import allocate
    from gpu_layers.machine.remat import candidates, rematerialize

    cands = candidates(code)
    lo, hi, best = 1, len(cands), None
    while lo <= hi:
        n = (lo + hi) // 2
        k, _ = allocate(rematerialize(code, 4, dict(cands[:n]))[0])
        if _slots_needed(k) <= R.REGS:
            best, hi = k, n - 1
        else:
            lo = n + 1
    return best if best is not None else mk


def _check_several_warps(kernel, nthreads: int):
    """Refuse, by name, what the lowering makes a sequence of steps that would not stay exact
    with other warps' steps between them (word_memory.several_warps_problem; warp exchanges wait
    with the machine's warp barrier and stay exact)."""
    from gpu_layers.machine import word_memory

    regbits = {n: TYPE_BITS[d.type] for d in kernel.regs for n in d.names}
    for ins in kernel.instructions:
        why = word_memory.several_warps_problem(ins, regbits)
        if why is not None:
            raise CoreError(
                f"line {ins.line}: `{ins}` in a block of {nthreads} threads ({-(-nthreads // 32)} warps): "
                f"{why}; the core runs it in blocks of one warp (up to 32 threads)")


def _plain_moves(code) -> int:
    """How many instructions of lowered code are register copies (`mov %a, %b`): the most that
    allocation can drop (regalloc.drop_self_moves), so code longer than the program memory by
    more than these cannot fit."""
    from gpu_layers.machine.regalloc import is_register_copy

    return sum(map(is_register_copy, code.instructions))


def _slots_needed(mk) -> int:
    from gpu_layers.machine.regalloc import register_slots

    return 1 + max(register_slots(mk, R.REGS).values(), default=-1)


def _check_threads(n: int):
    if not 1 <= n <= THREADS:
        raise CoreError(f"{n} threads per block: the machine core v0 runs up to {THREADS}")


def prompt_tokens(kernel, grid, block, args, outputs=(), dynamic_shared_bytes=0) -> list[str]:
    """The launch, the whole program and global memory as the core's prompt (see the module
    docstring). `kernel`: lowered, register-allocated machine code; `outputs`: the buffer arguments
    the dump returns. Refused by name (CoreError, or the register file's / datapath program's /
    memory map's errors): more than 32 threads per block, an instruction that reads both a guard
    and selp's predicate, what the pieces refuse."""
    return _prompt(kernel, grid, block, args, outputs, dynamic_shared_bytes)[0]


def _prompt(kernel, grid, block, args, outputs, dynamic_shared_bytes):
    from gpu_layers.interp.machine import _shared_size, program_for
    from gpu_layers.machine.datapath_program import datapath_problems, datapath_program

    nthreads = block[0] * block[1] * block[2]
    nblocks = grid[0] * grid[1] * grid[2]
    _check_threads(nthreads)
    if not 1 <= nblocks <= C.MAX_BLOCKS:
        raise CoreError(f"{nblocks} blocks: the machine core v0 runs up to {C.MAX_BLOCKS}")
    prog = program_for(kernel)
    code = prog.code
    rp = R.program_of(kernel, pcs=PCS)
    mops = MM.memory_ops(kernel)
    shared_bytes = _shared_size(prog, dynamic_shared_bytes)
    MM.check_shared(shared_bytes)
    lay = MM.layout(args, list(outputs))
    ops = datapath_program(kernel, rp.slots, grid, block, args, lay.offsets)
    for ins, op in zip(code, ops):
        if op.kind == "alu_unsupported":            # never run a form whose value the ALU lacks
            why = next((m for m in datapath_problems(kernel, rp.slots, grid, block, args)
                        if m.startswith(f"line {ins.line}:")), f"line {ins.line}: `{ins.text}`")
            raise CoreError(f"{why}: the machine core's ALU does not compute it")
    out = [f"<nt {nthreads}>", f"<nb {nblocks}>"]
    for p, (ins, op) in enumerate(zip(code, ops)):
        dest = rp.dests[p]
        dst = "none" if dest is None else "pred" if dest[1] == 1 else "data"
        if op.guard is not None and op.p is not None:
            raise CoreError(f"line {ins.line}: `{ins.text}` reads a guard and selp's predicate: the "
                            "core v0 has one predicate read port")
        if op.guard is not None:
            pq = tok_pq(op.guard, True, op.gneg)
        else:
            pq = tok_pq(op.p)
        m = mops.get(p)
        if m is not None:                  # the address: base + immediate (memunit.address_bits)
            a = SRC_NONE if m.base is None else rp.slots[m.base]
            po, imm = tok_po("mem", dst=dst), m.imm
            b = rp.slots[m.value] if m.kind == "store" else SRC_NONE     # port b reads a store's value
            ps, pm = tok_ps(a, b), tok_pm(m.kind, m.space, m.size)
        else:
            if op.b in (SRC_TID, SRC_CTAID):
                raise CoreError(f"line {ins.line}: `{ins.text}` reads {SRC_NAMES[op.b]} as its second "
                                "operand: the core's operand b is a register or the immediate")
            po = tok_po(op.op, op.width, dst) if op.op is not None else tok_po(None)
            ps, imm, pm = tok_ps(op.a, op.b), op.imm, tok_pm(None)
        out += [f"<pa {p}>", C.control_word(ins, nthreads, p in kernel.holds),
                R.tok_pd(*dest) if dest else R.tok_pd(None),
                po, ps, pq, pm]
        out += [f"<pi {k} {x:03x}>" for k, x in enumerate(_imm_chunks(imm)) if x]
        out.append("<pe>")
    return out + MM.prompt_tokens(args, lay, shared_bytes), lay, mops, shared_bytes


def launch_tokens(kernel, grid, block, args, outputs=(), dynamic_shared_bytes=0, step_budget=500_000):
    """The core's whole sequence for one launch, from the oracle: (prompt, stream, layout, trace).
    The stream is the protocol's (gpu_layers.machine.protocol.trace_tokens, the launch placed by
    the memory map) with each memory group's ticks `<mt J>` before its `<g>`, then the dump; or,
    when a lane's access breaks the memory map's bounds (memory_map.access_ok), the trace up to
    that lane's service and `<fault>`."""
    from gpu_layers.interp.machine import program_for
    from gpu_layers.machine.protocol import trace_tokens

    prompt, lay, mops, shared_bytes = _prompt(kernel, grid, block, args, outputs, dynamic_shared_bytes)
    col = program_for(kernel).regcol

    def fault(W, pc, exe):
        m = mops.get(pc)
        if m is None:
            return None
        base = W.R[col[m.base]] if m.base is not None else None
        return next((l for l in sorted(exe) if not MM.access_ok(m, 0 if base is None else base[l], lay,
                                                                shared_bytes // 4)), None)

    tr = trace_tokens(kernel, grid, block, args, dynamic_shared_bytes, outputs=[], step_budget=step_budget,
                      buffer_offsets=lay.offsets, fault=fault, copies=True, fills=True,
                      lane_copies=True)
    toks, pc = [], None
    for t in tr.tokens:
        if t[0] == "fault":                     # the faulting lane's ticks, then <fault>: no dump
            _, k, j, executed = t
            return prompt, stream_tokens(toks) + [f"<mt {x}>" for x in MM.tick_lanes(executed) if x <= j] \
                + ["<fault>"], lay, tr
        if t[0] == "wi":
            pc = t[2]
        if t[0] == "g" and pc in mops:
            executed = [j for j in range(LANES) if lane_masks(t[2])[1] >> j & 1]
            toks += [("mt", j) for j in MM.tick_lanes(executed)]
        toks.append(t)
    stream = stream_tokens(toks)
    dumped = {i: tr.buffers[i] for i in lay.offsets}
    return prompt, stream + MM.dump_tokens(dumped, lay), lay, tr


def _imm_chunks(x: int) -> list[int]:
    return [(x >> (R.PAYLOAD * k)) & ((1 << R.chunk_bits(k)) - 1) for k in range(IMM_CHUNKS)]


def stream_tokens(tokens) -> list[str]:
    """The oracle's stream (gpu_layers.machine.protocol tuples) as the core's tokens; the dump
    section is dropped (the memory unit's)."""
    out = []
    for t in tokens:
        k = t[0]
        if k == "blk":
            out.append(f"<blk {t[1]}>")
        elif k == "w":
            out.append(f"<w {t[1]} {t[2]} {t[3]}>")
        elif k == "wi":
            out.append(f"<wi {t[1]} {t[2]} {t[3]}>")
        elif k == "g":
            out.append(tok_g(*t[1:]))
        elif k == "d":
            out.append(tok_d(*t[1:]))
        elif k == "mt":
            out.append(f"<mt {t[1]}>")
        elif k == "halt":
            out.append("<halt>")
        elif k in ("dump", "x"):
            continue
        else:
            raise CoreError(f"token kind {k!r} is not part of the machine core v0's stream")
    return out


def _first_terms(cand, G: int, ks, extra: Lin | None = None, need: float = 0.0):
    """Exclusive steps [group k is the first candidate (and extra)] for k in ks."""
    out = []
    for k in ks:
        t = cand.bit(k) - lsum(cand.bit(kk) for kk in range(k)) - 0.5
        if extra is not None:
            t = t + extra - need
        out.append((t, 0.5, 1.0))
    return out


def build_core(config) -> Core:
    """Compile the machine core v0 for a Qwen3.5 text config (or shapes dict; Qwen3.5-2B's).
    Needs the memory of the dense weights (about 103 GB at W 27,579 and 24 layers in fp32)."""
    c = core_circuit()
    comp = compile_circuit(c, config)
    ids = {n: i for i, n in enumerate(comp.machine.token_names)}
    return Core(comp, ids)


def build_core_fast(config, check: bool = True):
    """The core compiled straight into the fast executor (gpu_layers.craft.assemble.compile_fast:
    layer by layer, so it fits where the dense model does not). Returns (FastMachine, {name: id})."""
    from gpu_layers.craft.assemble import compile_fast

    fm, names = compile_fast(core_circuit(), config, check=check)
    return fm, {n: i for i, n in enumerate(names)}


DATA_UNKNOWN = ("warp", "alu_unsupported")     # data the core does not compute (teacher-forced)


def run_core(fm, ids: dict, prompt: list[str], want: list[str] | None = None, max_tokens: int = 2_000_000,
             progress=None):
    """Run a launch inside the model: feed the prompt, then the model's own greedy token at every
    step, until it emits <end> (or <fault>: an access outside the memory map). Returns (generated
    tokens, index of the first token that differs
    from `want` (the oracle's stream) or None). With `want`, the run stops at the first difference.
    progress(n) is called every 1,000 generated tokens."""
    inv = {i: n for n, i in ids.items()}
    st = fm.new_state()
    nxt = None
    for n in prompt:
        nxt = fm.step(st, ids[n])
    out = []
    while len(out) < max_tokens:
        tok = inv[nxt]
        out.append(tok)
        if want is not None and (len(out) > len(want) or tok != want[len(out) - 1]):
            return out, len(out) - 1
        if tok in ("<end>", "<fault>"):
            return out, None
        if progress is not None and len(out) % 1000 == 0:
            progress(len(out))
        nxt = fm.step(st, ids[tok])
    raise CoreError(f"the launch did not end within {max_tokens} tokens")


def check_core(fm, ids: dict, names: list[str], n_prompt: int, kinds: list[str]):
    """Run the stream `names` (prompt + oracle stream) through the fast executor and compare, at
    every position from the last prompt token on, the model's next token with the oracle's: the
    argmax over the whole vocabulary. Where the current instruction's data comes from memory
    (kinds[P] in DATA_UNKNOWN) its <d> tokens are skipped and its <g> is compared among the <g>
    tokens with the oracle's U and S. Returns (checked, skipped, [(position, want, got)])."""
    import numpy as np

    inv = {i: n for n, i in ids.items()}
    g_by_us = {}
    for n, i in ids.items():
        if n.startswith("<g "):
            g_by_us.setdefault(tuple(n[1:-1].split()[-2:]), []).append(i)
    st = fm.new_state()
    pc, checked, skipped, bad = None, 0, 0, []
    for p, n in enumerate(names[:-1]):
        if n.startswith("<wi "):
            pc = int(n.split()[2])
        row = np.asarray(fm.step(st, ids[n], logits=True))
        if p < n_prompt - 1:
            continue
        want = names[p + 1]
        unknown = pc is not None and kinds[pc] in DATA_UNKNOWN
        if unknown and want.startswith("<d "):
            skipped += 1
            continue
        if unknown and want.startswith("<g "):
            cand = np.array(g_by_us[tuple(want[1:-1].split()[-2:])])
            got = int(cand[np.argmax(row[cand])])
        else:
            got = int(np.argmax(row))
        checked += 1
        if got != ids[want]:
            bad.append((p, want, inv[got]))
    return checked, skipped, bad


def core_circuit() -> Circuit:
    """The core's circuit, not compiled (the scheduler and validator run on it cheaply)."""
    c = Circuit("core_v0")
    c.recycle = True            # dead fields' dims carry later fields (craft/recycle.py): W 15,625 -> 5,650
    c.layout.add_ballast()      # norms 1,000x less moved by fp32's errors in large gates' outputs (section 37)
    # ---- prompt inputs and the program ----------------------------------------------------------
    po_in = c.input(bits("po_in", PO_BITS), default=0)
    ps_in = c.input(bits("ps_in", PS_BITS), default=0)
    pq_in = c.input(bits("pq_in", PQ_BITS), default=0)
    preg = c.input(bits("preg", 5), default=0)                             # <pd R bW>: R
    pwf = c.input(bits("pwf", 1), default=0)                               # ... 1 (writes a register)
    pic = c.input(onehot("pic", IMM_CHUNKS + 1), default=IMM_CHUNKS)      # <pi C X>: C
    pix9 = c.input(bits("pix9", 9), default=0)                             # <pi C X>: X bits 0..8
    pix2 = c.input(bits("pix2", 2), default=0)                             # ... bits 9, 10
    blkb = c.input(bits("blkb", C.BBITS), default=0)                       # <blk B>: B
    prog = {}

    def control_program(addr, pa, hot, cword):
        """The program word every unit reads first, in layer 1 at the current PC (`cinst`,
        written at <wi>): the control word, the destination, the source slots (ps, pq); written
        at <pq>, the earlier tokens' parts held in one-slot registers until then."""
        hib = pa[1].n
        prog["cinst"] = (B.memory(c, "cinst_lo", 1, 7, 0, 0, pa[0], we=hot["wi"]).outputs[0],
                         B.memory(c, "cinst_hi", 1, hib, 0, 0, pa[1], we=hot["wi"]).outputs[0])
        # the current PC's bank as a one-hot: each program bank's read is enabled by its entry, so
        # the 15 banks of a program memory share one read field (W: 2 x wbits, not 30 x wbits)
        prog["rd"] = (prog["cinst"][0], B.bank_select(c, "cbank", prog["cinst"][1]).outputs[0])
        held = [B.memory(c, f"hold_{k}", 1, n, 0, 0, [d], we=hot[k], reset=hot["pa"]).outputs[0]
                for k, n, d in (("pc", sum(x.n for x in cword), cword), ("pd", 6, [preg, pwf]),
                                ("ps", PS_BITS, ps_in))]
        cw, prog["dest"], prog["ps"], prog["pq"] = B.banked_memory(
            c, "pctl", PCS, held[0].n + 6 + PS_BITS + PQ_BITS, addr, prog["rd"], held + [pq_in], we=hot["pq"],
            parts=[("pcw", held[0].n), ("pdst", 6), ("ps", PS_BITS), ("pq", PQ_BITS)]).outputs
        prog["addr"] = addr
        return cw

    f = C.control_layers(c, THREADS, KINDS, pcs=PCS, program=control_program)
    hot = dict(f.hot)
    hot["end"] = hot["halt"]
    r = R.regfile_layers(c, hot, f.pa_lo, f.pa_hi, groups=GROUPS, pcs=PCS, warps=WARPS, wi_warp=f.ww,
                         addr=f.addr, cinst=prog["cinst"], dest=prog["dest"])
    G = f.G
    assert G == GROUPS, (G, GROUPS)

    # the datapath's words at the same address: the operation and the memory access (written at
    # <pm>, the operation held since <po>), the immediate (at <pe>, its chunks held since <pi>)
    waddr, raddr = prog["addr"], prog["rd"]
    ps, pq = prog["ps"], prog["pq"]
    ibuf = [B.memory(c, f"ibuf{k}", 1, R.chunk_bits(k), 0, 0,
                     [[pix9, pix2] if R.chunk_bits(k) == R.PAYLOAD else [pix9]],
                     we=hot["pi"] + pic.hot(k) - 1.0, reset=hot["pa"]).outputs[0] for k in range(IMM_CHUNKS)]
    hold_po = B.memory(c, "hold_po", 1, PO_BITS, 0, 0, po_in, we=hot["po"], reset=hot["pa"]).outputs[0]

    def op_program(pm_in):
        outs = B.banked_memory(c, "pop", PCS, PO_BITS + MU.PM_BITS, waddr, raddr, [hold_po, pm_in], we=hot["pm"],
                               parts=[("po", PO_BITS), ("pm", MU.PM_BITS)]).outputs
        prog["po"] = outs[0]
        return outs[1]

    mu = MU.prompt_side(c, hot, waddr, raddr, pcs=PCS, program=op_program)
    po = prog["po"]
    imm = B.banked_memory(c, "imm", PCS, 64, waddr, raddr, ibuf, we=hot["pe"]).outputs[0]
    ctaid = B.memory(c, "ctaid", 1, C.BBITS, 0, 0, blkb, we=hot["blk"]).outputs[0]
    a_reg, a_imm, a_tid, a_cta, b_reg, b_imm = (ps.bit(10 + i) for i in range(6))
    q_reg, q_guard, q_neg = pq.bit(5), pq.bit(6), pq.bit(7)
    opv = _OneHot("op", [po.bit(PO_OP + k) for k in range(len(ALU_OPS))])
    wv = _OneHot("width", [po.bit(PO_W + k) for k in range(3)])
    mode = {m: po.bit(PO_MODE + i) for i, m in enumerate(MODES)}
    orw = lsum((1 << i) * po.bit(PO_ORW + i) for i in range(7))
    dst_pred, dst_data = po.bit(PO_DST), po.bit(PO_DST + 1)

    # ---- the executing group K' (the control unit's first candidate): read addresses, issued
    # lanes, the gated immediate and special registers ---------------------------------------------
    cand, act = f.cand, f.act
    nk = c.new_field(bits("nk", GBITS))
    has_next = c.new_field(dual("has_next", 1))
    ra = {p: c.new_field(bits(f"ra_{p}", 7)) for p in "abq"}          # 32 (K' mod 4) + slot
    iss = c.new_field(dual("iss", LANES))
    imm_a = c.new_field(dual("imm_a", 64))
    imm_b = c.new_field(dual("imm_b", 64))
    tidk = c.new_field(dual("tidk", GBITS + WBITS_W))      # %tid.x's bits 2.. (K', then the warp)
    cta = c.new_field(dual("cta", C.BBITS))
    gbanks = GROUPS // R.GROUPS              # register-file banks of a warp: K' // 4 (a key head holds 128 slots)
    nrb = WARPS * gbanks                     # bank 2 W + K' // 4 (W: the issuing warp)
    wiss = f.wiss                            # the issue's warp (written at <wi>: current where K' executes)
    # read enables (exact-zero rails), one per bank: the operand is a register and K' is in the bank
    ren = {p: c.new_field(dual(f"re_{p}", nrb)) for p in "abq"}
    m = MLPBuilder(c, "execute_group")
    for p, flag in (("a", a_reg), ("b", b_reg), ("q", q_reg)):
        for rb in range(nrb):
            w, kb = divmod(rb, gbanks)
            wmatch = lsum(wiss[i] if (w >> i) & 1 else 1.0 - wiss[i] for i in range(WBITS_W))
            m.boolean(ren[p], rb, _first_terms(cand, G, [k for k in range(G) if k // R.GROUPS == kb],
                                               flag + wmatch, 1.0 + WBITS_W))
    for i in range(GBITS):
        ks = [k for k in range(G) if (k >> i) & 1]
        m.boolean(nk, i, _first_terms(cand, G, ks))
        m.boolean(tidk, i, _first_terms(cand, G, ks, 2.0 * a_tid, 2.0))
        if i < 2:
            for p in "abq":
                m.boolean(ra[p], 5 + i, _first_terms(cand, G, ks))
    for i in range(WBITS_W):
        m.threshold(tidk, GBITS + i, wiss[i] + a_tid - 1.5, 0.5)
    # nothing executes at <w W H G> (its lanes are another warp's, read for the warp picker: up to
    # all G of its groups can look like candidates there, so <w> outweighs them all)
    m.threshold(has_next, 0, lsum(cand.bit(k) for k in range(G)) + 4.0 * f.issue.present(0)
                - (G + 4.0) * hot["w"] - 4.5, 0.5)
    for p, base in (("a", 0), ("b", 5), ("q", None)):
        for i in range(5):
            m.threshold(ra[p], i, (pq.bit(i) if base is None else ps.bit(base + i)) - 0.5, 0.5)
    for j in range(LANES):
        m.boolean(iss, j, [(t + act.bit(LANES * k + j) - 1.0, mg, w)
                           for k, (t, mg, w) in enumerate(_first_terms(cand, G, range(G)))])
    for i in range(64):
        m.threshold(imm_a, i, imm.bit(i) + a_imm - 1.5, 0.5)
        m.threshold(imm_b, i, imm.bit(i) + b_imm - 1.5, 0.5)
    for i in range(C.BBITS):
        m.threshold(cta, i, ctaid.bit(i) + a_cta - 1.5, 0.5)
    m.build()

    # ---- operand fetch: three read ports per lane on copies of the register file; each copy in
    # banks of 4 groups (a head per lane and bank), read together: only the addressed bank's read
    # is enabled, and a disabled read is an exact zero, so the banks' reads add up, in one shared
    # read field per port and lane (`{port}_{lane}_r`: W grows by a lane's word, not a bank's). Each
    # head is a memory of its own (`{port}{bank}_{lane}`), so the scheduler packs 15 a layer.
    def port(name, addr, wbits, data, re: Field):
        reads = [c.new_field(rail3(f"{name}_{j}_r", wbits)) for j in range(LANES)]
        for rb in range(nrb):
            for j in range(LANES):
                B.memory(c, f"{name}{rb}_{j}", R.SLOTS, wbits, r.rf_addr, addr, [data[j]],
                         we=r.rf_we_bank[rb][j], blank=r.rf_blank[j], reset=hot["blk"],
                         re=re.bit(rb), out=[reads[j]])
        return reads

    rfa = port("rfa", ra["a"], R.WBITS, r.rf_data, ren["a"])
    rfb = port("rfb", ra["b"], R.WBITS, r.rf_data, ren["b"])
    rfq = port("rfq", ra["q"], R.PAYLOAD, [d[0] for d in r.rf_data], ren["q"])

    A, Bw, P = [], [], []
    for j in range(LANES):
        la = []
        for i in range(64):
            t = rfa[j].bit(i) + imm_a.bit(i)
            if i < 2 and (j >> i) & 1:
                t = t + a_tid
            if 2 <= i < 2 + GBITS + WBITS_W:
                t = t + tidk.bit(i - 2)
            if i < C.BBITS:
                t = t + cta.bit(i)
            la.append(t)
        A.append(_Word(f"a{j}", la))
        Bw.append(_Word(f"b{j}", [rfb[j].bit(i) + imm_b.bit(i) for i in range(64)]))
        P.append(_Word(f"p{j}", [rfq[j].bit(0)]))

    # ---- executed lanes and undefined results (the interpreter's poison rules) ------------------
    ex = c.new_field(dual("ex", LANES))
    und = c.new_field(dual("und", LANES))
    wl = orw
    m = MLPBuilder(c, "exec_poison")
    for j in range(LANES):
        qv = rfq[j].bit(0)
        # executed: three exclusive guard cases (no guard; guard true; negated guard false), each
        # a form that is 1 when its case holds and <= 0 otherwise
        exl = [iss.bit(j) - q_guard, iss.bit(j) + q_guard + qv - q_neg - 2.0,
               iss.bit(j) + q_guard - qv + q_neg - 2.0]
        m.boolean(ex, j, [(e - 0.5, 0.5, 1.0) for e in exl])
        pa = a_reg - rfa[j].present(0)
        pb = b_reg - rfb[j].present(0)
        pqp = q_reg - rfq[j].present(0)
        sa = lsum(A[j].bit(i) for i in range(64))
        sb = lsum(Bw[j].bit(i) for i in range(64))
        terms = []
        for e in exl:
            terms += [(BIGM * (mode["prop"] + e + pa) - 3 * BIGM + 0.5, 0.5, 1.0),
                      (BIGM * (mode["prop"] + e + pb - pa) - 3 * BIGM + 0.5, 0.5, 1.0),
                      (BIGM * (mode["select"] + e + pqp) - 3 * BIGM + 0.5, 0.5, 1.0),
                      (BIGM * (mode["select"] + e - pqp + qv + pa) - 4 * BIGM + 0.5, 0.5, 1.0),
                      (BIGM * (mode["select"] + e - pqp - qv + pb) - 3 * BIGM + 0.5, 0.5, 1.0),
                      (BIGM * (mode["and"] + e + pa) + pb + sb - 3 * BIGM - 0.5, 0.5, 1.0),
                      (BIGM * (mode["and"] + e + pb - pa) + sa - 3 * BIGM - 0.5, 0.5, 1.0),
                      (10 * BIGM * (mode["or"] + e + pa) + wl - sb - 30 * BIGM - 0.5, 0.5, 1.0),
                      (10 * BIGM * (mode["or"] + e + pb - pa) + wl - sa - 30 * BIGM - 0.5, 0.5, 1.0)]
        m.boolean(und, j, terms)
    m.build()
    lane_src = _lane_sources(c, A, Bw, P, ex, und, dst_data, mu.mem)

    # ---- the memory unit: address bits, the served lane, the banks, the loaded word -----------
    ad, al, kb = MU.address_bits(c, [rfa[j] for j in range(LANES)], imm)
    mo = MU.route(c, mu, hot, ex, ad, Bw, has_next)
    flt = MU.bounds(c, mu, hot, mo, ad, al, kb, [rfa[j] for j in range(LANES)], imm)
    ldw, ldu = MU.load_word(c, mo, MU.banks(c, mo, hot))
    lwe = [mo.lwe.bit(j) for j in range(LANES)]
    latch_m = B.memory(c, "latch_m", GROUPS, 64, nk, r.ck, [ldw] * LANES, we=lwe, reset=hot["blk"],
                       lanes=LANES).outputs
    latch_u = B.memory(c, "latch_u", GROUPS, 64, nk, nk, [ldw] * LANES, we=lwe, reset=hot["blk"],
                       lanes=LANES, blank=ldu.bit(0)).outputs      # an undefined load: a blank word

    # ---- the ALU of each lane -------------------------------------------------------------------
    res, qres = [], []
    for j in range(LANES):
        blk = alu(c, opv, wv, A[j], Bw[j], P[j], name=f"alu{j}", enc="dual")
        res.append(blk.outputs[0])
        qres.append(blk.outputs[1])

    # ---- the group's <g> data: written values, predicate results, S ---------------------------
    ev = c.new_field(dual("ev", LANES * 64))      # executed, defined, writes data: the value's bits
    pv = c.new_field(dual("pv", LANES))
    nx = c.new_field(dual("nx", 1))               # two or more lanes executed and it writes data
    undm = c.new_field(dual("undm", LANES))       # a load lane whose word was never written
    m = MLPBuilder(c, "group_values")
    for j in range(LANES):
        # undefined: the ALU's poison rules, or a load's blank word (latch_u is written at every
        # executing position of an ALU group, so only a load lane can read it unwritten)
        undef = und.bit(j) + 1.0 - latch_u[j].present(0)
        m.threshold(undm, j, ex.bit(j) - latch_u[j].present(0) - 0.5, 0.5)
        keep = ex.bit(j) - undef + dst_data
        for i in range(64):
            m.threshold(ev, 64 * j + i, keep + res[j].bit(i) + latch_u[j].bit(i) - 2.5, 0.5)
        m.boolean(pv, j, [(ex.bit(j) - undef + qres[j].bit(0) - 1.5, 0.5, 1.0),
                          (ex.bit(j) - undef + dst_pred + res[j].bit(0) - qres[j].bit(0) - 2.5, 0.5, 1.0)])
    nexec = lsum(ex.bit(j) for j in range(LANES))
    m.threshold(nx, 0, nexec + 4.0 * dst_data - 5.5, 0.5)
    m.build()
    dis = c.new_field(dual("dis", 64))
    m = MLPBuilder(c, "disagree")
    for i in range(64):
        ones = lsum(ev.bit(64 * j + i) for j in range(LANES))
        m.boolean(dis, i, [(ones - 0.5, 0.5, 1.0), (ones - nexec + 0.5 - BIGM * (1.0 - nx.bit(0)), 0.5, -1.0)])
    m.build()
    same = c.new_field(dual("same", 1))
    m = MLPBuilder(c, "same")
    m.threshold(same, 0, BIGM * nx.bit(0) - lsum(dis.bit(i) for i in range(64)) - BIGM + 0.5, 0.5)
    m.build()

    # ---- the latch (slot K') and the emitter (at <g K> and <d>) ----------------------------------
    latch = B.memory(c, "latch", GROUPS, 64, nk, r.ck, res, we=has_next.bit(0), reset=hot["blk"],
                     lanes=LANES).outputs
    latch_c = B.memory(c, "latch_c", GROUPS, len(COPY_PAIRS), nk, r.ck, [lane_src], we=has_next.bit(0),
                       reset=hot["blk"]).outputs[0]
    gcur = B.memory(c, "gcur", 1, 2 * LANES + 2, 0, 0,
                    [[_input(c, "ge"), _input(c, "gu"), _input(c, "gsf"), _input(c, "gxp")]],
                    we=hot["g"], reset=hot["blk"]).outputs[0]
    E = [gcur.bit(j) - gcur.bit(LANES + j) for j in range(LANES)]
    S = gcur.bit(2 * LANES)
    S2 = gcur.present(0) - gcur.bit(2 * LANES + 1)          # the current group copied (S = 2): no <d>
    at = hot["g"] + hot["d"]
    same2 = _copies_previous(c, res, latch, ex, und, undm, gcur, at, dst_data, mu.mem)
    dsel = r.dsel
    NS = LANES * R.CHUNKS

    def after(s):                 # the current <d>'s (J, C) comes before emission slot s (or <g>)
        return dsel.hot(NS) + lsum(dsel.hot(t) for t in range(s))

    def vbits(j, ch):
        return [latch[j].bit(R.PAYLOAD * ch + b) + latch_m[j].bit(R.PAYLOAD * ch + b) for b in range(R.chunk_bits(ch))]

    def first(j):
        return E[j] - lsum(E[jj] for jj in range(j))

    def cp(j):                    # lane j copies an earlier lane (if its value is not 0)
        return lsum(latch_c.bit(p) for p, (_, jj) in enumerate(COPY_PAIRS) if jj == j)

    # an emission slot's gates, 4 where all hold: at <g>/<d>, the slot still to come, and S = 0
    # (the lane's own slot s: it executed, the group sent its own values) or S = 1 (chunk slot
    # ch of the group's one value: lane j is the first executed lane)
    def own_gate(j, s):
        return at + (1.0 - S) - S2 + E[j] + after(s)

    def first_gate(j, ch):
        return at + S + first(j) + after(ch)

    # fills: a lane whose ALU result is in [2^32 - 256, 2^32) (bits 8..31 ones, none above) sends
    # one <d J 6 X> at its chunk-0 slot for its three chunks. Four exact steps a lane, beside the
    # flags (the latch is all they read): the fill is still to come at the chunk-0 slot / at the
    # chunk 1 and 2 slots, with S = 0 (the lane's own slots; not a lane that copies) and S = 1
    # (the first lane, lane 0's)
    fl = c.new_field(dual("fill", 4 * LANES))
    m = MLPBuilder(c, "emit_fill")
    for j in range(LANES):
        q = lsum(latch[j].bit(b) for b in range(FILL_FREE, 32)) - lsum(latch[j].bit(b) for b in range(32, 64))
        for i, (mode, slot) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
            if mode == 0:
                gate = own_gate(j, R.CHUNKS * j + slot) - cp(j) - 4.0
            else:
                gate = first_gate(j, slot) - 4.0
            m.threshold(fl, 4 * j + i, BIGM * gate + q - (32 - FILL_FREE - 0.5), 0.5)
    m.build()

    # [0, NS): S = 0 slots; [NS, 2 NS): S = 1 (lane j first). A lane that copies (cp) and whose
    # value is not 0 has its chunk-0 slot alone (the <d J 7 I> token), whatever its chunks
    flag = c.new_field(dual("flag", 2 * NS))
    m = MLPBuilder(c, "emit_flags")
    for j in range(LANES):
        nzall = lsum(b for ch in range(R.CHUNKS) for b in vbits(j, ch))
        for ch in range(R.CHUNKS):
            s = R.CHUNKS * j + ch
            nz = lsum(vbits(j, ch))
            g0 = own_gate(j, s)
            terms = [(BIGM * (g0 - cp(j)) + nz - 4 * BIGM - 0.5, 0.5, 1.0)]
            if ch == 0 and j:
                terms.append((BIGM * (g0 + cp(j) - 1.0) + nzall - 4 * BIGM - 0.5, 0.5, 1.0))
            m.boolean(flag, s, terms)
            m.threshold(flag, NS + s, BIGM * first_gate(j, ch) + nz - 4 * BIGM - 0.5, 0.5)
    m.build()

    def F(s):                     # emission slot s is possible (0, 1, or 2: a fill's nonzero chunk 0)
        j, ch = divmod(s, R.CHUNKS)
        out = flag.bit(s) + (fl.bit(4 * j) if ch == 0 else -1.0 * fl.bit(4 * j + 1) if ch < 3 else 0.0)
        if s >= R.CHUNKS:
            return out
        out = out + lsum(flag.bit(NS + R.CHUNKS * jj + s) for jj in range(LANES))
        if ch == 0:
            return out + lsum(fl.bit(4 * jj + 2) for jj in range(LANES))
        return out - lsum(fl.bit(4 * jj + 3) for jj in range(LANES)) if ch < 3 else out

    sel = c.new_field(dual("sel", NS))
    more = c.new_field(dual("more", 1))
    m = MLPBuilder(c, "emit_pick")
    for s in range(NS):
        m.threshold(sel, s, F(s) - 2.0 * lsum(F(t) for t in range(s)) - 0.5, 0.5)
    m.threshold(more, 0, lsum(F(s) for s in range(NS)) - 0.5, 0.5)
    m.build()
    xo = c.new_field(dual("xo", R.PAYLOAD))
    m = MLPBuilder(c, "emit_bits")
    for b in range(R.PAYLOAD):
        terms = []
        for j in range(LANES):
            for ch in range(R.CHUNKS):
                if b >= R.chunk_bits(ch):
                    continue
                s = R.CHUNKS * j + ch
                v = latch[j].bit(R.PAYLOAD * ch + b) + latch_m[j].bit(R.PAYLOAD * ch + b)
                terms.append((sel.bit(s) + v + (1.0 - S) - 2.5, 0.5, 1.0))
                terms.append((sel.bit(ch) + v + S + first(j) - 3.5, 0.5, 1.0))
        m.boolean(xo, b, terms)
    fsel = c.new_field(dual("fsel", 1))           # the picked slot is a fill (<d J 6 X>)
    m.boolean(fsel, 0, [(sel.bit(R.CHUNKS * j) + fl.bit(4 * j) - 1.5, 0.5, 1.0) for j in range(LANES)]
              + [(sel.bit(0) + fl.bit(4 * j + 2) - 1.5, 0.5, 1.0) for j in range(LANES)])
    csel = c.new_field(dual("csel", 1))           # the picked slot is a lane copy (<d J 7 I>)
    m.boolean(csel, 0, [(sel.bit(R.CHUNKS * j) + cp(j) - 1.5, 0.5, 1.0) for j in range(1, LANES)])
    m.build()

    # ---- vocabulary -----------------------------------------------------------------------------
    K = KINDS.index
    C.control_tokens(c, f, blk_inputs=lambda b: dict(blkb=b))
    for name, inputs in R.pd_tokens():
        c.token(name, kind=K("pd"), **inputs)
    c.token(tok_po(None), kind=K("po"))
    for di, dst in ((0, "none"), (2, "data")):
        word = (1 << (PO_W + 2)) | ((1 << (PO_DST + 1)) if di else 0)
        c.token(tok_po("mem", dst=dst), kind=K("po"), po_in=word)
    for op in ALU_OPS:
        for wi, w in enumerate(ALU_WIDTHS):
            for di, dst in enumerate(DSTS):
                md = mode_of(op)
                ow = 1 if op in PRED_OPS or dst == "pred" else w
                word = (1 << (PO_OP + ALU_OPS.index(op))) | (1 << (PO_W + wi)) | (1 << (PO_MODE + MODES.index(md)))
                word |= ow << PO_ORW
                if di:
                    word |= 1 << (PO_DST + di - 1)
                c.token(tok_po(op, w, dst), kind=K("po"), po_in=word)
    codes = list(range(32)) + [SRC_NONE, SRC_IMM, SRC_TID, SRC_CTAID]
    for a in codes:
        for b in codes:
            if b in (SRC_TID, SRC_CTAID):           # (a = b = imm: the same immediate, por of a constant)
                continue
            word = (a & 31 if a < 32 else 0) | ((b & 31 if b < 32 else 0) << 5)
            flags = [a < 32, a == SRC_IMM, a == SRC_TID, a == SRC_CTAID, b < 32, b == SRC_IMM]
            word |= sum(int(x) << (10 + i) for i, x in enumerate(flags))
            c.token(tok_ps(a, b), kind=K("ps"), ps_in=word)
    c.token(tok_pq(None), kind=K("pq"))
    for q in range(32):
        for g in (0, 1):
            for n in (0, 1):
                if n and not g:
                    continue
                c.token(tok_pq(q, bool(g), bool(n)), kind=K("pq"), pq_in=q | 32 | (g << 6) | (n << 7))
    for k in range(IMM_CHUNKS):
        for x in range(1, 1 << R.chunk_bits(k)):
            c.token(f"<pi {k} {x:03x}>", kind=K("pi"), pic=k, pix9=x & 511, pix2=x >> 9)
    c.token("<pe>", kind=K("pe"))
    _memory_tokens(c, K, mu, mo, ldw, hot, flt)
    step = 1000.0 * has_next.bit(0)
    for k in range(G):
        for code in range(4 ** LANES):
            issued, executed, preds = lane_masks(code)
            if preds & ~executed & 15:
                continue
            for u in range(16):
                if u & ~executed:
                    continue
                for sf in (0, 1, 2):
                    if sf == 2 and (k == 0 or u or preds):      # S = 2: a later group of defined values
                        continue
                    name = tok_g(k, code, u, sf)
                    lanes_rf = [3 if (u >> j) & 1 else 2 if (preds >> j) & 1 else 1 if (executed >> j) & 1 else 0
                                for j in range(LANES)]
                    c.token(name, kind=K("g"), **C.g_inputs(f, k, issued, executed),
                            **R.g_inputs(k, lanes_rf, sf))
                    data = lsum(_pm((executed >> j) & 1, ex.bit(j)) + _pm((preds >> j) & 1, pv.bit(j))
                                + _pm((u >> j) & 1, und.bit(j) + undm.bit(j)) for j in range(LANES))
                    # S = 2 wins where the group copies; else S = 1 or 0 as `same` says (margin 2)
                    sterm = (1.0 + _pm(1, same2.bit(0))) if sf == 2 else (_pm(sf, same.bit(0)) + _pm(0, same2.bit(0)))
                    c.logit(name, step + C.g_logit(f, k, issued) + data + sterm)
    emit = 2000.0 * more.bit(0)
    for j in range(LANES):
        for ch in range(R.CHUNKS):
            s = R.CHUNKS * j + ch
            for x in range(1 << R.chunk_bits(ch)):
                name = tok_d(j, ch, x)
                c.token(name, kind=K("d"), **R.d_inputs(j, ch, x))
                c.logit(name, emit + 100.0 * sel.bit(s)
                        + (_pm(0, fsel.bit(0)) + 16.0 * _pm(0, csel.bit(0)) if ch == 0 else 0.0)
                        + lsum(_pm((x >> b) & 1, xo.bit(b)) for b in range(R.chunk_bits(ch))))
        for x in range(FILL_X0, 1 << R.PAYLOAD):   # fills: -256 .. -1 as 32 bits
            name = tok_d(j, FILL, x)
            c.token(name, kind=K("d"), **R.d_inputs(j, FILL, x))
            c.logit(name, emit + 100.0 * sel.bit(R.CHUNKS * j) + _pm(1, fsel.bit(0)) + 16.0 * _pm(0, csel.bit(0))
                    + lsum(_pm((x >> b) & 1, xo.bit(b)) for b in range(R.PAYLOAD)))
        for i in range(j):                         # lane copies: lane j's value is lane i's
            name = tok_d(j, COPY, i)
            c.token(name, kind=K("d"), **R.d_inputs(j, COPY, i))
            c.logit(name, emit + 100.0 * sel.bit(R.CHUNKS * j) + 16.0 * _pm(1, csel.bit(0))
                    + lsum(_pm(ii == i, latch_c.bit(COPY_PAIRS.index((ii, j)))) for ii in range(j)))
    return c


def _lane_sources(c: Circuit, A, Bw, P, ex, und, dst_data, mem) -> Field:
    """[lane j's result is lane i's, i the first such lane] for each (i, j) of COPY_PAIRS (lane
    copies, docs/machine.md §28), from the operands, before the ALU: both lanes executed and
    defined, an ALU instruction that writes data, and operands a, b and the predicate equal
    (so the results are): compared chunk by chunk as signed sums of 11 bit differences (exact in
    fp32), then the pair equal, then the first equal lane (an earlier equal lane is equal to it
    too, so the source itself never copies)."""
    words = [(A, 64), (Bw, 64), (P, 1)]
    per = sum(-(-w // R.PAYLOAD) for _, w in words)
    cd = c.new_field(dual("lane_cd", len(COPY_PAIRS) * per))        # a chunk of an operand differs
    m = MLPBuilder(c, "lane_diff")
    for p, (i, j) in enumerate(COPY_PAIRS):
        n = 0
        for W, w in words:
            for lo in range(0, w, R.PAYLOAD):
                dv = lsum(float(1 << (b - lo)) * (W[i].bit(b) - W[j].bit(b)) for b in range(lo, min(w, lo + R.PAYLOAD)))
                m.boolean(cd, per * p + n, [(dv - 0.5, 0.5, 1.0), (-1.0 * dv - 0.5, 0.5, 1.0)])
                n += 1
    m.build()
    eq = c.new_field(dual("lane_eq", len(COPY_PAIRS)))
    m = MLPBuilder(c, "lane_eq")
    for p, (i, j) in enumerate(COPY_PAIRS):
        ok = ex.bit(i) + ex.bit(j) - und.bit(i) - und.bit(j) + dst_data - mem      # 3 where all hold
        # an integer form: ok - 3 <= -1 outweighs 0.5 - (chunks differing) alone; a large weight
        # on ok would multiply the fp32 error of exec_poison's wide steps (craft/precision.py)
        m.threshold(eq, p, ok - lsum(cd.bit(per * p + n) for n in range(per)) - 2.5, 0.5)
    m.build()
    src = c.new_field(dual("lane_src", len(COPY_PAIRS)))
    m = MLPBuilder(c, "lane_src")
    for p, (i, j) in enumerate(COPY_PAIRS):
        m.threshold(src, p, eq.bit(p) - lsum(eq.bit(COPY_PAIRS.index((ii, j))) for ii in range(i)) - 0.5, 0.5)
    m.build()
    return src


def _copies_previous(c: Circuit, res, latch, ex, und, undm, gcur, at, dst_data, mem) -> Field:
    """[the executing group's <g> is S = 2]: at a <g> or <d> of the issue's previous group (the
    current one; so never the issue's first group), an ALU instruction that writes data, no
    undefined lane in either group, every lane executed here executed there, and each such lane's
    result equal to the latch's (that group's results, slot K): compared four bits at a time as
    signed sums of bit differences (at most 15), so 64 comparisons, not 256. The lane's executed
    bit gates each comparison with a weight of 16: a step's true output is 1 only up to the
    relative error of the layer's norm (about 1e-4 where earlier stages left analog values in
    fields nobody reads at that token), and a gate of 4,096 over 11-bit chunks turned that into
    0.43 of a 0.5 margin (a false `<g .. 1>` at token 7 of flag_chain)."""
    pieces = 64 // COPY_PIECE
    cdiff = c.new_field(dual("cdiff", LANES * pieces + LANES))     # a piece differs; a lane is new
    m = MLPBuilder(c, "copy_diff")
    gate = float(1 << COPY_PIECE)
    for j in range(LANES):
        for k in range(pieces):
            dv = lsum(float(1 << b) * (res[j].bit(COPY_PIECE * k + b) - latch[j].bit(COPY_PIECE * k + b))
                      for b in range(COPY_PIECE))
            off = gate * ex.bit(j) - gate - 0.5
            m.boolean(cdiff, pieces * j + k, [(dv + off, 0.5, 1.0), (-1.0 * dv + off, 0.5, 1.0)])
        m.threshold(cdiff, LANES * pieces + j, ex.bit(j) - gcur.bit(j) - 0.5, 0.5)
    m.build()
    same2 = c.new_field(dual("same2", 1))
    m = MLPBuilder(c, "copy_same")
    bad = (lsum(cdiff.bit(i) for i in range(cdiff.n)) + lsum(und.bit(j) + undm.bit(j) for j in range(LANES))
           + lsum(gcur.bit(LANES + j) for j in range(LANES)))
    m.threshold(same2, 0, at + dst_data - mem - bad - 1.5, 0.5)
    m.build()
    return same2


def _memory_tokens(c: Circuit, K, mu, mo, ldw, hot, flt):
    """The memory unit's vocabulary: <pm ..>, the prompt's words, the ticks and the dump."""
    c.token(tok_pm(None), kind=K("pm"))
    for kind in ("load", "store"):
        for sp in MM.SPACES:
            for size in (4, 8):
                c.token(tok_pm(kind, sp, size), kind=K("pm"), pm_in=MU.pm_word(kind, sp, size))
    for j in range(LANES):
        c.token(f"<mt {j}>", kind=K("mt"), mtj=j)
        c.logit(f"<mt {j}>", 1500.0 * mo.nt.bit(j))
    for x in range(MM.WORDS + 1):
        c.token(f"<nw {x}>", kind=K("nw"), nw_in=x)
    for a in range(MM.WORDS):
        c.token(f"<ma {a}>", kind=K("ma"), ma_in=a)
    for k in range(3):
        for x in range(0 if k == 2 else 1, 1 << MM.CHUNK_BITS[k]):
            c.token(f"<mc{k} {x:03x}>", kind=K(f"mc{k}"), **{f"mc{k}_in": x})
    nxc, dn, de = MU.dump_chunks(c, mu, hot, ldw)
    for a in range(MM.WORDS):
        c.token(f"<xa {a}>", kind=K("xa"), xa_in=a)
        c.logit(f"<xa {a}>", 2000.0 * dn.bit(0) + lsum(_pm((a >> i) & 1, mu.nxa.bit(i)) for i in range(MU.WBITS)))
    sh = 0
    for k in range(3):
        nb = MM.CHUNK_BITS[k]
        for x in range(1, 1 << nb):
            name = f"<xc {k} {x:03x}>"
            c.token(name, kind=K("xc"), xcc=k)
            c.logit(name, 2500.0 * nxc.bit(k) + lsum(_pm((x >> b) & 1, ldw.bit(sh + b)) for b in range(nb)))
        sh += nb
    c.token("<end>", kind=K("end"))
    c.logit("<end>", 2000.0 * de.bit(0))
    for x in range(MM.CAPACITY["shared"] // 4 + 1):
        c.token(f"<ss {x}>", kind=K("ss"), ss_in=x)
    for k in range(16):
        c.token(f"<mbk {k}>", kind=K("mbk"), mbk_in=k)
    for x in range(MM.WORDS):
        c.token(f"<mbl {x}>", kind=K("mbl"), mbl_in=x)
    for x in range(MM.WORDS + 1):
        c.token(f"<mbh {x}>", kind=K("mbh"), mbh_in=x)
    c.token("<fault>", kind=K("fault"))
    c.logit("<fault>", 5000.0 * lsum(flt.bit(i) for i in range(flt.n)))


def _pm(want: int, x: Lin) -> Lin:
    """+1 when the 0/1 form x equals want, -1 otherwise."""
    return (2.0 * x - 1.0) if want else (1.0 - 2.0 * x)


def _input(c: Circuit, name: str):
    return next(f for f in c.inputs if f.name == name)

