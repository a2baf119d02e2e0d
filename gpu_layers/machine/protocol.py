"""The token protocol, v1: the execution trace the compiled model will emit, as the oracle sees it.

The machine runs machine code (gpu_layers.machine.lower) one lane group at a time: a warp-
instruction of the reference interpreter (the cursor rule picks a warp and a PC) is issued to the
groups of `lanes` consecutive lanes that hold an active thread, in lane order. Emitted tokens
(docs/protocol.md; docs/machine.md §2: every state change that depends on itself is carried by a
token, so each token names what it carries):

    <blk B>            block B starts (blocks run in order)
    <w W H G>          (blocks of several warps only) warp W takes the next step, H as in <wi>;
                       G = the warp's barrier generation (its warp barrier's releases mod 2)
    <wi W P H>         warp W issues the instruction at machine PC P; H = the block's barrier
                       phase before this step (it flips after a step that releases a barrier)
    <g K L U S>        lane group K of that issue: L = 2 bits per lane (lane j at bits 2j, 2j+1):
                       0 not issued (another PC, exited or absent), 1 issued but not executed
                       (guard false; for a branch: not taken), 2 executed (taken), 3 executed
                       with predicate result 1 (setp and other predicate destinations);
                       U = lanes whose write-back is undefined (poison), 4 bits;
                       S = 1: every executed lane writes the same value, sent once (as lane 0);
                       S = 2: each executed lane writes what the same lane of the issue's previous
                       group wrote (no <d>): not the issue's first group, an ALU instruction that
                       writes data, no undefined lane here or there, every lane executed here
                       executed there (so the register file can take the values from the last
                       group that sent them, docs/machine.md §27)
    <d J C X>          write-back data: chunk C (PAYLOAD bits, low chunk first) of the destination
                       register(s) of lane J of the group; chunks that are 0 are not sent (a
                       register's chunks not sent are 0), so small values cost fewer tokens;
                       C = 6 (fills=True, the core's stream): chunk 0 is X and bits 11..31 are
                       ones, for ALU results in [2^32 - 256, 2^32): -1 .. -256 as 32 bits;
                       C = 7 (lane_copies=True, the core's stream), X = I < J: lane J's value is
                       lane I's, for an ALU instruction whose operands are the same in both lanes
                       (I the first such executed lane) and a nonzero value (docs/machine.md §28)
    <dump N>           output buffer N follows, as <x X> tokens of its 16-bit words in order
    <x X>              16 bits of a dumped buffer
    <halt>             the launch is over

Why H: a thread waiting at `bar.sync` waits for the phase it arrived in; when the last thread
arrives (or the last one not waiting exits) every waiting thread is released at once. The release
changes every waiting thread's state, and the phase is a state that computes its own next value,
so the token after the releasing step carries the new phase and nothing else is rewritten.

Why <w W H G> in blocks of several warps: the warps take turns (round robin over the warps that
can run); which warp is next depends on every warp's threads, known only above the PC file, while
reading the next warp's PCs needs the warp below it: one token names the warp, the next one the PC.
G is H for the machine's warp barrier (Kernel.warp_barriers, before a warp exchange in such
blocks): a thread waits in its warp's generation, and the step after which every thread of the
warp that has not exited waits releases them all, so that warp's next <w> carries the flipped G.

Why L names issued lanes and not only executed ones: every issued lane's PC moves (to PC + 1, or
to the target when taken), and which lanes were issued depends on their old PCs; a DeltaNet memory
cannot compute its own next value (docs/machine.md section 2), so the PC file's per-lane write
enable must come from the token.

`trace_tokens` runs a lowered kernel on the reference interpreter and returns this stream with the
buffers; `decode_outputs` reads the output buffers back from the stream alone. Counting: tokens
per thread-instruction divides the stream length (the dump excluded: it is the same for any
machine) by the thread-instructions of the *original* kernel (threads active at each of its
warp-instructions), the speed metric of issue 7.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu_layers.interp.machine import _execute, launch

CHUNK = 16            # bits of a dumped word
PAYLOAD = 11          # bits of write-back data per <d> token (2 lane + 3 chunk + 11 = 16 bits)
FILL = 6              # <d J 6 X>: chunk 0 is X, bits 11..31 are ones, bits 32.. zero (the core's stream)
FILL_FREE = 8         # a fill's free low bits: the values it carries are [2^32 - 2^8, 2^32)
FILL_LO = (1 << 32) - (1 << FILL_FREE)
FILL_X0 = FILL_LO % (1 << PAYLOAD)        # a fill's X is in [FILL_X0, 2^PAYLOAD): 0x700 .. 0x7ff
COPY = 7              # <d J 7 I>: lane J's value is lane I's (the same operands; the core's stream)


@dataclass
class Trace:
    tokens: list            # [(kind, *fields)]
    buffers: list | None    # the launch's buffers (numpy arrays; None for scalars); None after a fault
    steps: int              # machine warp-instructions
    issues: int             # lane-group issues


def _dst_columns(prog, ins):
    """(column, bits) of the registers an instruction writes (scratch sinks excluded)."""
    out = []
    for c in ins.dsts:
        name = prog.colnames[c]
        if name in prog.regbits:
            out.append((c, prog.regbits[name]))
    return out


def destinations(kernel) -> dict[int, list[tuple[str, int]]]:
    """{machine PC: [(register name, bits)]} of the registers each instruction of machine code
    `kernel` writes back (what its <d> tokens carry, in order); [] for none."""
    from gpu_layers.interp.machine import program_for

    prog = program_for(kernel)
    return {pc: [(prog.colnames[c], w) for c, w in _dst_columns(prog, ins)] for pc, ins in enumerate(prog.code)}


def trace_tokens(kernel, grid, block, args, dynamic_shared_bytes=0, *, lanes=4, outputs=None,
                 step_budget=None, buffer_offsets=None, fault=None, copies=False, fills=False,
                 lane_copies=False) -> Trace:
    """Run machine code `kernel` and return the token stream it emits (see the module docstring).
    outputs: indices of the buffer arguments to dump at the end (default: every buffer);
    buffer_offsets: as gpu_layers.interp.launch takes them (the memory unit's map places buffers).
    fault(warp, pc, lanes whose guard holds) -> the first lane whose access the machine refuses, or
    None: checked before every step; at a faulting lane l the lane groups before l's execute and
    are traced, then ("fault", group, lane, executed lanes of l's group) ends the stream (no dump).
    copies: groups may copy the previous group's values (S = 2; the machine core's protocol: the
    register-file circuits before it have no such <g>). fills: an ALU result in [2^32 - 256,
    2^32) (a small negative 32-bit value, or one zero-extended to 64 bits) is one <d J 6 X>, X its
    chunk 0 (bits 11..31 ones, the rest zero), instead of three chunks (the core's stream too).
    lane_copies: in a group that sends its lanes' own values (S = 0) of an ALU instruction, a
    defined lane whose operands (operand_columns) equal an earlier executed defined lane's, and whose
    value is not 0, sends one <d J 7 I> (I the first such lane) instead of its chunks (the core's
    stream too; it compares operands, which it has before its ALU, not results)."""
    from gpu_layers.interp.machine import program_for

    prog = program_for(kernel)
    toks = []
    per_pc = {}
    state = {"block": None, "issues": 0, "phase": 0, "keys": None}
    gmask = (1 << lanes) - 1

    def at_pc(pc, ins):
        """(destination columns, predicate only, an ALU instruction writing data, the operand
        columns lane copies compare: None where it is not such an instruction), once a PC."""
        got = per_pc.get(pc)
        if got is None:
            dcols = _dst_columns(prog, ins)
            pred_only = len(dcols) == 1 and dcols[0][1] == 1
            alu_data = bool(dcols) and not pred_only and not is_memory(kernel.instructions[pc])
            got = per_pc[pc] = (dcols, pred_only, alu_data,
                                operand_columns(prog, pc) if lane_copies and alu_data else None)
        return got

    def observe(W, ins, pc, active, done):
        if W.block_id != state["block"]:
            state["block"] = W.block_id
            state["phase"] = 0
            toks.append(("blk", W.block_id))
        if len(W.block.warps) > 1:
            toks.append(("w", W.index, state["phase"], W.wgen))
        toks.append(("wi", W.index, pc, state["phase"]))
        dcols, pred_only, alu_data, opcols = at_pc(pc, ins)
        lanes_on = set(active) | set(done)
        done_set = set(done)
        R = W.R
        can_copy, can_fill = copies and alu_data, fills and alu_data
        keys = state["keys"] if opcols is not None else None      # operands before the step
        prev = None                                   # (executed, undefined, values) of the last group
        for k in range(32 // lanes):
            group = [l for l in range(k * lanes, (k + 1) * lanes) if l in lanes_on]
            if not group:
                continue
            state["issues"] += 1
            e = v = u = 0
            issued = 0
            data = []
            words = []
            for l in group:
                j = l - k * lanes
                issued |= 1 << j
                if l not in done_set:
                    continue
                e |= 1 << j
                bits = []
                for c, w in dcols:
                    x = R[c][l]
                    if x is None:
                        u |= 1 << j
                        x = 0
                    if pred_only:
                        v |= (x & 1) << j
                    else:
                        bits.append((x, w))
                words.append((j, _chunks(bits, PAYLOAD)))
            vals = dict(words)
            if (prev is not None and can_copy and not u and not prev[1] and not e & ~prev[0]
                    and all(vals[j] == prev[2][j] for j in vals)):
                same = 2                              # the previous group's values: no <d>
            else:
                same = int(len(words) > 1 and bool(words[0][1]) and all(w == words[0][1] for _, w in words))
                sources = []                          # (lane, operands) of the lanes that may be copied
                for j, ch in (words[:1] if same else words):
                    val = sum(x << (PAYLOAD * ci) for ci, x in enumerate(ch))
                    src = None
                    if keys is not None and not same and not (u >> j) & 1:
                        key = keys[k * lanes + j]
                        src = next((i for i, kk in sources if kk == key), None)
                        sources.append((j, key))
                    if src is not None and val:
                        data.append(("d", j, COPY, src))
                    elif can_fill and FILL_LO <= val <= 0xFFFFFFFF:     # a small negative 32-bit value
                        data.append(("d", 0 if same else j, FILL, val & ((1 << PAYLOAD) - 1)))
                    else:
                        data += [("d", 0 if same else j, ci, x) for ci, x in enumerate(ch) if x]
            prev = (e, u, vals)
            toks.append(("g", k, lane_states(issued & gmask, e & gmask, v, lanes), u, same))
            toks.extend(data)
        blk = W.block
        if blk.waiting and blk.waiting == blk.alive:      # the interpreter releases after this step
            state["phase"] ^= 1

    def before(W, ins, pc, active, exe):
        oc = at_pc(pc, ins)[3]
        if oc is not None:
            state["keys"] = {l: tuple(0 if W.R[c][l] is None else W.R[c][l] for c in oc) for l in exe}
        if fault is None:
            return
        lane = fault(W, pc, exe)
        if lane is None:
            return
        k = lane // lanes
        first = [l for l in exe if l // lanes < k]
        if first:
            _execute(W, ins, first)
        observe(W, ins, pc, [l for l in active if l // lanes < k], first)
        toks.append(("fault", k, lane % lanes, sorted(l % lanes for l in exe if l // lanes == k)))
        raise _Faulted

    try:
        res = launch(kernel, grid, block, list(args), dynamic_shared_bytes, lanes=lanes,
                     step_budget=step_budget, observer=observe, buffer_offsets=buffer_offsets,
                     before=before if fault is not None or lane_copies else None)
    except _Faulted:
        return Trace(toks, None, None, state["issues"])
    for i in (outputs if outputs is not None else range(len(res.buffers))):
        buf = res.buffers[i]
        if buf is None:
            continue
        toks.append(("dump", i))
        data = buf.tobytes()
        toks.extend(("x", x) for x in _chunks([(b, 8) for b in data], CHUNK))
    toks.append(("halt",))
    return Trace(toks, res.buffers, res.steps, state["issues"])


def operand_columns(prog, pc: int) -> list[int]:
    """The interpreter's columns of what the machine's ALU reads for the instruction at `pc`: its
    source registers and special registers (%tid.x differs in every lane); the guard (true in
    every executed lane) and immediates (the same in every lane) are left out. Lanes whose
    columns hold equal values (an undefined one read as 0, as the register file reads an unwritten
    slot: zero bits) compute the same result (docs/machine.md §28)."""
    from gpu_layers.ptx.ir import Reg

    cols = [c for c, _ in prog.code[pc].reads]
    return cols + [prog.specials[op.name] for op in prog.kernel.instructions[pc].operands[1:]
                   if isinstance(op, Reg) and op.name in prog.specials]


def is_memory(ins) -> bool:
    """Whether a machine instruction goes to the memory unit (ld.param is an immediate): its
    values come from memory, not the ALU, and its groups never copy the previous group's."""
    return ins.opcode in ("ld", "st", "atom", "red") and not (ins.opcode == "ld" and "param" in ins.modifiers)


class _Faulted(Exception):
    pass


def lane_states(issued: int, executed: int, preds: int, lanes: int = 4) -> int:
    """The L field of <g>: 2 bits per lane (0 not issued, 1 issued, 2 executed, 3 executed with
    predicate result 1) from 4-bit masks."""
    out = 0
    for j in range(lanes):
        st = 0 if not (issued >> j) & 1 else 1 if not (executed >> j) & 1 else 2 + ((preds >> j) & 1)
        out |= st << (2 * j)
    return out


def lane_masks(states: int, lanes: int = 4) -> tuple[int, int, int]:
    """(issued, executed, predicate results) 4-bit masks of a <g> token's L field."""
    issued = executed = preds = 0
    for j in range(lanes):
        st = (states >> (2 * j)) & 3
        issued |= int(st > 0) << j
        executed |= int(st >= 2) << j
        preds |= int(st == 3) << j
    return issued, executed, preds


def _chunks(bits, size):
    """(value, width) fields packed low bits first into `size`-bit words (last one zero-padded)."""
    acc = n = 0
    out = []
    for x, w in bits:
        acc |= (x & ((1 << w) - 1)) << n
        n += w
        while n >= size:
            out.append(acc & ((1 << size) - 1))
            acc >>= size
            n -= size
    if n:
        out.append(acc)
    return out


def decode_outputs(tokens, like) -> dict:
    """The dumped buffers, read from the token stream alone: {argument index: numpy array}, each
    shaped and typed like like[index] (the launch's input buffers)."""
    out = {}
    cur = None
    words = []

    def close():
        if cur is not None:
            raw = b"".join(int(w).to_bytes(CHUNK // 8, "little") for w in words)
            ref = like[cur]
            out[cur] = np.frombuffer(raw[:ref.nbytes], dtype=ref.dtype).reshape(ref.shape).copy()

    for t in tokens:
        if t[0] == "dump":
            close()
            cur, words = t[1], []
        elif t[0] == "halt":
            close()
            cur = None
        elif cur is not None and t[0] == "x":
            words.append(t[1])
    return out


def thread_instructions(kernel, grid, block, args, dynamic_shared_bytes=0) -> int:
    """Thread-instructions of a kernel: threads active at each of its warp-instructions."""
    count = [0]

    def observe(W, ins, pc, active, done):
        count[0] += len(active)

    launch(kernel, grid, block, list(args), dynamic_shared_bytes, observer=observe,
           step_budget=50_000_000)
    return count[0]


def describe(tok) -> str:
    """One token, readable: its kind, its fields and what they mean."""
    k = tok[0]
    if k == "blk":
        return f"<blk {tok[1]}>        block {tok[1]} starts"
    if k == "w":
        g = tok[3] if len(tok) > 3 else 0
        return (f"<w {tok[1]} {tok[2]} {g}>      warp {tok[1]} takes the next step (barrier phase {tok[2]}, "
                f"warp barrier generation {g})")
    if k == "wi":
        ph = tok[3] if len(tok) > 3 else 0
        return f"<wi {tok[1]} {tok[2]} {ph}>    warp {tok[1]} issues machine instruction {tok[2]} (barrier phase {ph})"
    if k == "g":
        _, grp, st, u, same = tok
        a, e, v = lane_masks(st)
        extra = (f", predicates {v:04b}" if v else "") + (f", undefined {u:04b}" if u else "") + \
            {0: "", 1: ", one value for all", 2: ", the previous group's values"}[same]
        lanes = " ".join(str((st >> (2 * j)) & 3) for j in reversed(range(4)))
        return f"<g {grp} {lanes} {u:04b} {same}>  lane group {grp}: issued {a:04b}, executed {e:04b}{extra}"
    if k == "d" and tok[2] == FILL:
        return (f"<d {tok[1]} {tok[2]} {tok[3]:#05x}>   lane {tok[1]}: bits 0..10 = {tok[3]:#x}, "
                f"11..31 ones ({tok[3] - (1 << PAYLOAD)} as 32 bits)")
    if k == "d":
        return f"<d {tok[1]} {tok[2]} {tok[3]:#05x}>   lane {tok[1]}, chunk {tok[2]}: bits " \
               f"{PAYLOAD * tok[2]}..{PAYLOAD * tok[2] + PAYLOAD - 1} = {tok[3]:#x}"
    if k == "dump":
        return f"<dump {tok[1]}>       output buffer (argument {tok[1]}) follows"
    if k == "x":
        return f"<x {tok[1]:#06x}>      16 bits of the buffer"
    return "<halt>          the launch is over"
