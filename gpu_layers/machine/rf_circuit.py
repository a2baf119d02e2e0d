"""The register-file write-back commit, v0: the machine's first real circuit.

It consumes the protocol's tokens (docs/protocol.md) and keeps the register file of one block in
DeltaNet state; the state is read back with gpu_layers.machine.inspect_state. Nothing here executes
instructions: the model is fed the oracle's stream, and the test is that its recurrent state holds
exactly the registers the interpreter holds.

Scope v0 (what this circuit supports; anything else is refused by name when encoding a stream):
  * one block of up to 8 threads: one warp, lane groups 0 and 1 of 4 lanes (thread = 4 K + J);
  * up to 16 machine registers of up to 32 bits per thread (write-backs of 3 chunks of 11 bits;
    chunk 2 carries bits 22..31, so its X < 1024);
  * machine PCs < 64; a program of <pd> prompt tokens, one per instruction;
  * no predicates, poison or 64-bit registers (of <g>'s lane states only "executed" is kept; an instruction
    whose destination is a predicate is given as `none`; streams with U != 0 are refused).

Vocabulary (the machine tokens of this circuit):
  <pd P rR> / <pd P none>   prompt: machine instruction P writes register R (or nothing); stored in a
                            program memory, slot P (the program comes from tokens, never from weights)
  <wi 0 P>                  issue of instruction P (warp 0)
  <g K EEEE S>              lane group K of the issue: executed mask E (printed lane 3 first, as the
                            protocol's `describe` does), S = 1: lane 0's value for every executed lane
  <d J C XXX>               chunk C (bits 11C..11C+10) of lane J's value, hex; zero chunks are absent
  <end>                     end of the stream (stands for the protocol's <dump>/<halt>): commits

The commit: a group's write-back is complete at the token that follows its last <d> (the next <g>,
<wi> or <end>). At that token each executed lane's value (chunks absent = 0) is written into the
register file, per lane J a DeltaNet memory with slot 16 K + R, when the instruction writes a
register. Since a <g> token both starts a group and commits the previous one, and a <wi> both
issues an instruction and commits the last group of the previous one, every memory is arranged so
that the token's own writes never hide the state the commit reads (a slot is replaced whole, one slot
per head per token, write-then-read; docs/machine.md section 2):

  * a group K's chunks go to slot K of 12 chunk heads (one per lane J and chunk C, so the commit
    reads all 12 in one token); <g K> zeroes slot K (absent chunks read 0) while the commit reads
    slot 0 (at <g 1>) or the last group's slot (at <wi>/<end>);
  * the group state (E and the instruction's R, copied at the <g> token) sits in slot K of a
    2-slot memory, so <g 1> writes slot 1 while committing slot 0, and <wi> finds the last group's R
    even though it overwrites the current-instruction memory;
  * every <g 1>, <wi> and <end> commits; <g 0> (which always follows a <wi>) does not. A <g 1>
    right after <wi> (the issue has no group 0) re-commits the last group 0 of an earlier issue:
    harmless, since the group state and chunk slot 0 are written only by <g 0> and its <d>s, that
    group was already committed from this very state, and nothing else writes threads 0-3's slots,
    so the rewrite is idempotent (no "group 0 issued?" memory is needed);
  * S = 1: a <d 0 C X> of an S group is written into the chunk heads of every lane, so the commit
    reads lane J's own heads in every case (no multiplexer).

Layers (as the scheduler places them; TINY and Qwen3.5-2B shapes give the same depth, 4 layers):
  L0 mixer  prog (program memory: <pd> writes slot P, <wi> reads slot P; banked when P's range
            exceeds the key head), curg (K, S of the current group)
  L0 MLP    instr = prog[P] (R, writes?), ck = current K, cs = current S, pk = pending K
            (0 at <g 1>, else the last group's K)
  L1/L2 mix cinst (the current instruction's R, writes?: written at <wi>), 12 chunk heads (written
            at <d>, zeroed at <g>, read at pk), gs (group state, 2 slots: E, R, writes?)
  L2 MLP    rf_addr = 16 pk + R, rf_we[J] = [token commits] and writes? and E[J]
  L3 mixer  rf: 4 lanes x 32 slots x 32 bits, write-only (read from the cache)

    rf = build_rf_machine(config)       # a Qwen3.5 text config or shapes dict
    model = rf.model()
    ids = rf.encode(rf.program_tokens({0: 3, 1: None}) + ["<wi 0 0>", "<g 0 1111 0>", ...])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gpu_layers.craft import blocks as B
from gpu_layers.craft.assemble import Shapes, compile_circuit
from gpu_layers.craft.blocks.base import MLPBuilder
from gpu_layers.craft.circuit import Circuit
from gpu_layers.craft.fields import bits, dual, lsum, onehot
from gpu_layers.craft.machine_model import CompiledCircuit
from gpu_layers.machine.protocol import lane_masks

THREADS, LANES, GROUPS = 8, 4, 2      # one warp of 8 threads: lane groups 0 and 1 of 4 lanes
REGS = 16                             # machine registers per thread
WBITS = 32                            # bits per register
PAYLOAD = 11                          # bits per <d> chunk (the protocol's PAYLOAD)
CHUNKS = 3                            # chunks of a 32-bit value: bits 0-10, 11-21, 22-31
PCS = 64                              # machine PCs < 64
KINDS = ("pd", "wi", "g0", "g1", "d", "end")
RF_PORT = "rf"


class StreamError(ValueError):
    """A protocol token (or program) outside what the v0 circuit supports."""


def chunk_bits(c: int) -> int:
    """Significant bits of chunk c of a WBITS-bit value."""
    return min(PAYLOAD, WBITS - PAYLOAD * c)


# ---- token names ------------------------------------------------------------------------------

def tok_pd(p: int, r: int | None) -> str:
    return f"<pd {p} none>" if r is None else f"<pd {p} r{r}>"


def tok_wi(p: int, w: int = 0) -> str:
    return f"<wi {w} {p}>"


def tok_g(k: int, e: int, s: int) -> str:
    return f"<g {k} {e:04b} {s}>"


def tok_d(j: int, c: int, x: int) -> str:
    return f"<d {j} {c} {x:03x}>"


END = "<end>"


@dataclass
class RFMachine(CompiledCircuit):
    bank_slots: int
    label: ClassVar[str] = "the v0 register-file circuit"
    token_error: ClassVar[type] = StreamError

    @staticmethod
    def program_tokens(program: dict[int, int | None]) -> list[str]:
        """The prompt: {PC: register written (0..15) or None} -> <pd> tokens in PC order."""
        out = []
        for p in sorted(program):
            r = program[p]
            if not 0 <= p < PCS or (r is not None and not 0 <= r < REGS):
                raise StreamError(f"instruction {p} writing {r}: v0 needs PC < {PCS} and register < {REGS}")
            out.append(tok_pd(p, r))
        return out

    @staticmethod
    def stream_tokens(tokens) -> list[str]:
        """Protocol tuples (gpu_layers.machine.protocol) -> token names of this circuit. <blk 0> is
        dropped (one block), the dump section and <halt> become one <end>; refused by name: other
        blocks or warps, PCs >= 64, undefined values (U), chunks beyond bit 31."""
        out = []
        for t in tokens:
            k = t[0]
            if k == "blk":
                if t[1] != 0:
                    raise StreamError(f"block {t[1]}: v0 runs one block")
            elif k == "wi":
                if t[1] != 0 or not 0 <= t[2] < PCS:
                    raise StreamError(f"<wi {t[1]} {t[2]}>: v0 has warp 0 and PCs < {PCS}")
                out.append(tok_wi(t[2]))
            elif k == "g":
                _, grp, states, u, s = t
                e = lane_masks(states)[1]
                if grp >= GROUPS:
                    raise StreamError(f"lane group {grp}: v0 has {GROUPS} groups (8 threads)")
                if u:
                    raise StreamError(f"<g {grp}> with undefined lanes {u:04b}: v0 has no poison")
                out.append(tok_g(grp, e, s))
            elif k == "d":
                _, j, c, x = t
                if c >= CHUNKS or x >> chunk_bits(c):
                    raise StreamError(f"<d {j} {c} {x:#x}>: v0 registers are {WBITS} bits")
                out.append(tok_d(j, c, x))
            elif k in ("dump", "halt"):
                out.append(END)
                break
            else:
                raise StreamError(f"token kind {k!r} is not part of the v0 stream")
        return out


def build_rf_machine(config) -> RFMachine:
    """Compile the v0 register-file commit circuit for a Qwen3.5 text config (or shapes dict)."""
    s = Shapes.of(config)
    bank_slots = min(s.linear_key_head_dim, PCS)
    if bank_slots & (bank_slots - 1) or 2 * REGS > s.linear_key_head_dim \
            or s.linear_value_head_dim < 2 * PAYLOAD:
        raise StreamError("v0 needs a power-of-two key head of >= 32 slots and value heads of >= 22 dims")
    banks = PCS // bank_slots
    c = Circuit("rf_commit_v0")
    kind = c.input(onehot("kind", len(KINDS)))
    hot = {k: kind.hot(i) for i, k in enumerate(KINDS)}
    pa = c.input(bits("pa", bank_slots.bit_length() - 1), default=0)          # P mod bank
    pb = c.input(bits("pb", banks.bit_length() - 1), default=0) if banks > 1 else None   # P's bank
    preg = c.input(bits("preg", 4), default=0)          # <pd>: the register written
    pwf = c.input(bits("pwf", 1), default=0)            # <pd>: 1 = writes a register
    gk = c.input(bits("gk", 1), default=0)              # <g>: K
    ge = c.input(bits("ge", LANES), default=0)          # <g>: E
    gsf = c.input(bits("gsf", 1), default=0)            # <g>: S
    dsel = c.input(onehot("dsel", LANES * CHUNKS + 1), default=LANES * CHUNKS)   # <d>: 3 J + C
    xlo = c.input(bits("xlo", 10), default=0)           # <d>: X bits 0..9
    xhi = c.input(bits("xhi", 1), default=0)            # <d>: X bit 10

    is_g = hot["g0"] + hot["g1"]
    # L0 mixer: program, current group
    prog = B.banked_memory(c, "prog", PCS, 5, (pa, pb), (pa, pb), [preg, pwf], we=hot["pd"])
    instr = prog.outputs[0]                             # bits 0-3: R, bit 4: writes
    curg = B.memory(c, "curg", 1, 2, 0, 0, [[gk, gsf]], we=is_g).outputs[0]

    # L0 MLP: control bits
    ck = c.new_field(bits("ck", 1))      # the current group's K (the chunk heads' write slot)
    pk = c.new_field(bits("pk", 1))      # the pending group's K (the commit's read slot)
    cs = c.new_field(dual("cs", 1))      # the current group's S
    mb = MLPBuilder(c, "ctl")
    mb.threshold(ck, 0, curg.bit(0) - 0.5, 0.5)
    mb.threshold(pk, 0, curg.bit(0) + hot["wi"] + hot["end"] - 1.5, 0.5)
    mb.threshold(cs, 0, curg.bit(1) - 0.5, 0.5)
    mb.build()
    cur_s = cs.bit(0)
    commit = hot["g1"] + hot["wi"] + hot["end"]       # 0/1, from the embedding

    # L1: the current instruction (placed before the chunk heads so it gets layer 1)
    cinst = B.memory(c, "cinst", 1, 5, 0, 0, instr, we=hot["wi"]).outputs[0]
    # L1/L2: chunk heads (J, C), slot K
    chunks = [[None] * CHUNKS for _ in range(LANES)]
    for j in range(LANES):
        for ch in range(CHUNKS):
            data = [xlo, xhi] if chunk_bits(ch) == 11 else [xlo]
            col = lsum(dsel.hot(3 * jj + ch) for jj in range(LANES))   # <d * C *>
            we = dsel.hot(3 * j + ch) + col + cur_s + 2.0 * is_g - 1.0
            chunks[j][ch] = B.memory(c, f"ch{j}{ch}", GROUPS, chunk_bits(ch), ck, pk, [data], we=we).outputs[0]
    # L2: group state, slot K: E, R, writes?
    gs = B.memory(c, "gs", GROUPS, LANES + 5, gk, pk, [[ge, cinst]], we=is_g).outputs[0]

    # L2 MLP: the commit's address and per-lane write enables
    rf_addr = c.new_field(bits("rf_addr", 5))
    rf_we = c.new_field(dual("rf_we", LANES))
    mc = MLPBuilder(c, "commit")
    for i in range(4):
        mc.threshold(rf_addr, i, gs.bit(LANES + i) - 0.5, 0.5)
    mc.threshold(rf_addr, 4, pk.bit(0) - 0.5, 0.5)
    for j in range(LANES):
        mc.threshold(rf_we, j, commit + gs.bit(LANES + 4) + gs.bit(j) - 2.5, 0.5)
    mc.build()

    # L3: the register file, per lane, slot 16 K + R (write-only: read from the cache)
    B.memory(c, RF_PORT, GROUPS * REGS, WBITS, rf_addr, None, [chunks[j] for j in range(LANES)],
             we=[rf_we.bit(j) for j in range(LANES)], lanes=LANES, read=False)

    # vocabulary
    def pv(p):
        return dict(pa=p % bank_slots, **({"pb": p // bank_slots} if banks > 1 else {}))
    for p in range(PCS):
        c.token(tok_pd(p, None), kind=KINDS.index("pd"), **pv(p))
        for r in range(REGS):
            c.token(tok_pd(p, r), kind=KINDS.index("pd"), preg=r, pwf=1, **pv(p))
    for p in range(PCS):
        c.token(tok_wi(p), kind=KINDS.index("wi"), **pv(p))
    for k in range(GROUPS):
        for e in range(1 << LANES):
            for sf in (0, 1):
                c.token(tok_g(k, e, sf), kind=KINDS.index(f"g{k}"), gk=k, ge=e, gsf=sf)
    for j in range(LANES):
        for ch in range(CHUNKS):
            for x in range(1 << chunk_bits(ch)):
                c.token(tok_d(j, ch, x), kind=KINDS.index("d"), dsel=3 * j + ch, xlo=x & 1023, xhi=x >> 10)
    c.token(END, kind=KINDS.index("end"))
    comp = compile_circuit(c, config)
    ids = {n: i for i, n in enumerate(comp.machine.token_names)}
    return RFMachine(comp, ids, bank_slots)
