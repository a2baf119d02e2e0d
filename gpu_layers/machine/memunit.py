"""The memory unit v0 of the machine core: global and shared memory in DeltaNet heads, one lane
served per position, the prompt's buffers and the dump (gpu_layers/machine/memory_map.py gives the
map and the oracle's side; docs/machine.md section 8).

Stages (each a function here, wired by gpu_layers.machine.core.core_circuit):

* `prompt_side`: the memory instruction word of each PC (`<pm ..>`, a banked program memory read
  at the issue's PC), the prompt's word registers (`<ma A>`, `<mc0 X>`, `<mc1 X>`; `<mc2 X>`
  commits), the bounds registers (`<ss S>`, `<mbk K>`, `<mbl L>`; `<mbh H>` commits a buffer's
  word range), the dump's registers (`<nw N>`, `<xa A>`) and the dump's next address (A + 1, or 0
  at `<halt>`) with its end flag (A + 1 >= N);
* `address_bits`: bits 0..13 of each lane's address (base + immediate) and the carries out of bits
  11 (shared) and 13 (global), a threshold adder on the operands as the read ports deliver them
  (bit i of a sum is [v >= 2^i] - [v >= 2^(i+1)] + [v >= 3 2^i] of the partial sum v of bits
  0..i) in two MLP stages (bits 0..5 and their carry, then the rest): the bank and the row without
  waiting for the ALU;
* `route`: which lane is served here (the first executed lane at the executing position, lane J
  at `<mt J>`), the next tick, and the one port every bank shares: the row (a served lane's, the
  prompt word's, the dumped word's), the data for even and odd banks (a 64-bit store's high word
  goes to the odd bank), per-bank write and read enables;
* `banks`: 32 heads of global memory (never reset) and 4 of shared memory (reset at `<blk>`),
  128 rows of 32 bits each, all addressed by the shared row;
* `load_word`: the served lane's loaded word (low word from its bank, high word from the next
  bank: the sums of the even and the odd banks' reads, only the read banks enabled) and whether it
  is undefined (a shared word never written; global memory is initialised);
* `bounds`: whether the served lane's access breaks memory_map.access_ok (`<fault>`);
* `dump_chunks`: at `<xa>` / `<xc>` the next nonzero chunk of the dumped word, else the next
  address, else `<end>`.

One lane per position keeps the port single (no bank crossbar: a 4-lane crossbar of 16 banks
needs about 5,000 threshold steps, one MLP holds 3,072), at the price of one `<mt>` token per
further executed lane of a memory instruction.
"""
from __future__ import annotations

from types import SimpleNamespace

from gpu_layers.craft import blocks as B
from gpu_layers.craft.blocks.base import MLPBuilder
from gpu_layers.craft.fields import bits, dual, lsum, onehot, rail3
from gpu_layers.machine import memory_map as MM
from gpu_layers.machine.regfile import PCS

LANES = 4
PM_BITS = 4                  # ld, st, shared, size 8
ABITS = MM.GLOBAL_BITS - 2    # address bits 2..13 (global: bank 5 + row 7)
WBITS = ABITS                # machine word addresses (4096 words)
NBITS = WBITS + 1            # N <= 4096
GBANK = MM.BANKS["global"].bit_length() - 1     # global bank bits (5)
KINDS = ("pm", "mt", "nw", "ma", "mc0", "mc1", "mc2", "xa", "xc", "end", "ss", "mbk", "mbl", "mbh", "fault")
SBITS = 10                   # shared words <= 512
BIG = 10.0


def _bitlist(xbits, value: int, n: int):
    """The n literals (0/1 forms) that are all 1 exactly when xbits[0..n) spell `value`."""
    return [xbits[i] if (value >> i) & 1 else 1.0 - xbits[i] for i in range(n)]


def _lits(xbits, value: int, n: int):
    """Sum of those literals: n exactly when xbits[0..n) spell `value`."""
    return lsum(_bitlist(xbits, value, n))


def pm_word(kind: str | None, space: str = "global", size: int = 4) -> int:
    if kind is None:
        return 0
    return (1 if kind == "load" else 2) | ((space == "shared") << 2) | ((size == 8) << 3)


def prompt_side(c, hot, waddr, raddr, pcs: int = PCS, program=None):
    """Inputs, registers and the dump's next address (see the module docstring); pcs: the
    program's capacity (the memory instruction words' banks). program(pm_in): the memory
    instruction word (a PM_BITS field) from the caller's program memory, else the unit's own
    (written at <pm>)."""
    n = SimpleNamespace()
    n.pm_in = c.input(bits("pm_in", PM_BITS), default=0)
    n.mtj = c.input(onehot("mtj", LANES + 1), default=LANES)
    n.nw_in = c.input(bits("nw_in", NBITS), default=0)
    n.ma_in = c.input(bits("ma_in", WBITS), default=0)
    n.mc_in = [c.input(bits(f"mc{k}_in", MM.CHUNK_BITS[k]), default=0) for k in range(3)]
    n.xa_in = c.input(bits("xa_in", WBITS), default=0)
    n.xcc = c.input(onehot("xcc", 4), default=3)
    n.ss_in = c.input(bits("ss_in", SBITS), default=0)
    n.mbk_in = c.input(bits("mbk_in", 4), default=0)
    n.mbl_in = c.input(bits("mbl_in", WBITS), default=0)
    n.mbh_in = c.input(bits("mbh_in", NBITS), default=0)
    pm = (program(n.pm_in) if program is not None
          else B.banked_memory(c, "pm", pcs, PM_BITS, waddr, raddr, n.pm_in, we=hot["pm"]).outputs[0])
    n.ld, n.st, n.sh, n.is8 = (pm.bit(i) for i in range(4))
    n.mem = n.ld + n.st
    nwords = B.memory(c, "nwords", 1, NBITS, 0, 0, n.nw_in, we=hot["nw"]).outputs[0]
    n.maddr = B.memory(c, "maddr", 1, WBITS, 0, 0, n.ma_in, we=hot["ma"]).outputs[0]
    n.mc = [B.memory(c, f"mc{k}r", 1, MM.CHUNK_BITS[k], 0, 0, n.mc_in[k], we=hot[f"mc{k}"],
                     reset=hot["ma"]).outputs[0] for k in (0, 1)]
    n.xcur = B.memory(c, "xcur", 1, WBITS, 0, 0, n.xa_in, we=hot["xa"]).outputs[0]
    n.sw = B.memory(c, "swords", 1, SBITS, 0, 0, n.ss_in, we=hot["ss"]).outputs[0]
    n.mbk = B.memory(c, "mbk", 1, 4, 0, 0, n.mbk_in, we=hot["mbk"]).outputs[0]
    n.mbl = B.memory(c, "mbl", 1, WBITS, 0, 0, n.mbl_in, we=hot["mbl"]).outputs[0]
    n.dumping = hot["xa"] + hot["xc"]            # a dumped word is read here
    # the dump's next address and the end flag
    n.nxa = c.new_field(dual("nxa", WBITS))
    n.end = c.new_field(dual("dend", 1))
    m = MLPBuilder(c, "dump_next")
    x = [n.xcur.bit(i) for i in range(WBITS)]
    halt = hot["halt"]
    big = float(WBITS + 2)                      # outweighs i - low (up to WBITS - 1)
    for i in range(WBITS):
        low = lsum(x[:i])
        m.boolean(n.nxa, i, [(big * (x[i] - 1.0) + (i - low) - 0.5 - big * halt, 0.5, 1.0),
                             (-big * x[i] + low - i + 0.5 - big * halt, 0.5, 1.0)])
    xv = lsum((1 << i) * x[i] for i in range(WBITS))
    nv = lsum((1 << i) * nwords.bit(i) for i in range(NBITS))
    m.boolean(n.end, 0, [(xv + 1.0 - nv + 0.5 - float(2 << WBITS) * halt, 0.5, 1.0),
                         (-nv + 0.5 - float(2 << WBITS) * (1.0 - halt), 0.5, 1.0)])
    m.build()
    return n


LOW = 6                      # the address adder's first stage: bits 0..5 and the carry into bit 6


class _Bits:
    """Dual fields read as one (low bits first): .bit(i) / .n, as the address's consumers read it."""

    def __init__(self, parts):
        self.parts, self.n = parts, sum(f.n for f in parts)

    def bit(self, i: int):
        for f in self.parts:
            if i < f.n:
                return f.bit(i)
            i -= f.n
        raise IndexError(i)


def _sum_bit(m, f, at: int, v, p: int):
    """Entry `at` of f := the bit of weight p of a sum v of bits of weight <= p (v < 4p): [v >= p]
    - [v >= 2p] + [v >= 3p]."""
    m.boolean(f, at, [(v - (p - 0.5), 0.5, 1.0), (v - (2 * p - 0.5), 0.5, -1.0), (v - (3 * p - 0.5), 0.5, 1.0)])


def address_bits(c, base, imm):
    """Per lane: a dual field of address bits 2..13 of base + imm (base: the lane's register read,
    gated to exact 0 when the address has no register; imm: the instruction's immediate), a dual
    field of (bit 0, bit 1, the carry out of bit 11: a shared access's, the carry out of bit 13: a
    global access's) and a bits field of base bits 32..35 (the buffer number).

    Two MLP stages, so no threshold sees a large sum: bits 0..5 and the carry into bit 6 from the
    low bits' partial sums (at most 126), then bits 6.. from the high bits' partial sums plus that
    carry (at most 511). One stage over all 14 bits would see sums up to 32,766, and a step's output
    error grows with its input (physics.STEP_G: the true side computes (s + K) - s at s = 400 t),
    and the bounds check's word index, a sum of 2^i times these bits, adds the errors up against a
    margin of 0.5 (docs/machine.md section 32)."""
    out, aux, kb, cy = [], [], [], []
    m = MLPBuilder(c, "mem_address")
    for j in range(LANES):
        ad = c.new_field(dual(f"ad{j}", LOW - 2))
        al = c.new_field(dual(f"al{j}", 2))
        buf = c.new_field(bits(f"kb{j}", 4))
        cj = c.new_field(dual(f"acy{j}", 1))

        def partial(i):                         # the low i + 1 bits of base + imm, as a number
            return lsum((1 << t) * (base[j].bit(t) + imm.bit(t)) for t in range(i + 1))

        for i in range(LOW):
            f, at = (ad, i - 2) if i >= 2 else (al, i)
            _sum_bit(m, f, at, partial(i), 1 << i)
        m.threshold(cj, 0, partial(LOW - 1) - ((1 << LOW) - 0.5), 0.5)
        for i in range(4):
            m.threshold(buf, i, base[j].bit(32 + i) - 0.5, 0.5)
        out.append(ad)
        aux.append(al)
        kb.append(buf)
        cy.append(cj)
    m.build()
    m = MLPBuilder(c, "mem_address_hi")
    for j in range(LANES):
        ad = c.new_field(dual(f"adh{j}", MM.GLOBAL_BITS - LOW))
        al = c.new_field(dual(f"alh{j}", 2))
        out[j], aux[j] = _Bits([out[j], ad]), _Bits([aux[j], al])

        def high(i):                            # bits LOW..i of base + imm and the carry, as a number
            return cy[j].bit(0) + lsum((1 << (t - LOW)) * (base[j].bit(t) + imm.bit(t)) for t in range(LOW, i + 1))

        for i in range(LOW, MM.GLOBAL_BITS):
            _sum_bit(m, ad, i - LOW, high(i), 1 << (i - LOW))
        for k, nb in enumerate((MM.SHARED_BITS, MM.GLOBAL_BITS)):
            m.threshold(al, k, high(nb - 1) - ((1 << (nb - LOW)) - 0.5), 0.5)
    m.build()
    # the high bits re-digitized: their steps see sums up to 769 margins (fp32 leaves ~5e-5 in an
    # output) and the bounds check weighs them by up to 2^11 (0.9 margins; craft/precision.py)
    m = MLPBuilder(c, "mem_address_digital")
    for j in range(LANES):
        raw = out[j].parts[1]
        ad = c.new_field(dual(f"adh{j}_d", raw.n))
        for i in range(raw.n):
            m.threshold(ad, i, raw.bit(i) - 0.5, 0.5)
        out[j] = _Bits([out[j].parts[0], ad])
    m.build()
    return out, aux, kb


def route(c, n, hot, ex, ad, val, has_next):
    """The served lane, the next tick and the shared memory port (see the module docstring).
    val: per lane, the 64 exact 0/1 forms of a store's value (read port b)."""
    o = SimpleNamespace()
    trace = hot["wi"] + hot["g"] + hot["d"] + hot["mt"]
    tick = hot["mt"]
    E = [ex.bit(j) for j in range(LANES)]
    T = [E[j] - lsum(E[:j]) + n.mem - 1.5 - 2.0 * tick + 5.0 * n.mtj.hot(j) + BIG * (trace - 1.0)
         for j in range(LANES)]                    # > 0 exactly when lane j is served here
    o.srow = c.new_field(bits("srow", 7))
    o.dlo = c.new_field(dual("dlo", 32))
    o.dodd = c.new_field(dual("dodd", 32))
    o.wuse = {sp: c.new_field(dual(f"wuse_{sp[0]}", MM.BANKS[sp])) for sp in MM.SPACES}
    o.ren = {sp: c.new_field(dual(f"ren_{sp[0]}", MM.BANKS[sp])) for sp in MM.SPACES}
    o.wide = c.new_field(dual("wide", 1))
    o.lwe = c.new_field(dual("lwe", LANES))
    o.srv = c.new_field(dual("srv", LANES))
    o.nt = c.new_field(dual("nt", LANES))
    commit = hot["mc2"]
    space = {"global": 1.0 - n.sh, "shared": n.sh}
    m = MLPBuilder(c, "mem_route")

    def served(j, *lits):                          # lane j served and every 0/1 literal form true
        return T[j] + BIG * (lsum(lits) - len(lits)) if lits else T[j]

    ab = [[ad[j].bit(i) for i in range(ABITS)] for j in range(LANES)]
    maddr = [n.maddr.bit(i) for i in range(WBITS)]
    xcur = [n.xcur.bit(i) for i in range(WBITS)]
    for i in range(7):                             # global rows: address bits 7..13, shared: 4..10
        m.boolean(o.srow, i, [(served(j, 1.0 - n.sh, ab[j][GBANK + i]), 0.5, 1.0) for j in range(LANES)]
                  + [(served(j, n.sh, ab[j][2 + i]), 0.5, 1.0) for j in range(LANES)]
                  + [(commit + maddr[GBANK + i] - 1.5, 0.5, 1.0),
                     (n.dumping + xcur[GBANK + i] - 1.5, 0.5, 1.0)])
    chunk_bits = [(k, b) for k in range(3) for b in range(MM.CHUNK_BITS[k])]
    for i in range(32):
        k, b = chunk_bits[i]
        src = n.mc[k].bit(b) if k < 2 else n.mc_in[2].bit(b)
        pr = (commit + src - 1.5, 0.5, 1.0)
        lo = [(served(j, n.st, val[j].bit(i)), 0.5, 1.0) for j in range(LANES)]
        m.boolean(o.dlo, i, lo + [pr])
        odd = [(served(j, n.st, 1.0 - n.is8, val[j].bit(i)), 0.5, 1.0) for j in range(LANES)]
        odd += [(served(j, n.st, n.is8, val[j].bit(32 + i)), 0.5, 1.0) for j in range(LANES)]
        m.boolean(o.dodd, i, odd + [pr])
    for sp in MM.SPACES:
        nb = MM.BANKS[sp].bit_length() - 1         # bank bits
        for b in range(MM.BANKS[sp]):
            w = [(served(j, n.st, space[sp], *_bitlist(ab[j], b, nb)), 0.5, 1.0) for j in range(LANES)]
            r = [(served(j, n.ld, space[sp], *_bitlist(ab[j], b, nb)), 0.5, 1.0) for j in range(LANES)]
            if b % 2:                              # a 64-bit access's high word
                w += [(served(j, n.st, n.is8, space[sp], *_bitlist(ab[j], b - 1, nb)), 0.5, 1.0)
                      for j in range(LANES)]
                r += [(served(j, n.ld, n.is8, space[sp], *_bitlist(ab[j], b - 1, nb)), 0.5, 1.0)
                      for j in range(LANES)]
            if sp == "global":
                w.append((commit + _lits(maddr, b, nb) - (nb + 0.5), 0.5, 1.0))
                r.append((n.dumping + _lits(xcur, b, nb) - (nb + 0.5), 0.5, 1.0))
            m.boolean(o.wuse[sp], b, w)
            m.boolean(o.ren[sp], b, r)
    m.boolean(o.wide, 0, [(served(j, n.ld, n.is8), 0.5, 1.0) for j in range(LANES)])
    hn = has_next.bit(0)
    for j in range(LANES):
        m.threshold(o.srv, j, T[j], 0.5)
        m.boolean(o.lwe, j, [(hn - n.mem - 0.5, 0.5, 1.0), (BIG * (hn - 1.0) + T[j], 0.5, 1.0)])
        base = BIG * (E[j] + n.mem + trace - tick - 3.0)
        terms = [(base + lsum(E[:j]) - 0.5, 0.5, 1.0), (base + lsum(E[:j]) - 1.5, 0.5, -1.0)]
        for J in range(j):
            terms.append((n.mtj.hot(J) + E[j] + n.mem - lsum(E[J + 1:j]) - 2.5, 0.5, 1.0))
        m.boolean(o.nt, j, terms)
    m.build()
    return o


def banks(c, o, hot):
    """The 36 heads: {space: (rail3 read of the even banks, of the odd banks)}; a bank's read is
    enabled only where the access reads it (route's `ren`: at most one even and one odd bank), so
    the others read as exact zeros and a space's even banks share one read field, its odd ones
    another (4 fields of 64 dims, not 36)."""
    out = {}
    for sp in MM.SPACES:
        reads = (c.new_field(rail3(f"{sp[0]}mem_even_r", 32)), c.new_field(rail3(f"{sp[0]}mem_odd_r", 32)))
        for b in range(MM.BANKS[sp]):
            data = o.dlo if b % 2 == 0 else o.dodd
            B.memory(c, f"{sp[0]}mem{b}", MM.ROWS, 32, o.srow, o.srow, data,
                     we=o.wuse[sp].bit(b), re=o.ren[sp].bit(b),
                     reset=hot["blk"] if sp == "shared" else None, out=[reads[b % 2]])
        out[sp] = reads
    return out


def load_word(c, o, reads):
    """The served lane's loaded word (dual, 64 bits) and its undefined flag (dual, 1). Only the
    banks read here are enabled (a disabled read is an exact zero), at most one even and one odd
    bank: the low word is the even bank's read, or the odd one's unless the load is 64-bit (`wide`),
    the high word the odd one's when it is. Undefined: a shared load none of whose words was ever
    written (every enabled shared bank reads absent)."""
    ldw = c.new_field(dual("ldw", 64))
    ldu = c.new_field(dual("ldu", 1))
    m = MLPBuilder(c, "mem_load")
    wide = o.wide.bit(0)
    for i in range(32):
        ev = lsum(reads[sp][0].bit(i) for sp in MM.SPACES)
        od = lsum(reads[sp][1].bit(i) for sp in MM.SPACES)
        m.boolean(ldw, i, [(ev - 0.5, 0.5, 1.0), (od - wide - 0.5, 0.5, 1.0)])
        m.threshold(ldw, 32 + i, od + wide - 1.5, 0.5)
    sr = reads["shared"]
    enabled = lsum(o.ren["shared"].bit(b) for b in range(MM.BANKS["shared"]))
    present = sr[0].present(0) + sr[1].present(0)
    m.threshold(ldu, 0, enabled - 2.0 * present - 0.5, 0.5)
    m.build()
    return ldw, ldu


def dump_chunks(c, n, hot, ldw):
    """At the dump: nxc (dual 3, the next nonzero chunk), dn (next address), de (end)."""
    nz = c.new_field(dual("dnz", 3))
    m = MLPBuilder(c, "dump_nonzero")
    sh = 0
    for k in range(3):
        m.threshold(nz, k, lsum(ldw.bit(sh + b) for b in range(MM.CHUNK_BITS[k])) - 0.5, 0.5)
        sh += MM.CHUNK_BITS[k]
    m.build()
    nxc = c.new_field(dual("nxc", 3))
    dn = c.new_field(dual("dn", 1))
    de = c.new_field(dual("de", 1))
    ind = {-1: hot["xa"], 0: n.xcc.hot(0), 1: n.xcc.hot(1), 2: n.xcc.hot(2)}
    m = MLPBuilder(c, "dump_pick")
    for k in range(3):
        m.boolean(nxc, k, [(ind[cur] + nz.bit(k) - lsum(nz.bit(t) for t in range(cur + 1, k)) - 1.5, 0.5, 1.0)
                           for cur in range(-1, k)])
    end = n.end.bit(0)
    rest = {cur: lsum(nz.bit(t) for t in range(cur + 1, 3)) for cur in range(-1, 3)}
    m.boolean(dn, 0, [(ind[cur] - rest[cur] - end - 0.5, 0.5, 1.0) for cur in ind]
              + [(hot["halt"] - end - 0.5, 0.5, 1.0)])
    m.boolean(de, 0, [(ind[cur] - rest[cur] + end - 1.5, 0.5, 1.0) for cur in ind]
              + [(hot["halt"] + end - 1.5, 0.5, 1.0)])
    m.build()
    return nxc, dn, de


def bounds(c, n, hot, o, ad, al, kb, base, imm):
    """`flt`: one dual bit per (lane, violated condition of memory_map.access_ok) for the lane
    served here (the buffer table: one copy per lane, each lane looks up its own buffer number).
    The `<fault>` logit weighs their sum: several can hold at once."""
    table = [B.memory(c, f"btab{j}", 16, WBITS + NBITS, n.mbk, kb[j], [[n.mbl, n.mbh_in]],
                      we=hot["mbh"]).outputs[0] for j in range(LANES)]
    m = MLPBuilder(c, "mem_bounds")
    G = 1.25 * (1 << WBITS)                 # outweighs every condition's form (at most 2^WBITS + 0.5)
    gb, sb = MM.GLOBAL_BITS, MM.SHARED_BITS
    wh = MM.SHARED_WINDOW >> sb
    terms = []
    for j in range(LANES):
        B_ = [base[j].bit(i) for i in range(64)]
        I_hi = [imm.bit(i) for i in range(gb, 64)]
        I_sh = [imm.bit(i) for i in range(sb, 64)]
        car, scar = al[j].bit(3), al[j].bit(2)
        w = lsum((1 << i) * ad[j].bit(i) for i in range(ABITS))
        ws = lsum((1 << i) * ad[j].bit(i) for i in range(sb - 2))
        lo = lsum((1 << i) * table[j].bit(i) for i in range(WBITS))
        hi = lsum((1 << i) * table[j].bit(WBITS + i) for i in range(NBITS))
        sw = lsum((1 << i) * n.sw.bit(i) for i in range(SBITS))
        mis = [al[j].bit(0) + al[j].bit(1) - 0.5, ad[j].bit(0) + n.is8 - 1.5]
        glob = [0.5 - B_[36], lsum(B_[37:]) - 0.5, lsum(B_[gb:32]) - 0.5,
                lsum(I_hi) - 0.5 - 100.0 * car, len(I_hi) - 0.5 - lsum(I_hi) - 100.0 * (1.0 - car),
                lo - w - 0.5, w + n.is8 - hi + 0.5] + mis
        differs = {x: len(I_sh) - _lits(I_sh, x, len(I_sh)) for x in (wh, wh - 1)}   # I >> 12 is not x
        shr = [lsum(B_[sb:]) - 0.5, differs[wh] - 0.5 - 100.0 * scar,
               differs[wh - 1] - 0.5 - 100.0 * (1.0 - scar), ws + n.is8 - sw + 0.5] + mis
        for v in glob:
            terms.append(G * (o.srv.bit(j) - n.sh - 1.0) + v)
        for v in shr:
            terms.append(G * (o.srv.bit(j) + n.sh - 2.0) + v)
    flt = c.new_field(dual("flt", len(terms)))
    for i, t in enumerate(terms):
        m.threshold(flt, i, t, 0.5)
    m.build()
    return flt
