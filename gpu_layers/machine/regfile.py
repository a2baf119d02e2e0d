"""The register-file write-back commit, v1: a block's whole register file in DeltaNet state.

It consumes the protocol's tokens (docs/protocol.md) and keeps every machine register of one warp of
up to 16 threads in the recurrent state; gpu_layers.machine.inspect_state reads it back. Nothing here
executes instructions: the model is fed the oracle's stream (teacher forcing), and the tests check
that its state holds exactly the registers the reference interpreter holds.

Scope v1 (refused by name otherwise, `RegfileError`):
  * one warp of up to 16 threads per block (lane groups K = 0..3 of 4 lanes, thread = 4 K + J);
    blocks run one after another, and `<blk B>` resets the register file (the gate closes), so a
    block starts with every register unwritten;
  * up to 32 machine registers per thread, every pool of the allocation (gpu_layers.machine.
    regalloc: %mp* predicates, %mh* 16-bit, %mr* 32-bit, %md* 64-bit), each in one 64-bit slot:
    per lane one value head of 128 slots (slot 32 K + R), Qwen3.5-2B's key and value head dims;
  * write-backs of 1, 16, 32 and 64 bits: 6 chunks of 11 bits (chunk 5: bits 55..63), zero chunks
    absent (= 0), S = 1 groups (lane 0's chunks for every executed lane);
  * predicates: an instruction whose only destination is a predicate sends no `<d>`; each lane's
    value is in `<g>`'s lane state (3 = true, 2 = false) and is committed into the predicate's slot;
  * poison: lanes in `<g>`'s U mask store an unwritten slot (a blank write: both rails 0), so the
    register reads back as None, the interpreter's undefined value;
  * machine PCs < 512, blocks < 1024; instructions with two destinations (shfl.sync's value and
    predicate, match.all.sync, vector loads) are refused: a lane's register file is one head, and a
    head takes one write per token.

Vocabulary (the machine tokens of this circuit):
  prompt  <pa P>               program address P (< 512)
          <pd none>            instruction P (the last <pa>) writes no register
          <pd R bW>            instruction P writes machine-register slot R (< 32), W bits (1, 16, 32, 64)
  trace   <blk B>              block B starts: the register file is reset
          <wi 0 P>             warp 0 issues machine instruction P
          <g K abcd S>         lane group K; one character per lane, lane 3 first (as `describe`):
                               '-' not executed, '0' executed, '1' executed with predicate result 1,
                               'u' executed with an undefined result; S = 1: lane 0's chunks for all;
                               S = 2: each lane's value of the issue's previous group, no <d>
          <d J C XXX>          chunk C (bits 11 C ..) of lane J's value, hex; zero chunks are absent;
                               C = 6, a fill: chunk 0 is XXX and bits 11..31 are ones;
                               C = 7, a lane copy: lane J's value is lane XXX's (XXX < J)
          <end>                end of the trace (stands for the protocol's <dump>/<halt>): commits
  The protocol's <g K L U S> maps onto <g K abcd S> (the issued-but-not-executed state 1 is a
  control matter, gpu_layers.machine.control, and reads as '-' here).

Why the state lives where it lives (docs/machine.md section 2: a slot is replaced whole, one write
per head per token, write-then-read within a token, a memory cannot compute its own next value):
  * a group's write-back is complete only at the token after its last <d>: the next <g> (of the
    same issue), <wi> or <end>. Its chunks are buffered in 24 chunk heads (lane J x chunk C, slot
    K): <g K> zeroes slot K of every chunk head (the chunk-0 heads get the lane's predicate result
    as bit 0 instead, so a predicate's value needs no <d>), each <d J C X> writes slot K of head
    (J, C) (of every lane's head C when S = 1; <d J 7 I> sets copy flag I, a bit of lane J's chunk-0
    head, and lane J's value is then lane I's). The commit token reads all 24 at the pending group's
    slot (an S = 2 group's: the slot of the last group of the issue that sent its values, `pks`:
    the `seen` heads keep "sent", `lastx` the last sender for <wi>/<end>) and writes each executed
    lane's 64-bit word into the register file in one token;
  * which group is pending is state that depends on itself, so it is rebuilt from memories written
    by tokens: at <wi>/<end> it is the last group (`curg`, written at each <g>); at <g K> it is the
    largest k < K seen in this issue: three one-bit heads `seen0..2` (written at <g k>, reset at
    <wi>) and one MLP stage (k < K comes from the token, so <g K>'s own write is ignored); the first
    <g> of an issue commits nothing (the previous issue's last group committed at <wi>);
  * the group state (the instruction's destination, executed and undefined lanes) is copied at
    <g K> into slot K of `gs`, so the commit finds the pending group's destination even after <wi>
    has replaced the current instruction (`cinst`, written at <wi>). The program (`prog`, banks of
    128 slots, written at <pd> at the address the last <pa> left in `addr`; in the machine core,
    part of the core's program word) is read at the current PC, and one MLP stage turns register,
    write flag, pending group and lanes into the register-file address 32 K + R and per-lane
    write enables and blank flags;
  * <blk> closes the gate of the register file, `curg` and `gs` (the block's last group, its exit,
    is dropped with them).

Layers (as the scheduler places them for Qwen3.5-2B's shapes; 16 heads, one constant):
  L0 mixer  addr_lo, addr_hi (the <pa> address), curg (K, S), seen0..2, cinst_lo, cinst_hi (the PC)
  L0 MLP    ck (current K), cs (current S), pk (pending K), pen (a group is pending)
  L1 mixer  prog (4 banks, read at the current PC), 12 chunk heads
  L2 mixer  gs (group state: R, writes, E, U; slot K), 12 chunk heads
  L2 MLP    rf_addr = 32 pk + R, rf_we[J], rf_blank[J]
  L3 mixer  rf: 4 lanes x 128 slots x 64 bits, write-only (read from the cache)

    rf = build_regfile(config)                   # a Qwen3.5 text config or shapes dict (2B's)
    prog = rf.program(allocated_kernel)          # slots {machine register: slot}, destinations
    ids = rf.encode(prog.prompt_tokens() + prog.stream_tokens(trace.tokens))
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import ClassVar

from gpu_layers.craft import blocks as B
from gpu_layers.craft.assemble import Shapes, compile_circuit
from gpu_layers.craft.blocks.base import MLPBuilder
from gpu_layers.craft.blocks.logic import _select_term
from gpu_layers.craft.circuit import Circuit
from gpu_layers.craft.fields import bits, dual, lsum, onehot
from gpu_layers.craft.machine_model import CompiledCircuit
from gpu_layers.errors import QwenGPUError
from gpu_layers.machine.protocol import COPY, FILL, FILL_X0, PAYLOAD, lane_masks

LANES, GROUPS = 4, 4
THREADS = LANES * GROUPS              # one warp of 16 threads
REGS = 32                             # machine registers per thread (every pool)
WBITS = 64                            # bits per slot
CHUNKS = 6                            # chunks of a 64-bit value: 5 x 11 bits + 9
SLOTS = GROUPS * REGS                 # 128 slots per lane head
PCS = 512                             # machine PCs < 512
BANK = 128                            # program slots per bank
MAX_BLOCKS = 1024
WIDTHS = (1, 16, 32, 64)
KINDS = ("pa", "pd", "blk", "wi", "g", "d", "end")
RF_PORT = "rf"
LANE_CHARS = "-01u"                   # not executed, executed, predicate true, undefined


class RegfileError(QwenGPUError, ValueError):
    """A kernel, program or token stream outside what the register file v1 supports."""


def chunk_bits(c: int) -> int:
    """Significant bits of chunk c of a 64-bit value (11, or 9 for chunk 5)."""
    return min(PAYLOAD, WBITS - PAYLOAD * c)


# ---- token names ------------------------------------------------------------------------------

def tok_pd(slot: int | None, width: int | None = None) -> str:
    return "<pd none>" if slot is None else f"<pd {slot} b{width}>"


def tok_g(k: int, lanes: list[int], s: int) -> str:
    """lanes[j]: 0 not executed, 1 executed, 2 predicate true, 3 undefined."""
    return f"<g {k} " + "".join(LANE_CHARS[lanes[j]] for j in reversed(range(LANES))) + f" {s}>"


def tok_d(j: int, c: int, x: int) -> str:
    return f"<d {j} {c} {x:03x}>"


END = "<end>"


@dataclass
class RegfileProgram:
    """A kernel's machine code as the register file sees it: per PC the slot and width it writes."""

    slots: dict[str, int]                      # machine register name -> slot (0..31)
    dests: dict[int, tuple[int, int] | None]   # PC -> (slot, width) or None

    @property
    def names(self) -> dict[int, str]:
        return {s: n for n, s in self.slots.items()}

    def prompt_tokens(self) -> list[str]:
        out = []
        for p in sorted(self.dests):
            d = self.dests[p]
            out += [f"<pa {p}>", tok_pd(*d) if d else tok_pd(None)]
        return out

    def stream_tokens(self, tokens) -> list[str]:
        """The oracle's stream (gpu_layers.machine.protocol tuples) as this circuit's tokens; the
        dump section and <halt> become one <end>. Refused by name: other warps, lane groups >= 4,
        PCs outside the program, blocks >= 1024, undefined lanes that did not execute, predicate
        results (lane state 3) on an instruction that is not predicate-only, <d> tokens for a
        predicate, chunks beyond the destination's width, <d> of lanes other than 0 in an S = 1
        group, a <g> before any <wi> of its block."""
        out = []
        dest = None
        in_issue = False
        same = 0
        for t in tokens:
            k = t[0]
            if k == "blk":
                if not 0 <= t[1] < MAX_BLOCKS:
                    raise RegfileError(f"block {t[1]}: the register file v1 runs blocks < {MAX_BLOCKS}")
                out.append(f"<blk {t[1]}>")
                in_issue = False
            elif k == "wi":
                if t[1] != 0:
                    raise RegfileError(f"<wi {t[1]} {t[2]}>: the register file v1 runs one warp per block")
                if t[2] not in self.dests:
                    raise RegfileError(f"<wi 0 {t[2]}>: PC {t[2]} is not in the program")
                dest = self.dests[t[2]]
                in_issue = True
                out.append(f"<wi 0 {t[2]}>")
            elif k == "g":
                _, grp, states, u, s = t
                if not in_issue:
                    raise RegfileError(f"<g {grp}> before any <wi> of its block")
                if not 0 <= grp < GROUPS:
                    raise RegfileError(f"lane group {grp}: the register file v1 has {GROUPS} groups (16 threads)")
                _, ex, pv = lane_masks(states)
                if u & ~ex & 15:
                    raise RegfileError(f"<g {grp}>: undefined lanes {u:04b} that did not execute ({ex:04b})")
                pred = dest is not None and dest[1] == 1
                if pv & ~u & 15 and not pred:
                    raise RegfileError(f"<g {grp}>: predicate results {pv:04b} on an instruction that "
                                       "writes no predicate")
                lanes = [3 if (u >> j) & 1 else 2 if (pv >> j) & 1 else 1 if (ex >> j) & 1 else 0
                         for j in range(LANES)]
                if s == 2 and (u or pred or grp == 0):
                    raise RegfileError(f"<g {grp}> with S = 2 (the previous group's values) on group 0, a "
                                       "predicate or undefined lanes")
                same = s
                out.append(tok_g(grp, lanes, same))
            elif k == "d":
                _, j, c, x = t
                if dest is not None and dest[1] == 1:
                    raise RegfileError(f"<d {j} {c} {x:#x}> for a predicate: its value is in <g>'s lane states")
                if same == 2:
                    raise RegfileError(f"<d {j} {c} {x:#x}> in an S = 2 group: its values are the previous group's")
                if same and j:
                    raise RegfileError(f"<d {j} {c} {x:#x}> in an S = 1 group: its value is sent once, as lane 0")
                width = dest[1] if dest is not None else WBITS
                if c == FILL and width >= 32 and FILL_X0 <= x < 1 << PAYLOAD and 0 <= j < LANES:
                    out.append(tok_d(j, c, x))
                    continue
                if c == COPY:
                    if not 0 <= x < j < LANES or same:
                        raise RegfileError(f"<d {j} {c} {x}>: a lane copies an earlier lane of its "
                                           "group, in a group that sends its lanes' own values")
                    out.append(tok_d(j, c, x))
                    continue
                if not 0 <= j < LANES or not 0 <= c < CHUNKS or x >> max(0, min(chunk_bits(c), width - PAYLOAD * c)):
                    raise RegfileError(f"<d {j} {c} {x:#x}>: beyond the destination's {width} bits")
                out.append(tok_d(j, c, x))
            elif k in ("dump", "halt"):
                out.append(END)
                break
            else:
                raise RegfileError(f"token kind {k!r} is not part of the register-file stream")
        return out


def program_of(kernel, pcs: int = PCS) -> RegfileProgram:
    """The register file's view of an allocated machine kernel (gpu_layers.machine.allocate):
    slots in the order of the interpreter's register table (predicates, then 16-, 32-, 64-bit
    machine registers); past 32 machine registers, registers of different widths whose live
    ranges never meet share a slot (regalloc.shared_slots: a slot then holds whichever was
    written last); and each PC's destination. Refused by name: more than 32 slots, PCs beyond
    `pcs`, instructions with two destinations."""
    from gpu_layers.interp.machine import program_for
    from gpu_layers.machine.protocol import destinations
    from gpu_layers.machine.regalloc import register_slots

    prog = program_for(kernel)
    names = list(prog.regbits)
    slots = register_slots(kernel, REGS)
    if len(names) > REGS:
        if max(slots.values(), default=-1) >= REGS:
            raise RegfileError(f"{len(names)} registers in {max(slots.values()) + 1} slots: the register "
                               f"file holds {REGS} per thread (allocate the kernel first: "
                               "gpu_layers.machine.allocate)")
    bad = [w for w in prog.regbits.values() if w not in WIDTHS]
    if bad:
        raise RegfileError(f"registers of {sorted(set(bad))} bits: the register file v1 holds 1, 16, 32, 64")
    if len(prog.code) > pcs:
        raise RegfileError(f"{len(prog.code)} machine instructions: the register file holds PCs < {pcs}")
    dests = {}
    for pc, d in destinations(kernel).items():
        if len(d) > 1:
            ins = prog.code[pc]
            raise RegfileError(f"line {ins.line}: `{ins.text}` writes {len(d)} registers "
                               f"({', '.join(n for n, _ in d)}): the register file v1 commits one per lane group")
        dests[pc] = (slots[d[0][0]], d[0][1]) if d else None
    return RegfileProgram(slots, dests)


@dataclass
class RegfileMachine(CompiledCircuit):
    label: ClassVar[str] = "the register file v1"
    token_error: ClassVar[type] = RegfileError

    @staticmethod
    def program(kernel) -> RegfileProgram:
        return program_of(kernel)


def build_regfile(config) -> RegfileMachine:
    """Compile the register-file commit v1 for a Qwen3.5 text config (or shapes dict)."""
    s = Shapes.of(config)
    if s.linear_key_head_dim < SLOTS or s.linear_value_head_dim < 2 * WBITS or s.linear_num_key_heads < 16:
        raise RegfileError(f"the register file v1 needs key heads of >= {SLOTS} slots, value heads of "
                           f">= {2 * WBITS} dims and 16 heads per layer (Qwen3.5-2B's shapes); got "
                           f"{s.linear_key_head_dim}, {s.linear_value_head_dim}, {s.linear_num_key_heads}")
    c = Circuit("regfile_v1")
    kind = c.input(onehot("kind", len(KINDS)))
    hot = {k: kind.hot(i) for i, k in enumerate(KINDS)}
    pa_lo = c.input(bits("pa_lo", 7), default=0)          # <pa P> / <wi 0 P>: P mod 128
    pa_hi = c.input(bits("pa_hi", 2), default=0)          # ... P // 128
    f = regfile_layers(c, hot, pa_lo, pa_hi)

    # ---- L3 mixer: the register file, per lane, slot 32 K + R (write-only) ---------------------
    B.memory(c, RF_PORT, SLOTS, WBITS, f.rf_addr, None, f.rf_data, we=f.rf_we, blank=f.rf_blank,
             reset=hot["blk"], lanes=LANES, read=False)

    # ---- vocabulary ----------------------------------------------------------------------------
    K = KINDS.index
    for p in range(PCS):
        c.token(f"<pa {p}>", kind=K("pa"), pa_lo=p % BANK, pa_hi=p // BANK)
    for name, inputs in pd_tokens():
        c.token(name, kind=K("pd"), **inputs)
    for b in range(MAX_BLOCKS):
        c.token(f"<blk {b}>", kind=K("blk"))
    for p in range(PCS):
        c.token(f"<wi 0 {p}>", kind=K("wi"), pa_lo=p % BANK, pa_hi=p // BANK)
    for k in range(GROUPS):
        for code in range(4 ** LANES):
            lanes = [(code >> (2 * j)) & 3 for j in range(LANES)]
            for sf in (0, 1, 2):
                if sf == 2 and (k == 0 or max(lanes) > 1):      # S = 2: a later group, plain lanes
                    continue
                c.token(tok_g(k, lanes, sf), kind=K("g"), **g_inputs(k, lanes, sf))
    for j in range(LANES):
        for ch in range(CHUNKS):
            for x in range(1 << chunk_bits(ch)):
                c.token(tok_d(j, ch, x), kind=K("d"), **d_inputs(j, ch, x))
        for x in range(FILL_X0, 1 << PAYLOAD):      # fills: -256 .. -1 as 32 bits
            c.token(tok_d(j, FILL, x), kind=K("d"), **d_inputs(j, FILL, x))
        for i in range(j):                           # lane copies
            c.token(tok_d(j, COPY, i), kind=K("d"), **d_inputs(j, COPY, i))
    c.token(END, kind=K("end"))
    comp = compile_circuit(c, config)
    ids = {n: i for i, n in enumerate(comp.machine.token_names)}
    return RegfileMachine(comp, ids)


def pd_tokens():
    """(name, inputs) of the <pd> prompt tokens."""
    yield tok_pd(None), {}
    for r in range(REGS):
        for w in WIDTHS:
            yield tok_pd(r, w), dict(preg=r, pwf=1)


def g_inputs(k: int, lanes: list[int], sf: int) -> dict:
    """The register file's inputs of a <g K ..> token; lanes[j]: 0 not executed, 1 executed,
    2 predicate true, 3 undefined."""
    e = sum(int(st > 0) << j for j, st in enumerate(lanes))
    u = sum(int(st == 3) << j for j, st in enumerate(lanes))
    return dict(gk=k, ge=e, gu=u, gsf=int(sf == 1), gxp=int(sf != 2),
                **{f"b0_{j}": int(lanes[j] == 2) for j in range(LANES)})


def d_inputs(j: int, ch: int, x: int) -> dict:
    """The register file's inputs of a <d J C X> token (C = FILL: chunk 0 is X, bits 11..31 ones;
    C = COPY: lane J's value is lane X's, a flag in lane J's chunk-0 head)."""
    if ch == COPY:
        return dict(dsel=CHUNKS * j, **{f"dcp{x}": 1})
    fill = ch == FILL
    return dict(dsel=CHUNKS * j + (0 if fill else ch), xb0=x & 1, xm8=(x >> 1) & 255, x9=(x >> 9) & 1,
                x10=(x >> 10) & 1, dfill=int(fill), **{f"b0_{jj}": x & 1 for jj in range(LANES)})


def regfile_layers(c: Circuit, hot: dict, pa_lo, pa_hi, groups: int = GROUPS, pcs: int = PCS,
                   warps: int = 1, wi_warp=None, addr=None, cinst=None, dest=None) -> SimpleNamespace:
    """The write-back commit's layers in circuit `c` (`hot`: {kind: 0/1 Lin} for the kinds pa, pd,
    blk, wi, g, d, end; pa_lo / pa_hi: the <pa P> / <wi .. P ..> address inputs) for a warp of
    `groups` lane groups (4: 16 threads, 8: a whole 32-thread warp). Returns the register file's
    write port for the caller's register-file memories: the address inside a bank (rf_addr,
    32 (K mod 4) + R; a key head holds 128 slots, so 8 groups take two banks of heads per lane,
    bank K // 4), rf_data per lane, per-bank write enables rf_we_bank[b] (rf_we = rf_we_bank[0]
    for one bank) and blank flags; and the group registers. pcs: the
    program's capacity (a multiple of 128 machine instructions from 512 to 1,920: banks of 128). warps: a block's warps (1,
    or 2 / 4 with `groups` 8: then wi_warp is the <wi W ..> token's W input, the register file has
    `warps` x 2 banks per lane, bank 2 W + K // 4, and the issuing warp is kept with each group's
    state, since the commit of an issue's last group comes at the next issue's <wi>). When the
    caller has them already: addr, the <pa> address registers (lo, hi); cinst, the current PC's
    registers (lo, hi, written at <wi>); dest, the current instruction's destination (R, writes:
    a 6-bit field read at cinst in layer 1 from the caller's program memory, whose <pd> tokens
    set the inputs preg and pwf), else the register file's own program."""
    if warps not in (1, 2, 4) or (warps > 1 and (groups != 8 or wi_warp is None)):
        raise RegfileError(f"{warps} warps of {groups} lane groups: the register file runs one warp, "
                           "or 2 or 4 whole warps of 8 groups")
    if groups not in (4, 8):
        raise RegfileError(f"{groups} lane groups: the register file runs 4 (16 threads) or 8 (32)")
    if pcs % BANK or not 512 <= pcs <= 15 * BANK:
        raise RegfileError(f"a program of {pcs} PCs: the register file runs a multiple of {BANK} from 512 to "
                           f"{15 * BANK}")
    banks = pcs // BANK
    hib = (banks - 1).bit_length()                        # bits of a program bank index
    gb = groups.bit_length() - 1                          # bits of a group index
    gbanks = groups // GROUPS                             # register-file banks of one warp
    nrb = warps * gbanks                                  # register-file banks (heads per lane)
    wb = (warps - 1).bit_length()                         # bits of a warp index
    if dest is None:
        preg = c.input(bits("preg", 5), default=0)        # <pd R bW>: R
        pwf = c.input(bits("pwf", 1), default=0)          # <pd R bW>: 1 (writes a register)
    gk = c.input(bits("gk", gb), default=0)               # <g K ..>: K
    ge = c.input(bits("ge", LANES), default=0)            # <g>: executed lanes
    gu = c.input(bits("gu", LANES), default=0)            # <g>: undefined lanes
    gsf = c.input(bits("gsf", 1), default=0)              # <g>: S = 1
    gxp = c.input(bits("gxp", 1), default=0)              # <g>: S < 2 (the group sends its values)
    b0 = [c.input(bits(f"b0_{j}", 1), default=0) for j in range(LANES)]   # <g>: lane j's predicate
    #                                                     # result; <d>: X bit 0 (chunk-0 heads' bit 0)
    dsel = c.input(onehot("dsel", LANES * CHUNKS + 1), default=LANES * CHUNKS)   # <d J C>: 6 J + C
    xb0 = c.input(bits("xb0", 1), default=0)              # <d>: X bit 0
    dfill = c.input(bits("dfill", 1), default=0)          # <d J 6 X>: bits 11..31 are ones
    dcp = [c.input(bits(f"dcp{i}", 1), default=0) for i in range(LANES - 1)]   # <d J 7 I>: I
    xm8 = c.input(bits("xm8", 8), default=0)              # <d>: X bits 1..8
    x9 = c.input(bits("x9", 1), default=0)                # <d>: X bit 9
    x10 = c.input(bits("x10", 1), default=0)              # <d>: X bit 10
    is_g, commit_kind = hot["g"], hot["wi"] + hot["end"]

    # ---- L0 mixer: inputs from the embedding only ----------------------------------------------
    if addr is None:
        addr = (B.memory(c, "addr_lo", 1, 7, 0, 0, pa_lo, we=hot["pa"]).outputs[0],
                B.memory(c, "addr_hi", 1, hib, 0, 0, pa_hi, we=hot["pa"]).outputs[0])
    addr_lo, addr_hi = addr
    curg = B.memory(c, "curg", 1, gb + 1, 0, 0, [[gk, gsf]], we=is_g, reset=hot["blk"]).outputs[0]
    seen = []
    for k in range(groups - 1):
        sel, n = _select_term(gk, k)
        seen.append(B.memory(c, f"seen{k}", 1, 1, 0, 0, gxp, we=is_g + sel - float(n),
                             reset=hot["wi"] + hot["blk"]).outputs[0])
    # the last group that sent its values (S < 2): where an S = 2 group's values are, at <wi>/<end>
    lastx = B.memory(c, "lastx", 1, gb, 0, 0, gk, we=is_g + gxp.bit(0) - 1.0, reset=hot["blk"]).outputs[0]
    if cinst is None:
        cinst = (B.memory(c, "cinst_lo", 1, 7, 0, 0, pa_lo, we=hot["wi"]).outputs[0],
                 B.memory(c, "cinst_hi", 1, hib, 0, 0, pa_hi, we=hot["wi"]).outputs[0])
    cinst_lo, cinst_hi = cinst
    cwarp = [B.memory(c, "cwarp", 1, wb, 0, 0, wi_warp, we=hot["wi"]).outputs[0]] if wb else []

    # ---- L0 MLP: current and pending group ---------------------------------------------------
    ck = c.new_field(bits("ck", gb))      # the current group's K (chunk heads' write slot)
    cs = c.new_field(dual("cs", 1))       # the current group's S
    pk = c.new_field(bits("pk", gb))      # the pending group's K (the commit's read slot)
    pks = c.new_field(bits("pks", gb))    # where its values are: pk, or for S = 2 the last sender
    pen = c.new_field(dual("pen", 1))     # a group is pending at this token
    sp = [seen[k].present(0) for k in range(groups - 1)]
    sx = [seen[k].bit(0) for k in range(groups - 1)]         # seen, and sent its values
    m0 = MLPBuilder(c, "ctl")
    for i in range(gb):
        m0.threshold(ck, i, curg.bit(i) - 0.5, 0.5)
    m0.threshold(cs, 0, curg.bit(gb) - 0.5, 0.5)
    # at <g K>: the largest k < K seen in this issue (seen_K itself is this token's write; groups
    # come in increasing K, so every other seen k is < K): one exclusive step per (K, k), "K is
    # this token's group, k was seen, nothing between them was"; at <wi>/<end>: the last group
    def latest(flags):            # {(K, k): [at <g K>, k < K is the largest with its flag]}
        out = {}
        for K in range(1, groups):
            sel, n = _select_term(gk, K)
            for k in range(K):
                out[(K, k)] = (2.0 * is_g + sel + flags[k] - lsum(flags[kk] for kk in range(k + 1, K))
                               - (2.0 + n + 1.0) + 0.5, 0.5, 1.0)
        return out

    pairs = latest(sp)
    for i in range(gb):
        m0.boolean(pk, i, [v for (K, k), v in pairs.items() if (k >> i) & 1]
                   + [(curg.bit(i) + 2.0 * commit_kind - 2.5, 0.5, 1.0)])
    # the pending group's values: at <g K> in the largest k < K that sent its own (an S = 2 group
    # copies the group before it, which sent or copied in turn; the issue's first group sends); at
    # <wi>/<end> in the last group that sent
    sent = latest(sx)
    for i in range(gb):
        m0.boolean(pks, i, [v for (K, k), v in sent.items() if (k >> i) & 1]
                   + [(lastx.bit(i) + 2.0 * commit_kind - 2.5, 0.5, 1.0)])
    # pending at <g K>: some k < K seen; at <wi>/<end>: a group since <blk>
    m0.boolean(pen, 0, list(pairs.values()) + [(commit_kind + curg.present(0) - 1.5, 0.5, 1.0)])
    m0.build()

    # ---- L1 mixer: the current instruction's destination (R, writes) ---------------------------
    prog = dest if dest is not None else B.banked_memory(
        c, "prog", pcs, 6, (addr_lo, addr_hi), (cinst_lo, cinst_hi), [preg, pwf], we=hot["pd"]).outputs[0]
    # ---- L2 mixer: group state (slot K): R, writes, executed and undefined lanes, warp --------
    gs_x = B.memory(c, "gs", groups, 6 + 2 * LANES + wb, gk, pk, [[prog, ge, gu] + cwarp], we=is_g,
                    reset=hot["blk"]).outputs[0]

    # ---- L1/L2 mixers: chunk heads (lane J, chunk C), slot K ---------------------------------
    cur_s = cs.bit(0)
    chunks = [[None] * CHUNKS for _ in range(LANES)]
    for j in range(LANES):
        for ch in range(CHUNKS):
            if ch == 0:                   # (and the fill flag: bits 11..31 ones, at the commit;
                data = [b0[j], xm8, x9, x10, dfill] + dcp[:j]     # and lane j's copy flags)
            elif chunk_bits(ch) == PAYLOAD:
                data = [xb0, xm8, x9, x10]
            else:
                data = [xb0, xm8]
            col = lsum(dsel.hot(CHUNKS * jj + ch) for jj in range(LANES))     # <d * C *>
            we = dsel.hot(CHUNKS * j + ch) + col + cur_s + 2.0 * is_g - 1.0
            chunks[j][ch] = B.memory(c, f"ch{j}{ch}", groups, chunk_bits(ch) + (1 + j if ch == 0 else 0), ck, pks, [data],
                                     we=we).outputs[0]

    # ---- L2 MLP: the commit: address 32 (pk mod 4) + R and the bank pk // 4, per-lane write
    # enables (per bank) and blank flags --------------------------------------------------------
    rf_addr = c.new_field(bits("rf_addr", 7))
    rf_we = [c.new_field(dual(f"rf_we{b}" if nrb > 1 else "rf_we", LANES)) for b in range(nrb)]
    rf_blank = c.new_field(dual("rf_blank", LANES))
    GE, GU, GW = 6, 6 + LANES, 6 + 2 * LANES          # gs: R (5), writes, E, U, the warp
    mc = MLPBuilder(c, "commit")
    for i in range(5):
        mc.threshold(rf_addr, i, gs_x.bit(i) - 0.5, 0.5)
    for i in range(2):
        mc.threshold(rf_addr, 5 + i, pk.bit(i) - 0.5, 0.5)
    for rb in range(nrb):
        w, kb = divmod(rb, gbanks)
        bsel = lsum(pk.bit(2 + i) if (kb >> i) & 1 else 1.0 - pk.bit(2 + i) for i in range(gb - 2))
        bsel = bsel + lsum(gs_x.bit(GW + i) if (w >> i) & 1 else 1.0 - gs_x.bit(GW + i) for i in range(wb))
        for j in range(LANES):
            mc.threshold(rf_we[rb], j, pen.bit(0) + gs_x.bit(GE + j) + gs_x.bit(5) + bsel - 2.5 - (gb - 2) - wb, 0.5)
    for j in range(LANES):
        mc.threshold(rf_blank, j, gs_x.bit(GU + j) - 0.5, 0.5)
    mc.build()

    we_bank = [[w.bit(j) for j in range(LANES)] for w in rf_we]
    # ---- the commit's value: bits 11..31 are ones where the lane's chunk 0 came as a fill; a
    # lane whose chunk-0 head has copy flag i (its own chunks are zero) takes lane i's value -------
    def own(j, b):                   # (chunk bit, fill bit) forms of bit b of lane j's own value
        ch, at = divmod(b, PAYLOAD)
        return chunks[j][ch].bit(at), (chunks[j][0].bit(PAYLOAD) if PAYLOAD <= b < 32 else 0.0)

    def copy_flag(j, i):
        return chunks[j][0].bit(PAYLOAD + 1 + i)

    lo = [c.new_field(dual(f"rfv_lo{j}", PAYLOAD)) for j in range(LANES)]
    mid = c.new_field(dual("rfv_mid0", 2 * PAYLOAD))                  # lane 0: bits 11..32
    hi = [None] + [c.new_field(dual(f"rfv_hi{j}", WBITS - PAYLOAD)) for j in range(1, LANES)]
    mf = MLPBuilder(c, "value_commit")
    for j in range(LANES):
        for b in range(WBITS if j else 3 * PAYLOAD):
            x, f = own(j, b)
            terms = [(x + f - 0.5, 0.5, 1.0)]
            for i in range(j):       # exclusive: one flag at most, and then lane j's own bits are 0
                xi, fi = own(i, b)
                terms.append((2.0 * copy_flag(j, i) + xi + fi - 2.5, 0.5, 1.0))
            out, at = (lo[j], b) if b < PAYLOAD else (mid, b - PAYLOAD) if not j else (hi[j], b - PAYLOAD)
            mf.boolean(out, at, terms)
    mf.build()
    rf_data = [[lo[0], mid] + chunks[0][3:]] + [[lo[j], hi[j]] for j in range(1, LANES)]
    return SimpleNamespace(rf_addr=rf_addr, rf_data=rf_data,
                           rf_we=we_bank[0], rf_we_bank=we_bank,
                           rf_blank=[rf_blank.bit(j) for j in range(LANES)], curg=curg, gs_x=gs_x,
                           cinst_lo=cinst_lo, cinst_hi=cinst_hi, ck=ck, cs=cs, dsel=dsel, addr_lo=addr_lo,
                           addr_hi=addr_hi)
