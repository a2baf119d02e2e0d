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
    PC reads as 0 with the thread runnable.

Scope (refused by name otherwise, `ControlError`): one warp per block of up to `threads` (16 or
32) threads, machine PCs < 512, up to 1024 blocks, barriers of the whole block; no
warp-synchronous instructions (shfl/vote/match/bar.warp.sync wait for their membermask) yet, and
no blocks of several warps (the warps' round robin needs one more token per step: which warp).

Vocabulary:
  prompt   <nt T>  threads per block       <nb N>  blocks in the grid
           <pa P>  program address          <pc plain|exit|bar> / <pc bra T>: instruction P's
                                            control word (written at the last <pa>)
  trace    <blk B>  <wi 0 P H>  <g K L>  <d>  <halt>   (<g>'s U and S and every <d>'s content are
           not control: the circuit's tokens drop them, `stream_tokens` maps the oracle's stream)

Layers (as the scheduler places them for Qwen3.5-2B's shapes, 16 threads):
  L0 mixer  the prompt registers (address, launch), the block register (B + 1), the phase
            register (H), the group register (the last issued group K + 1, reset by <wi>)
  L1 mixer  program memory (4 banks of 128 control words), read at <wi>'s P
  L2 mixer  the issue register: P, P + 1, the control word (written at <wi>)
  L2 MLP    each lane's next PC word for a <g> token: PC, exited, waiting, the phase it waits in
  L3 mixer  the PC file: one head per thread (slot 0), written at <g> where the lane was issued
  L3-L6 MLP free to run / alive, below/at-or-above the cursor, at P; two pairwise pickers (the
            lowest PC at or after the cursor, else the lowest: among the free threads, and among
            all alive ones), the release bit, the next PC and phase; the next lane group
  LM head   <wi 0 P H>: the next PC and phase; <g K L>: the next group and its issued lanes;
            <blk>/<halt>
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from gpu_layers.craft import blocks as B
from gpu_layers.craft.assemble import Compiled, compile_circuit
from gpu_layers.craft.blocks.base import MLPBuilder
from gpu_layers.craft.circuit import Circuit
from gpu_layers.craft.fields import Lin, bits, dual, lsum, onehot
from gpu_layers.craft.machine_model import build_machine_model
from gpu_layers.errors import QwenGPUError
from gpu_layers.machine.protocol import lane_masks

LANES = 4
PCBITS = 10              # PCs < 512 in the program; P + 1 <= 512 needs 10 bits
MAX_PC = 512
BANK_BITS = 7            # 128 control words per program bank (Qwen3.5-2B's key head)
BBITS = 10               # blocks <= 1024 (B + 1 <= 1024 needs 11 bits: see nb1)
MAX_BLOCKS = 1024
KINDS = ("nt", "nb", "pa", "pc", "blk", "wi", "g", "d", "halt")
CW = ("plain", "bra", "exit")


class ControlError(QwenGPUError):
    """A kernel, launch or stream outside what the control unit supports."""


def tok_g(k: int, states: int) -> str:
    return f"<g {k} " + " ".join(str((states >> (2 * j)) & 3) for j in reversed(range(LANES))) + ">"


@dataclass
class ControlUnit:
    compiled: Compiled
    token_ids: dict
    threads: int

    def model(self, dtype=torch.float32, device="cpu"):
        return build_machine_model(self.compiled.machine, dtype=dtype, device=device)

    def encode(self, names: list[str]) -> list[int]:
        try:
            return [self.token_ids[n] for n in names]
        except KeyError as e:
            raise ControlError(f"{e.args[0]!r} is not a token of the control unit") from None

    def decode(self, ids) -> list[str]:
        names = self.compiled.machine.token_names
        return [names[int(i)] for i in ids]

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
            if ins.kind == "bra":
                word = f"<pc bra {ins.target}>"
            elif ins.kind == "exit":
                word = "<pc exit>"
            elif ins.kind == "bar":
                if ins.target and ins.target != nthreads:
                    raise ControlError(f"line {ins.line}: `{ins.text}`: a barrier for part of the block")
                word = "<pc bar>"
            elif ins.kind in ("op", "nop"):
                word = "<pc plain>"
            else:
                raise ControlError(f"line {ins.line}: `{ins.text}`: warp-synchronous instructions "
                                   "are not in the control unit")
            out += [f"<pa {p}>", word]
        return out

    def stream_tokens(self, tokens) -> list[str]:
        """The oracle's stream (gpu_layers.machine.protocol tuples) as this circuit's tokens: <g>
        keeps K and the lane states, every <d> becomes <d>, the dump section is dropped."""
        out = []
        for t in tokens:
            k = t[0]
            if k == "blk":
                out.append(f"<blk {t[1]}>")
            elif k == "wi":
                if t[1] != 0:
                    raise ControlError(f"warp {t[1]}: the control unit runs one warp per block")
                out.append(f"<wi 0 {t[2]} {t[3]}>")
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
        return [i for n, i in ids.items() if n.startswith(("<wi ", "<blk ")) or n == "<halt>"]


def _g_parts(name: str):
    f = name[1:-1].split()
    k = int(f[1])
    st = sum(int(x) << (2 * j) for j, x in enumerate(reversed(f[2:])))
    issued, executed, preds = lane_masks(st)
    return k, executed, preds


def build_control_unit(config, threads: int = 16) -> ControlUnit:
    """Compile the control unit for a Qwen3.5 text config (or shapes dict)."""
    if threads not in (4, 8, 16, 32):
        raise ControlError("threads must be 4, 8, 16 or 32 (one warp)")
    N, G = threads, threads // LANES
    c = Circuit("control_v1")
    kind = c.input(onehot("kind", len(KINDS)), default=KINDS.index("d"))
    hot = {k: kind.hot(i) for i, k in enumerate(KINDS)}
    ex_mask = c.input(bits("ex_mask", N), default=0)          # <nt T>: threads 0..T-1 exist
    nb_in = c.input(bits("nb_in", BBITS + 1), default=0)      # <nb N>: N
    pa_lo = c.input(bits("pa_lo", BANK_BITS), default=0)      # <pa P> / <wi 0 P>: P mod 128
    pa_hi = c.input(bits("pa_hi", 2), default=0)              # ... P // 128
    p1 = c.input(bits("p1", PCBITS), default=0)               # <wi 0 P>: P + 1
    cw = c.input(bits("cw", 3), default=0)                    # <pc ..>: bit 0 bra, 1 exit, 2 bar
    tgt = c.input(bits("tgt", PCBITS), default=0)             # <pc bra T>: T
    ph = c.input(bits("ph", 1), default=0)                    # <wi 0 P H>: H
    nb1 = c.input(bits("nb1", BBITS + 1), default=0)          # <blk B>: B + 1
    gk1 = c.input(bits("gk1", 4), default=0)                  # <g K ..>: K + 1
    gwe = c.input(bits("gwe", N), default=0)                  # <g K L>: threads issued (at 4K + j)
    gex = c.input(bits("gex", LANES), default=0)              # <g K L>: lanes executed

    # L0: prompt registers, block, phase and group registers (inputs from the embedding only)
    addr_lo = B.memory(c, "addr_lo", 1, BANK_BITS, 0, 0, pa_lo, we=hot["pa"]).outputs[0]
    addr_hi = B.memory(c, "addr_hi", 1, 2, 0, 0, pa_hi, we=hot["pa"]).outputs[0]
    exists = B.memory(c, "exists", 1, N, 0, 0, ex_mask, we=hot["nt"]).outputs[0]
    nblocks = B.memory(c, "nblocks", 1, BBITS + 1, 0, 0, nb_in, we=hot["nb"]).outputs[0]
    blkreg = B.memory(c, "blkreg", 1, BBITS + 1, 0, 0, nb1, we=hot["blk"]).outputs[0]
    phase_r = B.memory(c, "phase", 1, 1, 0, 0, ph, we=hot["wi"], reset=hot["blk"]).outputs[0]
    grp = B.memory(c, "grp", 1, 4, 0, 0, gk1, we=hot["g"], reset=hot["wi"] + hot["blk"]).outputs[0]
    phase = phase_r.bit(0)

    # L0 MLP: the group after which the next group is searched, the last block
    later = c.new_field(dual("later", G))       # later[K] = K >= (last issued group + 1)
    last = c.new_field(dual("last", 1))         # B + 1 >= number of blocks
    m0 = MLPBuilder(c, "ctl0")
    kc = lsum((1 << i) * grp.bit(i) for i in range(4))
    for k in range(G):
        m0.threshold(later, k, float(k) - kc + 0.5, 0.5)
    m0.threshold(last, 0, lsum((1 << i) * (blkreg.bit(i) - nblocks.bit(i)) for i in range(BBITS + 1)) + 0.5, 0.5)
    m0.build()

    # L1: the program (control words), written at <pc> at the last <pa>, read at <wi>'s P
    prog = B.banked_memory(c, "prog", MAX_PC, 3 + PCBITS, (addr_lo, addr_hi), (pa_lo, pa_hi), [cw, tgt],
                           we=hot["pc"]).outputs[0]

    # L2: the issue register: P + 1 (the cursor), P, the control word
    issue = B.memory(c, "issue", 1, 2 * PCBITS + 3 + PCBITS - 1, 0, 0,
                     [[p1, pa_lo, pa_hi, prog]], we=hot["wi"], reset=hot["blk"]).outputs[0]
    cur = [issue.bit(i) for i in range(PCBITS)]                                   # P + 1
    pcur = [issue.bit(PCBITS + i) for i in range(PCBITS - 1)]                     # P (9 bits)
    base = 2 * PCBITS - 1
    is_bra, is_exit, is_bar = (issue.bit(base + i) for i in range(3))
    target = [issue.bit(base + 3 + i) for i in range(PCBITS)]

    # L2 MLP: each lane's next PC word at a <g> token: PC, exited, waiting, the phase it waits in
    WEXIT, WWAIT, WGEN = PCBITS, PCBITS + 1, PCBITS + 2
    npc = [c.new_field(bits(f"npc{j}", PCBITS + 3)) for j in range(LANES)]
    m2 = MLPBuilder(c, "next_pc")
    for j in range(LANES):
        ex = gex.bit(j)
        for i in range(PCBITS):
            m2.boolean(npc[j], i, [(is_bra + ex + target[i] - 2.5, 0.5, 1.0),
                                   (2.0 * cur[i] - is_bra - ex - 0.5, 0.5, 1.0)])
        m2.threshold(npc[j], WEXIT, is_exit + ex - 1.5, 0.5)
        m2.threshold(npc[j], WWAIT, is_bar + ex - 1.5, 0.5)
        m2.threshold(npc[j], WGEN, is_bar + ex + phase - 2.5, 0.5)
    m2.build()

    # L3: the PC file, one head per thread, slot 0; reset at <blk>
    pcf = []
    for t in range(N):
        r = B.memory(c, f"pc{t}", 1, PCBITS + 3, 0, 0, npc[t % LANES], we=gwe.bit(t),
                     reset=hot["blk"]).outputs[0]
        pcf.append(r)

    def pcval(t):
        return lsum((1 << i) * pcf[t].bit(i) for i in range(PCBITS))

    curv = lsum((1 << i) * cur[i] for i in range(PCBITS))
    pv = lsum((1 << i) * pcur[i] for i in range(PCBITS - 1))
    BIG = 4096.0

    def free_terms(t, lin):
        """[lin > 0 and thread t alive and not waiting in the current phase] as exclusive steps
        (waiting in phase g: wait = 1 and gen = g)."""
        alive = exists.bit(t) - pcf[t].bit(WEXIT) - 1.0          # 0 when alive, else <= -1
        w, g = pcf[t].bit(WWAIT), pcf[t].bit(WGEN)
        return [(lin + BIG * (alive - w), 0.5, 1.0),                          # not waiting
                (lin + BIG * (alive + w + g - phase - 2.0), 0.5, 1.0),        # waits in phase 1, now 0
                (lin + BIG * (alive + w - g + phase - 2.0), 0.5, 1.0)]        # waits in phase 0, now 1

    def alive_terms(t, lin):
        return [(lin + BIG * (exists.bit(t) - pcf[t].bit(WEXIT) - 1.0), 0.5, 1.0)]

    # L3 MLP: for each thread, below / at or after the cursor, at or after P: (a) among the threads
    # free to run (alive, not waiting), (b) among all alive threads (the picker if this step
    # released the barrier: every alive thread waits, so every one is released)
    fields = {}
    m3 = MLPBuilder(c, "cursor")
    for mode, terms in (("run", free_terms), ("all", alive_terms)):
        for nm in ("below", "after", "atp") if mode == "run" else ("below", "after"):
            fields[mode, nm] = c.new_field(dual(f"{nm}_{mode}", N))
        for t in range(N):
            m3.boolean(fields[mode, "below"], t, terms(t, curv - pcval(t) - 0.5))
            m3.boolean(fields[mode, "after"], t, terms(t, pcval(t) - curv + 0.5))
            if mode == "run":
                m3.boolean(fields[mode, "atp"], t, terms(t, pcval(t) - pv + 0.5))
    m3.build()

    pairs = [(u, t) for t in range(N) for u in range(N) if u != t]

    def runs(mode, t):
        return fields[mode, "below"].bit(t) + fields[mode, "after"].bit(t)

    # L4 MLP: u beats t (runnable, lower key, ties to the lower thread), per mode; threads at P;
    # any alive thread; every alive thread waiting (the barrier is released)
    beats = {}
    act = c.new_field(dual("act", N))
    anyrun = c.new_field(dual("anyrun", 1))
    release = c.new_field(dual("release", 1))
    m4 = MLPBuilder(c, "pick")
    for mode in ("run", "all"):
        beats[mode] = c.new_field(bits(f"beats_{mode}", N * (N - 1)))

        def key(t, mode=mode):
            return pcval(t) + 1024.0 * fields[mode, "below"].bit(t)

        for idx, (u, t) in enumerate(pairs):
            slack = 0.5 if u < t else -0.5                  # u < t wins ties
            m4.threshold(beats[mode], idx, key(t) - key(u) + slack - BIG * (1.0 - runs(mode, u)), 0.5)
    for t in range(N):
        m4.threshold(act, t, fields["run", "below"].bit(t) + fields["run", "atp"].bit(t) - 1.5, 0.5)
    n_alive = lsum(runs("all", t) for t in range(N))
    n_free = lsum(runs("run", t) for t in range(N))
    m4.threshold(anyrun, 0, n_alive - 0.5, 0.5)
    m4.threshold(release, 0, n_alive - (2.0 * N) * n_free - 0.5, 0.5)
    m4.build()

    # L5 MLP: the winner of each mode; groups after the last issued one that have a thread at P;
    # the phase after this step
    win = {mode: c.new_field(dual(f"win_{mode}", N)) for mode in ("run", "all")}
    cand = c.new_field(dual("cand", G))
    nphase = c.new_field(bits("nphase", 1))
    m5 = MLPBuilder(c, "winner")
    for mode in ("run", "all"):
        for t in range(N):
            lost = lsum(beats[mode].bit(i) for i, (u, tt) in enumerate(pairs) if tt == t)
            m5.threshold(win[mode], t, runs(mode, t) - lost - 0.5, 0.5)
    for k in range(G):
        m5.threshold(cand, k, lsum(act.bit(LANES * k + j) for j in range(LANES)) + 4.0 * later.bit(k) - 4.5, 0.5)
    m5.boolean(nphase, 0, [(phase - release.bit(0) - 0.5, 0.5, 1.0), (release.bit(0) - phase - 0.5, 0.5, 1.0)])
    m5.build()

    # L6 MLP: the next PC (the free threads' winner, or all alive threads' after a release); the
    # first candidate group
    nextpc = c.new_field(bits("nextpc", PCBITS - 1))
    nextg = c.new_field(dual("nextg", G))
    rel = release.bit(0)
    m6 = MLPBuilder(c, "next")
    for i in range(PCBITS - 1):
        m6.boolean(nextpc, i, [(win["run"].bit(t) + pcf[t].bit(i) - rel - 1.5, 0.5, 1.0) for t in range(N)]
                   + [(win["all"].bit(t) + pcf[t].bit(i) + rel - 2.5, 0.5, 1.0) for t in range(N)])
    for k in range(G):
        m6.threshold(nextg, k, cand.bit(k) - lsum(cand.bit(kk) for kk in range(k)) - 0.5, 0.5)
    m6.build()

    # ---- vocabulary -----------------------------------------------------------------------
    started = blkreg.present(0)
    for T in range(1, N + 1):
        c.token(f"<nt {T}>", kind=KINDS.index("nt"), ex_mask=(1 << T) - 1)
    for n in range(1, MAX_BLOCKS + 1):
        c.token(f"<nb {n}>", kind=KINDS.index("nb"), nb_in=n)
    for p in range(MAX_PC):
        c.token(f"<pa {p}>", kind=KINDS.index("pa"), pa_lo=p % 128, pa_hi=p // 128)
    c.token("<pc plain>", kind=KINDS.index("pc"), cw=0)
    c.token("<pc exit>", kind=KINDS.index("pc"), cw=2)
    c.token("<pc bar>", kind=KINDS.index("pc"), cw=4)
    for p in range(MAX_PC):
        c.token(f"<pc bra {p}>", kind=KINDS.index("pc"), cw=1, tgt=p)
    for b in range(MAX_BLOCKS):
        name = f"<blk {b}>"
        c.token(name, kind=KINDS.index("blk"), nb1=b + 1)
        match = lsum((1.0 if b >> i & 1 else -1.0) * (2.0 * blkreg.bit(i) - 1.0) for i in range(BBITS + 1))
        lg = 60.0 * started + 20.0 * (1.0 - anyrun.bit(0)) + 10.0 * (1.0 - last.bit(0)) + match
        if b == 0:
            lg = lg + 60.0 * (1.0 - started)
        c.logit(name, lg)
    c.token("<halt>", kind=KINDS.index("halt"))
    c.logit("<halt>", 60.0 * started + 20.0 * (1.0 - anyrun.bit(0)) + 10.0 * last.bit(0) + float(BBITS + 1))
    for p in range(MAX_PC):
        for h in (0, 1):
            name = f"<wi 0 {p} {h}>"
            c.token(name, kind=KINDS.index("wi"), pa_lo=p % 128, pa_hi=p // 128, p1=p + 1, ph=h)
            match = lsum((1.0 if p >> i & 1 else -1.0) * nextpc.pm(i) for i in range(PCBITS - 1))
            match = match + (1.0 if h else -1.0) * nphase.pm(0)
            c.logit(name, 60.0 * started + 20.0 * anyrun.bit(0) + 10.0 + match)
    for k in range(G):
        for st in range(1 << (2 * LANES)):
            issued, executed, _ = lane_masks(st)
            name = tok_g(k, st)
            we = sum(((issued >> j) & 1) << (LANES * k + j) for j in range(LANES))
            c.token(name, kind=KINDS.index("g"), gk1=k + 1, gwe=we, gex=executed)
            match = lsum((1.0 if (issued >> j) & 1 else -1.0) * (2.0 * act.bit(LANES * k + j) - 1.0)
                         for j in range(LANES))
            c.logit(name, 20.0 * nextg.bit(k) + match)
    c.token("<d>", kind=KINDS.index("d"))
    comp = compile_circuit(c, config)
    ids = {n: i for i, n in enumerate(comp.machine.token_names)}
    return ControlUnit(comp, ids, N)


def control_stream(cu: ControlUnit, kernel, grid, block, args, dynamic_shared_bytes=0,
                   step_budget=200_000) -> tuple[list[str], int]:
    """(tokens, prompt length): the prompt and the oracle's stream of a lowered kernel."""
    from gpu_layers.machine.protocol import trace_tokens

    prompt = cu.prompt_tokens(kernel, grid, block)
    tr = trace_tokens(kernel, grid, block, args, dynamic_shared_bytes, outputs=[], step_budget=step_budget)
    return prompt + cu.stream_tokens(tr.tokens), len(prompt)


CONTROL_KINDS = ("<blk ", "<wi ", "<g ", "<halt>")


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


def fast_rows(cu: ControlUnit, ids):
    """The logits after every token of ids from the fast executor (gpu_layers.craft.fast)."""
    from gpu_layers.craft.fast import FastMachine

    fm = FastMachine(cu.compiled.machine)
    st = fm.new_state()
    for t in ids:
        yield fm.step(st, int(t), logits=True)
