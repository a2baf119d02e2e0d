"""The machine's control unit: per-thread PCs in DeltaNet state, the cursor-rule scheduler, barriers.

The model predicts every control token of the protocol (docs/protocol.md) itself: which block
starts (`<blk B>`), which PC the warp issues next and the barrier phase (`<wi 0 P H>`, the
interpreter's cursor rule),
which lane group is issued next and which of its lanes are at that PC (`<g K L ..>`'s K and the
issued part of L), and when the launch is over (`<halt>`). The datapath (register file, ALU,
memory) is not part of this circuit: the stream's `<g>` lane states and `<d>` tokens are taken as
given (teacher forcing), and the test is that at every position where the oracle's next token is a
control token, the model's prediction among the tokens of that kind is exactly it.

Why the state lives where it lives (docs/machine.md section 2: a DeltaNet memory cannot compute
its own next value):
  * a thread's PC moves only when it is issued; which lanes were issued is carried by the `<g>`
    token (its lane states), so the PC file's per-thread write enable comes from the embedding, and
    the new PC (PC + 1, or the branch target when taken) from the issue memory and the program;
  * the cursor is the issued PC + 1, carried by the `<wi 0 P>` token (its embedding holds P + 1);
  * the block index comes with `<blk B>` (its embedding holds B + 1);
  * a thread at `bar.sync` stores "waiting in phase g" (the phase of its step) in its PC word; the
    step after which every alive thread waits (the last arrives, or the last one not waiting exits)
    releases them all: the next `<wi 0 P H>` carries the flipped phase, and from then on nobody
    waits in it. Nothing is rewritten at a release (the phase computes its own next value: only a
    token can carry it). At the releasing step's last token both pickers' answers exist (the
    threads free to run, and all alive threads) and the release bit selects one;
  * a new block needs no writes: `<blk>` resets the PC file (the gate closes), and an unwritten
    PC reads as 0 with the thread runnable;
  * the machine's warp barrier (`<pc wbar>`, blocks of several warps: Kernel.warp_barriers) is
    the same rule for one warp, with the warp's own generation G in place of the phase: a lane
    there stores "sync-waiting in generation G" in its PC word; a warp whose every alive lane
    waits in its current G can run, and the `<w W H G>` that names it next carries the flipped G
    (each warp's G and whether it is due to flip are kept with its summary), after which its
    lanes are free at their PCs. G comes with `<w>` into a one-slot register.

Scope (refused by name otherwise, `ControlError`): blocks of up to `threads` threads (4 .. 32:
one warp; 64 .. 256: several warps, the round robin's `<w W H G>` before each `<wi W P H>`), machine
PCs < 512 (the unit alone; a multiple of 128 up to 1,920 as `pcs`), up to 1024 blocks, barriers of the whole block and (several warps) the
machine's warp barrier; no PTX warp-synchronous instructions (shfl/vote/match/bar.warp.sync wait
for their membermask: the lowering turns shfl and vote into staging-array sequences).

Vocabulary:
  prompt   <nt T>  threads per block       <nb N>  blocks in the grid
           <pa P>  program address          <pc plain|exit|bar|wbar> / <pc bra T>: instruction P's
                                            control word (written at the last <pa>)
  trace    <blk B>  <w W H G>  <wi W P H>  <g K L>  <d>  <halt>   (<g>'s U and S and every <d>'s content are
           not control: the circuit's tokens drop them, `stream_tokens` maps the oracle's stream)

Layers (as the scheduler places them for Qwen3.5-2B's shapes, 16 threads):
  L0 mixer  the prompt registers (address, launch), the block register (B + 1), the phase
            register (H), the generation register (G of <w W H G>), the group register (the last
            issued group K + 1, reset by <wi>)
  L1 mixer  program memory (4 banks of 128 control words), read at <wi>'s P
  L2 mixer  the issue register: P, P + 1, the control word (written at <wi>)
  L2 MLP    each lane's next PC word for a <g> token: PC, exited, waiting at the block barrier or
            at the warp barrier, the phase or generation it waits in
  L3 mixer  the PC file: one head per thread (slot 0), written at <g> where the lane was issued
  L3-L6 MLP free to run / alive, below/at-or-above the cursor, at P; two pairwise pickers (the
            lowest PC at or after the cursor, else the lowest: among the free threads, and among
            all alive ones), the release bit, the next PC and phase; the next lane group
  LM head   <wi 0 P H>: the next PC and phase; <g K L>: the next group and its issued lanes;
            <blk>/<halt>
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import ClassVar

from gpu_layers.craft import blocks as B
from gpu_layers.craft.assemble import compile_circuit
from gpu_layers.craft.blocks.base import MLPBuilder
from gpu_layers.craft.circuit import Circuit
from gpu_layers.craft.fields import Lin, bits, dual, lsum, onehot
from gpu_layers.craft.machine_model import CompiledCircuit
from gpu_layers.errors import QwenGPUError
from gpu_layers.machine.protocol import lane_masks

LANES = 4
PCBITS = 10              # PCs < 512 in the program; P + 1 <= 512 needs 10 bits
MAX_PC = 512
MAX_PCS = 15 << 7        # programs of up to 1,920 PCs: 15 banks of 128, the memories one layer holds
BANK_BITS = 7            # 128 control words per program bank (Qwen3.5-2B's key head)
BBITS = 10               # blocks <= 1024 (B + 1 <= 1024 needs 11 bits: see nb1)
MAX_BLOCKS = 1024
KINDS = ("nt", "nb", "pa", "pc", "blk", "w", "wi", "g", "d", "halt")
CW = ("plain", "bra", "exit")


class ControlError(QwenGPUError):
    """A kernel, launch or stream outside what the control unit supports."""


def tok_g(k: int, states: int) -> str:
    return f"<g {k} " + " ".join(str((states >> (2 * j)) & 3) for j in reversed(range(LANES))) + ">"


@dataclass
class ControlUnit(CompiledCircuit):
    threads: int
    label: ClassVar[str] = "the control unit"
    token_error: ClassVar[type] = ControlError

    # ---- prompt and stream ------------------------------------------------------------------
    def prompt_tokens(self, kernel, grid, block) -> list[str]:
        """The launch and the program's control words as prompt tokens (refuses what the unit lacks)."""
        from gpu_layers.interp.machine import program_for

        nthreads = block[0] * block[1] * block[2]
        nblocks = grid[0] * grid[1] * grid[2]
        if not 1 <= nthreads <= self.threads:
            raise ControlError(f"{nthreads} threads per block: the control unit runs up to {self.threads}")
        if not 1 <= nblocks <= MAX_BLOCKS:
            raise ControlError(f"{nblocks} blocks: the control unit runs up to {MAX_BLOCKS}")
        code = program_for(kernel).code
        if len(code) > MAX_PC:
            raise ControlError(f"{len(code)} machine instructions: the control unit holds {MAX_PC}")
        out = [f"<nt {nthreads}>", f"<nb {nblocks}>"]
        for p, ins in enumerate(code):
            out += [f"<pa {p}>", control_word(ins, nthreads)]
        return out

    def stream_tokens(self, tokens) -> list[str]:
        """The oracle's stream (gpu_layers.machine.protocol tuples) as this circuit's tokens: <g>
        keeps K and the lane states, every <d> becomes <d>, the dump section is dropped."""
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
                out.append(tok_g(t[1], t[2]))
            elif k == "d":
                out.append("<d>")
            elif k == "halt":
                out.append("<halt>")
        return out

    def allowed(self, name: str) -> list[int]:
        """The token ids the model chooses among where the oracle's next token is `name`: every
        <wi>, <blk> and <halt> after an issue; the <g> tokens whose executed and predicate parts
        equal the oracle's (those come from the datapath), the group and issued lanes varying."""
        ids = self.token_ids
        if name.startswith("<g "):
            want = _g_parts(name)[1:]
            return [i for n, i in ids.items() if n.startswith("<g ") and _g_parts(n)[1:] == want]
        return [i for n, i in ids.items() if n.startswith(("<w ", "<wi ", "<blk ")) or n == "<halt>"]


def control_word(ins, nthreads: int, hold: bool = False) -> str:
    """The <pc ..> prompt token of a decoded machine instruction (refused by name: barriers for
    part of the block, warp-synchronous instructions, the warp barrier in a block of one warp,
    which has no <w> to carry its generation). hold: the instruction is in Kernel.holds
    (after it the same warp takes the next step): `<pc hold>`, a plain instruction."""
    from gpu_layers.interp.decode import WARP_BARRIER

    if hold:
        if ins.kind != "op":
            raise ControlError(f"line {ins.line}: `{ins.text}`: only a plain instruction holds the turn")
        return "<pc hold>"
    if ins.kind == "bra":
        return f"<pc bra {ins.target}>"
    if ins.kind == "exit":
        return "<pc exit>"
    if ins.kind == "bar" and ins.target == WARP_BARRIER:
        if nthreads <= 32:
            raise ControlError(f"line {ins.line}: `{ins.text}`: the warp barrier in a block of one warp "
                               "(the block barrier is the same wait there)")
        return "<pc wbar>"
    if ins.kind == "bar":
        if ins.target and ins.target != nthreads:
            raise ControlError(f"line {ins.line}: `{ins.text}`: a barrier for part of the block")
        return "<pc bar>"
    if ins.kind in ("op", "nop"):
        return "<pc plain>"
    raise ControlError(f"line {ins.line}: `{ins.text}`: warp-synchronous instructions "
                       "are not in the control unit")


def _g_parts(name: str):
    f = name[1:-1].split()
    k = int(f[1])
    st = sum(int(x) << (2 * j) for j, x in enumerate(reversed(f[2:])))
    issued, executed, preds = lane_masks(st)
    return k, executed, preds


def _beats_steps(mb: MLPBuilder, out, n: int, key, runs, big: float) -> list[tuple[int, int]]:
    """out[idx] := [u beats t] for every ordered pair (u, t) of n candidates, u != t: u can run
    and has the lower key, ties to the lower index. Returns the pairs in index order (one
    candidate: no pairs, and out's one entry is 0)."""
    pairs = [(u, t) for t in range(n) for u in range(n) if u != t]
    for idx, (u, t) in enumerate(pairs):
        slack = 0.5 if u < t else -0.5
        mb.threshold(out, idx, key(t) - key(u) + slack - big * (1.0 - runs(u)), 0.5)
    if not pairs:
        mb.threshold(out, 0, Lin({}, -0.5), 0.5)
    return pairs


def _winner_steps(mb: MLPBuilder, out, n: int, beats, pairs, runs) -> None:
    """out[t] := t can run and no candidate beats it (exactly one winner when any can run)."""
    for t in range(n):
        lost = lsum(beats.bit(i) for i, (u, tt) in enumerate(pairs) if tt == t)
        mb.threshold(out, t, runs(t) - lost - 0.5, 0.5)


def _xor_terms(a: Lin, b: Lin) -> list:
    """a XOR b of two 0/1 forms as two exclusive steps (for MLPBuilder.boolean)."""
    return [(a - b - 0.5, 0.5, 1.0), (b - a - 0.5, 0.5, 1.0)]


def _match(value: int, field, n: int) -> Lin:
    """+-1 agreement of the n low bits of value with a bits field (max n, any miss costs >= 2)."""
    return lsum((1.0 if value >> i & 1 else -1.0) * field.pm(i) for i in range(n))


def build_control_unit(config, threads: int = 16) -> ControlUnit:
    """Compile the control unit for a Qwen3.5 text config (or shapes dict) and blocks of up to
    `threads` threads (4 .. 32: one warp; 64 .. 256: several warps, round robin)."""
    comp = compile_circuit(control_circuit(threads), config)
    ids = {n: i for i, n in enumerate(comp.machine.token_names)}
    return ControlUnit(comp, ids, threads)


def control_circuit(threads: int = 16) -> Circuit:
    """The control unit's circuit, not compiled."""
    c = Circuit("control_v2")
    f = control_layers(c, threads)
    control_tokens(c, f)
    for k in range(f.G):
        for st in range(1 << (2 * LANES)):
            issued, executed, _ = lane_masks(st)
            name = tok_g(k, st)
            c.token(name, kind=KINDS.index("g"), **g_inputs(f, k, issued, executed))
            c.logit(name, g_logit(f, k, issued))
    c.token("<d>", kind=KINDS.index("d"))
    return c


def control_layers(c: Circuit, threads: int, kinds: tuple = KINDS, pcs: int = MAX_PC,
                   program=None) -> SimpleNamespace:
    """The control unit's layers in circuit `c` (`kinds`: the token kinds of the circuit's one
    `kind` input, a superset of KINDS); returns its fields (inputs, registers, the next step) for
    the vocabulary and for a datapath built on top (gpu_layers.machine.core). pcs: the program's
    capacity in machine instructions (a multiple of 128 from 512 to 1,920: banks of 128 control
    words, 15 at most: the memories one layer holds).
    program(addr, (pa_lo, pa_hi), hot, [cw, tgt, hold]): the control word of the instruction
    <wi> names (a bits field read in layer 1) from the caller's program memory (addr: the <pa>
    address registers; the <pa> / <wi> address inputs; the token kinds), else the unit's own,
    written at <pc> and read at <wi>'s P."""
    if pcs % (1 << BANK_BITS) or not 512 <= pcs <= MAX_PCS:
        raise ControlError(f"a program of {pcs} PCs: the control unit holds a multiple of 128 from 512 to {MAX_PCS}")
    pcb = pcs.bit_length()               # bits of P + 1 <= pcs
    hib = ((pcs - 1) >> BANK_BITS).bit_length()     # bits of a bank index P // 128
    pab = BANK_BITS + hib                # bits of P < pcs
    if threads not in (4, 8, 16, 32, 64, 128, 256):
        raise ControlError("threads must be 4, 8, 16, 32, 64, 128 or 256")
    L = min(threads, 32)                  # lanes of a warp (one PC head each)
    NW = max(1, threads // 32)            # warps of a block (PC slots)
    G = L // LANES                        # lane groups of a warp
    WB = max(1, (NW - 1).bit_length())    # bits of a warp index
    TB = threads.bit_length()             # bits of a thread count <= threads
    kind = c.input(onehot("kind", len(kinds)), default=kinds.index("d"))
    hot = {k: kind.hot(i) for i, k in enumerate(kinds)}
    nt_in = c.input(bits("nt_in", TB), default=0)             # <nt T>: T
    nb_in = c.input(bits("nb_in", BBITS + 1), default=0)      # <nb N>: N
    pa_lo = c.input(bits("pa_lo", BANK_BITS), default=0)      # <pa P> / <wi W P H>: P mod 128
    pa_hi = c.input(bits("pa_hi", hib), default=0)              # ... P // 128
    p1 = c.input(bits("p1", pcb), default=0)               # <wi W P H>: P + 1
    cw = c.input(bits("cw", 4), default=0)                    # <pc ..>: bit 0 bra, 1 exit, 2 bar, 3 wbar
    hold = c.input(bits("hold", 1), default=0)                # <pc hold>: the warp keeps the turn
    tgt = c.input(bits("tgt", pcb), default=0)             # <pc bra T>: T
    ph = c.input(bits("ph", 1), default=0)                    # <wi W P H> / <w W H G>: H
    wg = c.input(bits("wg", 1), default=0)                    # <w W H G>: G
    ww = c.input(bits("ww", WB), default=0)                   # <wi W P H> / <w W H G>: W
    ww1 = c.input(bits("ww1", WB + 1), default=0)             # <wi W P H>: W + 1
    nb1 = c.input(bits("nb1", BBITS + 1), default=0)          # <blk B>: B + 1
    gk1 = c.input(bits("gk1", 4), default=0)                  # <g K ..>: K + 1
    gwe = c.input(bits("gwe", L), default=0)                  # <g K L>: lanes issued (at 4K + j)
    gex = c.input(bits("gex", LANES), default=0)              # <g K L>: lanes executed
    # Each gate outweighs just the linear form it gates (a false gate leaves it <= -0.5): a gate
    # multiplies its flags' analog error too (memory reads and a step's true output are 1 only
    # to about 1e-5 .. 1e-4), so an oversized one eats the margin (8 pcs at 1,920 PCs did).
    BIGL = 1024.0                         # lane and thread counts (< 512)
    BIGC = 2.0 * pcs                      # PC minus cursor (|.| <= pcs)
    BIGP = 4.0 * pcs                      # key differences (keys PC + 2 pcs below the cursor: < 3 pcs)
    BIGW = 256.0                          # warp keys (< 72)

    # L0: prompt registers, block, phase and group registers (inputs from the embedding only)
    addr_lo = B.memory(c, "addr_lo", 1, BANK_BITS, 0, 0, pa_lo, we=hot["pa"]).outputs[0]
    addr_hi = B.memory(c, "addr_hi", 1, hib, 0, 0, pa_hi, we=hot["pa"]).outputs[0]
    nthr = B.memory(c, "nthreads", 1, TB, 0, 0, nt_in, we=hot["nt"]).outputs[0]
    nblocks = B.memory(c, "nblocks", 1, BBITS + 1, 0, 0, nb_in, we=hot["nb"]).outputs[0]
    blkreg = B.memory(c, "blkreg", 1, BBITS + 1, 0, 0, nb1, we=hot["blk"]).outputs[0]
    phase_r = B.memory(c, "phase", 1, 1, 0, 0, ph, we=hot["wi"] + hot["w"], reset=hot["blk"]).outputs[0]
    grp = B.memory(c, "grp", 1, 4, 0, 0, gk1, we=hot["g"], reset=hot["wi"] + hot["blk"]).outputs[0]
    gen_r = B.memory(c, "wgen", 1, 1, 0, 0, wg, we=hot["w"], reset=hot["blk"]).outputs[0]
    phase = phase_r.bit(0)
    gen = gen_r.bit(0)                    # the warp barrier generation of the warp this token reads
    tval = lsum((1 << i) * nthr.bit(i) for i in range(TB))

    # L0 MLP: the group after which the next group is searched, the last block, which warps exist,
    # several warps (then each step starts with <w W H G>)
    later = c.new_field(dual("later", G))       # later[K] = K >= (last issued group + 1)
    last = c.new_field(dual("last", 1))         # B + 1 >= number of blocks
    wexists = c.new_field(dual("wexists", NW))
    multi = c.new_field(dual("multi", 1))
    m0 = MLPBuilder(c, "ctl0")
    kc = lsum((1 << i) * grp.bit(i) for i in range(4))
    for k in range(G):
        m0.threshold(later, k, float(k) - kc + 0.5, 0.5)
    m0.threshold(last, 0, lsum((1 << i) * (blkreg.bit(i) - nblocks.bit(i)) for i in range(BBITS + 1)) + 0.5, 0.5)
    for w in range(NW):
        m0.threshold(wexists, w, tval - 32.0 * w - 0.5, 0.5)
    m0.threshold(multi, 0, tval - 32.5, 0.5)
    m0.build()

    # L1: the program (control words), written at <pc> at the last <pa>, read at <wi>'s P
    if program is None:
        prog = B.banked_memory(c, "prog", pcs, 5 + pcb, (addr_lo, addr_hi), (pa_lo, pa_hi), [cw, tgt, hold],
                               we=hot["pc"]).outputs[0]
    else:
        prog = program((addr_lo, addr_hi), (pa_lo, pa_hi), hot, [cw, tgt, hold])

    # L2: the issue register: P + 1, P, the control word (bra, exit, bar, wbar, target, hold), W + 1, W
    issue = B.memory(c, "issue", 1, pcb + pab + 5 + pcb + 2 * WB + 1, 0, 0,
                     [[p1, pa_lo, pa_hi, prog, ww1, ww]], we=hot["wi"], reset=hot["blk"]).outputs[0]
    pcur = [issue.bit(pcb + i) for i in range(pab)]                         # P
    base = pcb + pab
    is_bra, is_exit, is_bar, is_wbar = (issue.bit(base + i) for i in range(4))
    target = [issue.bit(base + 4 + i) for i in range(pcb)]
    is_hold = issue.bit(base + 4 + pcb)
    cur_issue = [issue.bit(i) for i in range(pcb)]                             # P + 1
    wbase = base + 5 + pcb
    wcur = lsum((1 << i) * issue.bit(wbase + i) for i in range(WB + 1))           # W + 1 (0 at a block start)
    wiss = [issue.bit(wbase + WB + 1 + i) for i in range(WB)]                     # W
    wiss_v = lsum((1 << i) * wiss[i] for i in range(WB))
    ww_v = lsum((1 << i) * ww.bit(i) for i in range(WB))

    # L2 MLP: the warp whose PCs this token reads (the <w> token's, else the issuing warp's), which
    # of its lanes exist; each lane's next PC word for a <g> token (PC, exited, waiting at the
    # block barrier, its phase or generation, waiting at the warp barrier)
    WEXIT, WWAIT, WGEN, WSYNC = pcb, pcb + 1, pcb + 2, pcb + 3
    sel = c.new_field(bits("selw", WB))
    lexists = c.new_field(dual("lexists", L))
    npc = [c.new_field(bits(f"npc{j}", pcb + 4)) for j in range(LANES)]
    m2 = MLPBuilder(c, "next_pc")
    isw = hot["w"]
    for i in range(WB):
        m2.boolean(sel, i, [(isw + ww.bit(i) - 1.5, 0.5, 1.0), (wiss[i] - isw - 0.5, 0.5, 1.0)])
    for lane in range(L):
        m2.boolean(lexists, lane, [(tval - 32.0 * ww_v - lane - 0.5 + BIGL * (isw - 1.0), 0.5, 1.0),
                                   (tval - 32.0 * wiss_v - lane - 0.5 - BIGL * isw, 0.5, 1.0)])
    for j in range(LANES):
        ex = gex.bit(j)
        for i in range(pcb):
            m2.boolean(npc[j], i, [(is_bra + ex + target[i] - 2.5, 0.5, 1.0),
                                   (2.0 * cur_issue[i] - is_bra - ex - 0.5, 0.5, 1.0)])
        m2.threshold(npc[j], WEXIT, is_exit + ex - 1.5, 0.5)
        m2.threshold(npc[j], WWAIT, is_bar + ex - 1.5, 0.5)
        m2.threshold(npc[j], WSYNC, is_wbar + ex - 1.5, 0.5)
        m2.boolean(npc[j], WGEN, [(is_bar + ex + phase - 2.5, 0.5, 1.0), (is_wbar + ex + gen - 2.5, 0.5, 1.0)])
    m2.build()

    # L2b MLP: lexists re-digitized. next_pc's steps see pre-activations up to 4,351 margins, at
    # which fp32 leaves up to ~2.6e-4 in an output (craft/precision.py), and the cursor stage
    # weighs lexists by BIGC (3.5 margins of error); a step on t = flag - 0.5 leaves ~1e-7. It
    # takes the empty MLPs between next_pc and the cursor: no layer is added.
    m2b = MLPBuilder(c, "lexists_digital")
    raw = lexists
    lexists = c.new_field(dual("lexists_d", L))
    for t in range(L):
        m2b.threshold(lexists, t, raw.bit(t) - 0.5, 0.5)
    m2b.build()

    # L3: the PC file (one head per lane, slot = warp) and each warp's cursor (written at <wi>)
    NS = 1 << WB                          # warp slots (a binary address of WB bits)
    pcf = [B.memory(c, f"pc{lane}", NS, pcb + 4, sel, sel, npc[lane % LANES], we=gwe.bit(lane),
                    reset=hot["blk"]).outputs[0] for lane in range(L)]
    cursor = B.memory(c, "cursor", NS, pcb, ww, sel, p1, we=hot["wi"], reset=hot["blk"]).outputs[0]

    def pcval(t):
        return lsum((1 << i) * pcf[t].bit(i) for i in range(pcb))

    curv = lsum((1 << i) * cursor.bit(i) for i in range(pcb))
    pv = lsum((1 << i) * pcur[i] for i in range(pab))

    def alive_form(t):
        """0 when lane t of the warp read here exists and has not exited, else <= -1."""
        return lexists.bit(t) - pcf[t].bit(WEXIT) - 1.0

    def free_terms(t, lin, ph_lin=phase):
        """[lin > 0 and lane t alive, not waiting at the block barrier in phase ph_lin, nor at
        the warp barrier in the warp's generation] as exclusive steps."""
        alive = alive_form(t)
        w, g, s = pcf[t].bit(WWAIT), pcf[t].bit(WGEN), pcf[t].bit(WSYNC)
        return [(lin + BIGC * (alive - w - s), 0.5, 1.0),
                (lin + BIGC * (alive + w + g - ph_lin - 2.0), 0.5, 1.0),
                (lin + BIGC * (alive + w - g + ph_lin - 2.0), 0.5, 1.0),
                (lin + BIGC * (alive + s + g - gen - 2.0), 0.5, 1.0),
                (lin + BIGC * (alive + s - g + gen - 2.0), 0.5, 1.0)]

    def alive_terms(t, lin):
        return [(lin + BIGC * alive_form(t), 0.5, 1.0)]

    # L3 MLP: per lane, below / at or after the cursor and at or after P, among the lanes free to
    # run and among all alive ones; free in phase 0 / in phase 1 (the warp's summary)
    fields = {}
    m3 = MLPBuilder(c, "cursor")
    for mode, terms in (("run", free_terms), ("all", alive_terms)):
        for nm in ("below", "after", "atp") if mode == "run" else ("below", "after"):
            fields[mode, nm] = c.new_field(dual(f"{nm}_{mode}", L))
        for t in range(L):
            m3.boolean(fields[mode, "below"], t, terms(t, curv - pcval(t) - 0.5))
            m3.boolean(fields[mode, "after"], t, terms(t, pcval(t) - curv + 0.5))
            if mode == "run":
                m3.boolean(fields[mode, "atp"], t, terms(t, pcval(t) - pv + 0.5))
    freeh = [c.new_field(dual(f"free_ph{h}", L)) for h in (0, 1)]
    for h in (0, 1):
        for t in range(L):
            m3.boolean(freeh[h], t, free_terms(t, Lin({}, 0.5), Lin({}, float(h))))
    syncw = c.new_field(dual("syncw", L))      # alive and waiting at the warp barrier in generation G
    for t in range(L):
        alive, s, g = alive_form(t), pcf[t].bit(WSYNC), pcf[t].bit(WGEN)
        m3.boolean(syncw, t, [(alive + s + g + gen - 2.5, 0.5, 1.0), (alive + s - g - gen - 0.5, 0.5, 1.0)])
    m3.build()

    # L3b MLP: below / after re-digitized. Their steps see pre-activations up to G * 2 pcs / m, at
    # which fp32 rounds a step's output by up to ~1e-4 (measured 6e-5 at a PC distance of 137),
    # and the pickers weigh them by up to 4 pcs (8 pcs then: 0.5 of error, a whole margin,
    # min_index at 1024 PCs). A step on t = flag - 0.5 rounds by ~1e-7.
    m3b = MLPBuilder(c, "cursor_digital")
    for mode in ("run", "all"):
        for nm in ("below", "after"):
            raw = fields[mode, nm]
            fields[mode, nm] = c.new_field(dual(f"{nm}_{mode}_d", L))
            for t in range(L):
                m3b.threshold(fields[mode, nm], t, raw.bit(t) - 0.5, 0.5)
    for h in (0, 1):            # the pick stage sums all L of them: L x 3e-3 would be 0.8 margins
        raw = freeh[h]
        freeh[h] = c.new_field(dual(f"free_ph{h}_d", L))
        for t in range(L):
            m3b.threshold(freeh[h], t, raw.bit(t) - 0.5, 0.5)
    m3b.build()

    def runs(mode, t):
        return fields[mode, "below"].bit(t) + fields[mode, "after"].bit(t)

    # L4 MLP: the lane pickers (u beats t: runnable, lower key, ties to the lower lane), the lanes
    # at P, the one-warp release bit, this warp's summary (no lane alive; none free in phase h;
    # its warp barrier releases: every alive lane waits there; its generation G)
    beats = {}
    act = c.new_field(dual("act", L))
    release = c.new_field(dual("release", 1))
    summ = c.new_field(dual("summary", 5))
    m4 = MLPBuilder(c, "pick")
    for mode in ("run", "all"):
        beats[mode] = c.new_field(bits(f"beats_{mode}", L * (L - 1)))
        below = fields[mode, "below"]
        pairs = _beats_steps(m4, beats[mode], L, lambda t, b=below: pcval(t) + 2.0 * pcs * b.bit(t),
                             lambda t, mode=mode: runs(mode, t), BIGP)
    for t in range(L):
        m4.threshold(act, t, fields["run", "below"].bit(t) + fields["run", "atp"].bit(t) - 1.5, 0.5)
    n_alive = lsum(runs("all", t) for t in range(L))
    n_free = lsum(runs("run", t) for t in range(L))
    m4.threshold(release, 0, n_alive - (2.0 * L) * n_free - 0.5 - BIGL * multi.bit(0), 0.5)
    m4.threshold(summ, 0, 0.5 - n_alive, 0.5)
    for h in (0, 1):
        m4.threshold(summ, 1 + h, 0.5 - lsum(freeh[h].bit(t) for t in range(L)), 0.5)
    n_sync = lsum(syncw.bit(t) for t in range(L))
    m4.threshold(summ, 3, n_sync - float(L) * (n_alive - n_sync) - 0.5, 0.5)
    m4.threshold(summ, 4, gen - 0.5, 0.5)
    m4.build()

    # L5: every warp's summary, written at every token for the warp this token reads
    wreads = []
    for w in range(NW):
        wreads.append(B.memory(c, f"wstate{w}", NS, 5, sel, w, summ, reset=hot["blk"]).outputs[0])

    # L5 MLP: the lane winners; candidate groups; per warp: below / at or after the warp cursor,
    # free (alive, a lane not waiting in the current phase, or its warp barrier releases) or
    # alive; any warp alive; the release
    win = {mode: c.new_field(dual(f"win_{mode}", L)) for mode in ("run", "all")}
    cand = c.new_field(dual("cand", G))
    nphase = c.new_field(bits("nphase", 1))
    wf = {}
    for mode in ("run", "all"):
        for nm in ("below", "after"):
            wf[mode, nm] = c.new_field(dual(f"w{nm}_{mode}", NW))
    anyrun = c.new_field(dual("anyrun", 1))
    wrelease = c.new_field(dual("wrelease", 1))
    m5 = MLPBuilder(c, "winner")
    for mode in ("run", "all"):
        _winner_steps(m5, win[mode], L, beats[mode], pairs, lambda t, mode=mode: runs(mode, t))
    for k in range(G):
        m5.threshold(cand, k, lsum(act.bit(LANES * k + j) for j in range(LANES)) + 4.0 * later.bit(k) - 4.5, 0.5)
    m5.boolean(nphase, 0, _xor_terms(phase, release.bit(0)))

    def wterms(w, lin, mode):
        ex, dead = wexists.bit(w), wreads[w].bit(0)
        if mode == "all":
            return [(lin + BIGW * (ex - dead - 1.0), 0.5, 1.0)]
        nf0, nf1 = wreads[w].bit(1), wreads[w].bit(2)        # no lane free in phase 0 / 1
        wrel = wreads[w].bit(3)                              # (then no lane is free)
        return [(lin + BIGW * (ex - nf0 - phase - 1.0), 0.5, 1.0),
                (lin + BIGW * (ex - nf1 + phase - 2.0), 0.5, 1.0),
                (lin + BIGW * (ex + wrel - 2.0), 0.5, 1.0)]

    for mode in ("run", "all"):
        for w in range(NW):
            m5.boolean(wf[mode, "below"], w, wterms(w, wcur - w - 0.5, mode))
            m5.boolean(wf[mode, "after"], w, wterms(w, w - wcur + 0.5, mode))
    n_walive = lsum(wexists.bit(w) - wreads[w].bit(0) for w in range(NW))
    m5.threshold(anyrun, 0, n_walive - 0.5, 0.5)
    m5.build()

    def wruns(mode, w):
        return wf[mode, "below"].bit(w) + wf[mode, "after"].bit(w)

    # L6 MLP: the next PC (one warp: the free lanes' winner, or all alive lanes' after a release);
    # the first candidate group; the warp pickers; the warp-level release
    nextpc = c.new_field(bits("nextpc", pab))
    nextg = c.new_field(dual("nextg", G))
    wbeats = {mode: c.new_field(bits(f"wbeats_{mode}", max(1, NW * (NW - 1)))) for mode in ("run", "all")}
    rel = release.bit(0)
    m6 = MLPBuilder(c, "next")
    for i in range(pab):
        m6.boolean(nextpc, i, [(win["run"].bit(t) + pcf[t].bit(i) - rel - 1.5, 0.5, 1.0) for t in range(L)]
                   + [(win["all"].bit(t) + pcf[t].bit(i) + rel - 2.5, 0.5, 1.0) for t in range(L)])
    for k in range(G):
        m6.threshold(nextg, k, cand.bit(k) - lsum(cand.bit(kk) for kk in range(k)) - 0.5, 0.5)
    n_wfree = lsum(wruns("run", w) for w in range(NW))
    n_wall = lsum(wruns("all", w) for w in range(NW))
    m6.threshold(wrelease, 0, n_wall - (2.0 * NW) * n_wfree - 0.5, 0.5)
    for mode in ("run", "all"):
        wbelow = wf[mode, "below"]
        wpairs = _beats_steps(m6, wbeats[mode], NW, lambda t, b=wbelow: float(t) + 64.0 * b.bit(t),
                              lambda t, mode=mode: wruns(mode, t), BIGW)
    m6.build()

    # L7 MLP: the warp winners; L8: the next warp and the phase after this step (several warps)
    wwin = {mode: c.new_field(dual(f"wwin_{mode}", NW)) for mode in ("run", "all")}
    m7 = MLPBuilder(c, "wwinner")
    for mode in ("run", "all"):
        _winner_steps(m7, wwin[mode], NW, wbeats[mode], wpairs, lambda t, mode=mode: wruns(mode, t))
    m7.build()
    nextw = c.new_field(bits("nextw", WB))
    nwphase = c.new_field(bits("nwphase", 1))
    ngen = c.new_field(bits("ngen", 1))
    wrel = wrelease.bit(0)
    m8 = MLPBuilder(c, "wnext")
    # after an instruction that holds the turn (Kernel.holds: inside a read-modify-write
    # sequence), the issuing warp again; otherwise the round robin's winner
    for i in range(WB):
        m8.boolean(nextw, i, [(wwin["run"].bit(t) - wrel - is_hold - 0.5, 0.5, 1.0) for t in range(NW) if t >> i & 1]
                   + [(wwin["all"].bit(t) + wrel - is_hold - 1.5, 0.5, 1.0) for t in range(NW) if t >> i & 1]
                   + [(is_hold + wiss[i] - 1.5, 0.5, 1.0)])
    m8.boolean(nwphase, 0, _xor_terms(phase, wrel))
    # the next warp's generation: its G, flipped when its warp barrier releases (the issuing warp
    # after a hold: its own, which cannot release right after a plain instruction)
    gterms = []
    for t in range(NW):
        g_t, r_t = wreads[t].bit(4), wreads[t].bit(3)
        gterms += [(wwin["run"].bit(t) + g_t - r_t - wrel - is_hold - 1.5, 0.5, 1.0),
                   (wwin["run"].bit(t) - g_t + r_t - wrel - is_hold - 1.5, 0.5, 1.0),
                   (wwin["all"].bit(t) + g_t + wrel - is_hold - 2.5, 0.5, 1.0)]
    m8.boolean(ngen, 0, gterms + [(is_hold + gen - 1.5, 0.5, 1.0)])
    m8.build()

    return SimpleNamespace(threads=threads, pcs=pcs, pcb=pcb, pab=pab, L=L, NW=NW, G=G, WB=WB, kinds=kinds, kind=kind, hot=hot,
                           pa_lo=pa_lo, pa_hi=pa_hi, addr=(addr_lo, addr_hi), blkreg=blkreg, nthr=nthr, tval=tval, phase=phase,
                           issue=issue, pcur=pcur, last=last, multi=multi, anyrun=anyrun, isw=isw,
                           nextw=nextw, nwphase=nwphase, ngen=ngen, nextpc=nextpc, nphase=nphase, sel=sel,
                           nextg=nextg, act=act, cand=cand, ww=ww, wiss=wiss)


def control_tokens(c: Circuit, f: SimpleNamespace, blk_inputs=lambda b: {}) -> None:
    """The prompt tokens and the control tokens except <g> (see g_inputs / g_logit) and <d>;
    blk_inputs(b): more inputs of the <blk b> token (a datapath's)."""
    K = f.kinds.index
    pcs = f.pcs
    hot, blkreg, last, nextw, nwphase, ngen = f.hot, f.blkreg, f.last, f.nextw, f.nwphase, f.ngen
    nextpc, nphase, sel, isw, WB, NW, threads = f.nextpc, f.nphase, f.sel, f.isw, f.WB, f.NW, f.threads
    S = blkreg.present(0)                 # a block has started
    R = f.anyrun.bit(0)                   # some thread of the block is alive
    M = f.multi.bit(0)
    for T in range(1, threads + 1):
        c.token(f"<nt {T}>", kind=K("nt"), nt_in=T)
    for n in range(1, MAX_BLOCKS + 1):
        c.token(f"<nb {n}>", kind=K("nb"), nb_in=n)
    for p in range(pcs):
        c.token(f"<pa {p}>", kind=K("pa"), pa_lo=p % 128, pa_hi=p // 128)
    c.token("<pc plain>", kind=K("pc"), cw=0)
    c.token("<pc exit>", kind=K("pc"), cw=2)
    c.token("<pc bar>", kind=K("pc"), cw=4)
    c.token("<pc hold>", kind=K("pc"), cw=0, hold=1)
    if NW > 1:
        c.token("<pc wbar>", kind=K("pc"), cw=8)
    for p in range(pcs):
        c.token(f"<pc bra {p}>", kind=K("pc"), cw=1, tgt=p)
    for b in range(MAX_BLOCKS):
        name = f"<blk {b}>"
        c.token(name, kind=K("blk"), nb1=b + 1, **blk_inputs(b))
        match = lsum((1.0 if b >> i & 1 else -1.0) * (2.0 * blkreg.bit(i) - 1.0) for i in range(BBITS + 1))
        lg = 100.0 * S + 50.0 * (1.0 - R) + 10.0 * (1.0 - last.bit(0)) + match
        if b == 0:
            lg = lg + 100.0 * (1.0 - S)
        c.logit(name, lg)
    c.token("<halt>", kind=K("halt"))
    c.logit("<halt>", 100.0 * S + 50.0 * (1.0 - R) + 10.0 * last.bit(0) + float(BBITS + 1))
    for w in range(NW):
        for h in (0, 1):
            for g in (0, 1):
                name = f"<w {w} {h} {g}>"
                c.token(name, kind=K("w"), ww=w, ph=h, wg=g)
                c.logit(name, 100.0 * S + 50.0 * R + 10.0 + 30.0 * M - 30.0 * isw + _match(w, nextw, WB)
                        + (1.0 if h else -1.0) * nwphase.pm(0) + (1.0 if g else -1.0) * ngen.pm(0))
        for p in range(pcs):
            for h in (0, 1):
                name = f"<wi {w} {p} {h}>"
                c.token(name, kind=K("wi"), pa_lo=p % 128, pa_hi=p // 128, p1=p + 1, ph=h,
                        ww=w, ww1=w + 1)
                c.logit(name, 100.0 * S + 50.0 * R + 10.0 + 30.0 * (1.0 - M) + 30.0 * isw
                        + _match(p, nextpc, f.pab) + (1.0 if h else -1.0) * nphase.pm(0)
                        + _match(w, sel, WB))


def g_inputs(f: SimpleNamespace, k: int, issued: int, executed: int) -> dict:
    """The control inputs a <g K ..> token's embedding sets (group K, issued and executed lanes)."""
    we = sum(((issued >> j) & 1) << (LANES * k + j) for j in range(LANES))
    return dict(gk1=k + 1, gwe=we, gex=executed)


def g_logit(f: SimpleNamespace, k: int, issued: int) -> Lin:
    """The control part of a <g K ..> token's logit: group K is next, its issued lanes match."""
    match = lsum((1.0 if (issued >> j) & 1 else -1.0) * (2.0 * f.act.bit(LANES * k + j) - 1.0)
                 for j in range(LANES))
    return 20.0 * f.nextg.bit(k) + match


def control_stream(cu: ControlUnit, kernel, grid, block, args, dynamic_shared_bytes=0,
                   step_budget=200_000) -> tuple[list[str], int]:
    """(tokens, prompt length): the prompt and the oracle's stream of a lowered kernel."""
    from gpu_layers.machine.protocol import trace_tokens

    prompt = cu.prompt_tokens(kernel, grid, block)
    tr = trace_tokens(kernel, grid, block, args, dynamic_shared_bytes, outputs=[], step_budget=step_budget)
    return prompt + cu.stream_tokens(tr.tokens), len(prompt)


CONTROL_KINDS = ("<blk ", "<w ", "<wi ", "<g ", "<halt>")


def check_predictions(cu: ControlUnit, names: list[str], n_prompt: int, rows) -> list[tuple[int, str, str]]:
    """Mismatches [(position, expected, predicted)] of the control tokens: at each position whose
    next token is a control token, the argmax of that position's logits among `allowed(next)`.
    rows: the logits of every position in order (an array, or an iterator such as the fast
    executor's steps, so a long stream never holds all its logits)."""
    import numpy as np

    cache = {}
    bad = []
    for p, row in enumerate(rows):
        if p >= len(names) - 1:
            break
        want = names[p + 1]
        if p < n_prompt - 1 or not want.startswith(CONTROL_KINDS):
            continue
        key = want if want.startswith("<g ") else "ctl"
        if key not in cache:
            cache[key] = np.array(cu.allowed(want))
        ids = cache[key]
        got = int(ids[np.argmax(np.asarray(row)[ids])])
        if got != cu.token_ids[want]:
            bad.append((p, want, cu.compiled.machine.token_names[got]))
    return bad


def fast_rows(fm, ids):
    """The logits after every token of ids from a fast executor (`unit.fast()`,
    gpu_layers.craft.fast), fresh state: build the executor once and reuse it across streams."""
    st = fm.new_state()
    for t in ids:
        yield fm.step(st, int(t), logits=True)
