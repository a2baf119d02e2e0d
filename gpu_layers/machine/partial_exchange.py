"""Warp exchanges whose membermask is known when lowering and names only part of the warp:
shfl.sync, vote.sync and match.sync in divergent code (`if (lane < 16) __ballot_sync(0xffff, ..)`).

The full-mask exchanges of warp_exchange wait at a barrier for every thread of the warp; a
partial mask must wait for the threads it names only, which a barrier cannot do (the others
may never come). The interpreter's rule (interp/machine.py): a thread at the instruction waits
until every non-exited thread its membermask names has arrived at the same instruction; then
it runs once for all of them. Here each exchange site (a source instruction) has, in each warp,
a slot per lane of the mask's span (its lowest to highest lane) in shared memory (PARTIAL, after
a GONE word per thread), and:

  1. The thread checks that its mask names it (the interpreter raises otherwise: a fault).
  2. It counts its arrivals at this site (c, kept in its own slot) and publishes its value with
     c: a vote's slot is one word c << 2 | v_c << 1 | v_(c-1) (this arrival's bit and the last
     one's), a match's or shuffle's is c, then the value of arrivals of each parity (the count
     is stored last, so a reader that sees it reads the value).
  3. For every lane j the mask names (that exists: a partial warp's missing lanes count as
     exited), it spins until j's count reaches c (j arrived: it takes part) or j has exited
     (GONE[j], set before every exit: j does not). A lane j may already be one arrival further
     (it left this exchange and came back before this thread read it), never two: that would
     need this thread's next arrival, because j's mask is the same constant and names it.
     So j's value of arrival c is still in its slot: the vote's other bit, the match's other
     parity.
  4. From the taking-part lanes (`part`) and those whose value is true / equal to its own
     (`hit`): ballot = hit, any = hit != 0, all = hit == part, uni = hit in (0, part);
     match.any = hit, match.all = part == hit ? mask : 0 and its predicate; a shuffle reads its
     source lane's value (warp_exchange._shfl computes the lane; `read` faults where it does
     not take part, as the interpreter raises).

Every thread of a site uses the same constant mask, so the threads that run together are the
interpreter's ready set: the mask's lanes that have not exited. Threads at different
instructions never wait for each other here; where the interpreter would deadlock (a named lane
waits elsewhere forever) the machine spins until its step budget ends the run.
"""
from __future__ import annotations

from gpu_layers.ptx.ir import Imm, Pair, Reg, Sink, VarDecl

from .word_memory import fault_where, lane_id, thread_index, warp_first

PARTIAL = "__mq_partial"          # GONE (a word per thread), then every site's slots
FULL = 0xFFFFFFFF


def known(op, constants) -> int | None:
    """The 32-bit value of an operand known when lowering (an immediate, or a register that is a
    constant: gpu_layers.machine.remat.constants), else None."""
    if isinstance(op, Imm):
        return op.value & FULL
    if isinstance(op, Reg) and op.name in constants:
        return constants[op.name] & FULL
    return None


def mask_of(ins, constants) -> int | None:
    """The membermask of a shfl, vote or match known when lowering, else None."""
    return known(ins.operands[-1], constants)


def is_partial(ins, constants) -> bool:
    m = mask_of(ins, constants) if ins.opcode in ("vote", "match", "shfl") else None
    return m is not None and m != FULL


def slot_bytes(ins) -> int:
    """A vote's one word; a match's or shuffle's count, then two values (parities), 8-byte
    aligned for b64."""
    if ins.opcode == "vote":
        return 4
    return 24 if ins.types[-1] == "b64" else 12


class Sites:
    """The partial sites of a kernel for `threads` threads: source index -> (offset of its slots,
    slot bytes, the mask's lowest lane, its span of lanes); a warp has a slot for each lane of
    the span (the mask's lowest to highest lane). GONE (a word per thread) comes first."""

    def __init__(self, kernel, constants, threads):
        self.threads, self.warps = threads, -(-threads // 32)
        self.at = {}
        off = 4 * threads
        for i, ins in enumerate(kernel.instructions):
            if is_partial(ins, constants):
                size, mask = slot_bytes(ins), mask_of(ins, constants)
                lo = (mask & -mask).bit_length() - 1
                span = mask.bit_length() - lo
                off = -(-off // 8) * 8
                self.at[i] = (off, size, lo, span)
                off += size * span * self.warps
        self.bytes = off
        self.address = None                  # the array's shared address (lower sets it)

    def var(self):
        return VarDecl("shared", PARTIAL, "b8", 0, align=8, array=[self.bytes]) if self.at else None


def _times(em, x, k) -> str:
    """x * k for a constant k as shifts and adds (a multiply is a routine's steps)."""
    out = None
    for b in range(k.bit_length()):
        if k >> b & 1:
            t = em.tmp(32)
            em.emit(f"shl.b32 {t}, {x}, {b}")
            if out is None:
                out = t
            else:
                em.emit(f"add.u32 {out}, {out}, {t}")
    return out


def _warp_slots(em, span, size) -> str:
    """The byte offset of this thread's warp's first slot of a site: warp x span x size."""
    w = em.tmp(32)
    if em.warps == 1:
        em.emit(f"mov.u32 {w}, 0")
        return w
    em.emit(f"shr.u32 {w}, %tid.x, 5")
    return _times(em, w, span * size)


def _slot_of(em, lane, lo, span, size) -> str:
    """The byte offset of the slot of `lane` (a register) of this thread's warp."""
    x = em.tmp(32)
    em.emit(f"sub.u32 {x}, {lane}, {lo}")
    at = _times(em, x, size)
    em.emit(f"add.u32 {at}, {at}, {_warp_slots(em, span, size)}")
    return at


def prologue(em, sites):
    """GONE[t] = 0 and, in every site whose span holds this thread's lane, its count 0 (read
    before any arrival)."""
    zero = em.tmp(32)
    em.emit(f"mov.u32 {zero}, 0")
    em.emit(f"st.shared.u32 [{_gone_of_mine(em)}+{sites.address}], {zero}")
    lane = lane_id(em)
    for off, size, lo, span in sites.at.values():
        guard = ""
        if span < 32:
            rel, inside = em.tmp(32), em.tmp(1)
            em.emit(f"sub.u32 {rel}, {lane}, {lo}")
            em.emit(f"setp.lt.u32 {inside}, {rel}, {span}")
            guard = f"@{inside} "
        at = _slot_of(em, lane, lo, span, size)
        em.emit(f"{guard}st.shared.u32 [{at}+{sites.address + off}], {zero}")


def mark_gone(em, sites, guard):
    """Before an exit (under its guard): GONE[t] = 1, so no partial exchange waits for it."""
    one = em.tmp(32)
    em.emit(f"mov.u32 {one}, 1")
    em.emit(f"{guard}st.shared.u32 [{_gone_of_mine(em)}+{sites.address}], {one}")


def _gone_of_mine(em) -> str:
    """The byte offset of this thread's GONE word: 4 x its index in the block."""
    return _times(em, thread_index(em), 4)


class _Site:
    """One arrival at a partial site: where its slots are and what this thread computed."""

    def __init__(self, em, sites, mask):
        off, self.size, self.lo, self.span = sites.at[em.index]
        self.site, self.gone = sites.address + off, sites.address
        self.mask = mask
        self.lane = lane_id(em)
        self.m = self.c = self.value = None


def expand(em, ins, sites, mask):
    """A vote or match with the known partial `mask` (module docstring)."""
    s = arrive(em, ins, sites, mask, None if ins.opcode == "vote" else ins.operands[1])
    hit, part = wait(em, s, compare=True)
    finish(em, ins, hit, part, s.m)


def arrive(em, ins, sites, mask, value):
    """Steps 1 and 2: the membermask names this thread; count the arrival, publish `value` (a
    register, or None: the vote's predicate). Returns the _Site."""
    s = _Site(em, sites, mask)
    lane, size = s.lane, s.size
    s.m, bit = em.tmp(32), em.tmp(32)
    em.emit(f"mov.u32 {s.m}, {mask}")
    em.emit(f"shr.u32 {bit}, {s.m}, {lane}")
    em.emit(f"and.b32 {bit}, {bit}, 1")
    bad = em.tmp(1)
    em.emit(f"setp.eq.u32 {bad}, {bit}, 0")
    fault_where(em, bad, bit, f"`{em.source}`: a thread outside its own membermask executes it "
                "(undefined behaviour; the interpreter raises)")
    me = _slot_of(em, lane, s.lo, s.span, size)
    s.c = c = em.tmp(32)
    if value is None:
        v = _vote_bit(em, ins)
        old, keep, word = em.tmp(32), em.tmp(32), em.tmp(32)
        em.emit(f"ld.shared.u32 {old}, [{me}+{s.site}]")
        em.emit(f"shr.u32 {c}, {old}, 2")
        em.emit(f"add.u32 {c}, {c}, 1")
        em.emit(f"shr.u32 {keep}, {old}, 1")               # the last arrival's bit: v_(c-1)
        em.emit(f"and.b32 {keep}, {keep}, 1")
        em.emit(f"shl.b32 {word}, {c}, 2")
        em.emit(f"or.b32 {word}, {word}, {keep}")
        em.emit(f"shl.b32 {v}, {v}, 1")
        em.emit(f"or.b32 {word}, {word}, {v}")
        em.emit(f"st.shared.u32 [{me}+{s.site}], {word}")
    else:
        s.value = value
        w = 64 if size == 24 else 32
        em.emit(f"ld.shared.u32 {c}, [{me}+{s.site}]")
        em.emit(f"add.u32 {c}, {c}, 1")
        at = _value_at(em, me, c, w)
        em.emit(f"st.shared.u{w} [{at}+{s.site}], {value}")
        em.emit(f"st.shared.u32 [{me}+{s.site}], {c}")
    return s


def wait(em, s, compare):
    """Step 3: wait for every named lane that exists; (hit, part): the lanes taking part, and
    (compare) those whose value is true (vote) or equals this thread's (match)."""
    vote, size, lo, site = s.value is None, s.size, s.lo, s.site
    hi = lo + s.span - 1
    if em.warps == 1:
        first = em.tmp(32)
        em.emit(f"mov.u32 {first}, 0")
    else:
        first = warp_first(em)
    end, j, jbit = em.tmp(32), em.tmp(32), em.tmp(32)
    em.emit(f"sub.u32 {end}, %ntid.x, {first}")            # the warp's lanes (the last may be partial)
    em.emit(f"min.u32 {end}, {end}, {hi + 1}")
    em.emit(f"mov.u32 {j}, {lo}")
    em.emit(f"mov.u32 {jbit}, {1 << lo}")
    part, hit = em.tmp(32), em.tmp(32) if compare else None
    em.emit(f"mov.u32 {part}, 0")
    if compare:
        em.emit(f"mov.u32 {hit}, 0")
    gone = em.tmp(32)                                      # lane j's GONE word and slot
    em.emit(f"add.u32 {gone}, {first}, {lo}")
    em.emit(f"shl.b32 {gone}, {gone}, 2")
    at = _warp_slots(em, s.span, size)
    top, spin, got, nxt, done = em.label(), em.label(), em.label(), em.label(), em.label()
    more = em.tmp(1)
    em.emit(f"setp.ge.u32 {more}, {j}, {end}")
    em.emit(f"@{more} bra {done}")
    em.place(top)
    if s.mask != ((1 << (hi + 1)) - 1) & ~((1 << lo) - 1):  # holes in the mask: skip unnamed lanes
        named, skip = em.tmp(32), em.tmp(1)
        em.emit(f"and.b32 {named}, {s.m}, {jbit}")
        em.emit(f"setp.eq.u32 {skip}, {named}, 0")
        em.emit(f"@{skip} bra {nxt}")
    em.place(spin)
    cj, arrived = em.tmp(32), em.tmp(1)
    word = em.tmp(32)
    em.emit(f"ld.shared.u32 {word}, [{at}+{site}]")
    if vote:
        em.emit(f"shr.u32 {cj}, {word}, 2")
    else:
        em.emit(f"mov.u32 {cj}, {word}")
    em.emit(f"setp.ge.u32 {arrived}, {cj}, {s.c}")
    em.emit(f"@{arrived} bra {got}")
    g, waits = em.tmp(32), em.tmp(1)
    em.emit(f"ld.shared.u32 {g}, [{gone}+{s.gone}]")
    em.emit(f"setp.eq.u32 {waits}, {g}, 0")
    em.emit(f"@{waits} bra {spin}")
    em.emit(f"bra {nxt}")                                  # exited: not taking part
    em.place(got)
    em.emit(f"or.b32 {part}, {part}, {jbit}")
    if compare:
        yes = em.tmp(1)
        if vote:                                           # bit 1 when j is at c, bit 0 at c + 1
            sh, vj = em.tmp(32), em.tmp(32)
            em.emit(f"sub.u32 {sh}, {s.c}, {cj}")
            em.emit(f"add.u32 {sh}, {sh}, 1")
            em.emit(f"shr.u32 {vj}, {word}, {sh}")
            em.emit(f"and.b32 {vj}, {vj}, 1")
            em.emit(f"setp.ne.u32 {yes}, {vj}, 0")
        else:
            w = 64 if size == 24 else 32
            vj = em.tmp(w)
            va = _value_at(em, at, s.c, w)
            em.emit(f"ld.shared.u{w} {vj}, [{va}+{site}]")
            em.emit(f"setp.eq.u{w} {yes}, {vj}, {s.value}")
        em.emit(f"@{yes} or.b32 {hit}, {hit}, {jbit}")
    em.place(nxt)
    em.emit(f"add.u32 {j}, {j}, 1")
    em.emit(f"shl.b32 {jbit}, {jbit}, 1")
    em.emit(f"add.u32 {at}, {at}, {size}")
    em.emit(f"add.u32 {gone}, {gone}, 4")
    em.emit(f"setp.lt.u32 {more}, {j}, {end}")
    em.emit(f"@{more} bra {top}")
    em.place(done)
    return hit, part


def read(em, s, part, src, why) -> str:
    """A shuffle's read of lane `src` (a register, a lane of this warp) after `wait`: a fault
    (`why`) unless it takes part, as the interpreter raises; then its value of this arrival."""
    bit, ok = em.tmp(32), em.tmp(1)
    em.emit(f"shr.u32 {bit}, {part}, {src}")
    em.emit(f"and.b32 {bit}, {bit}, 1")
    em.emit(f"setp.ne.u32 {ok}, {bit}, 0")
    fault_where(em, f"!{ok}", bit, why)
    slot = _slot_of(em, src, s.lo, s.span, s.size)
    at, v = _value_at(em, slot, s.c, 32), em.tmp(32)
    em.emit(f"ld.shared.u32 {v}, [{at}+{s.site}]")
    return v


def _vote_bit(em, ins) -> str:
    """The vote's predicate operand as a 0/1 word."""
    p = ins.operands[1]
    v = em.tmp(32)
    em.emit(f"selp.b32 {v}, 1, 0, {p}")
    return v


def _value_at(em, slot, c, w) -> str:
    """The offset (from the site) of a match's or shuffle's value of arrival parity c & 1."""
    par, at = em.tmp(32), em.tmp(32)
    em.emit(f"and.b32 {par}, {c}, 1")
    em.emit(f"shl.b32 {par}, {par}, {2 if w == 32 else 3}")
    em.emit(f"add.u32 {at}, {slot}, {par}")
    em.emit(f"add.u32 {at}, {at}, {4 if w == 32 else 8}")
    return at


def finish(em, ins, hit, part, m):
    """The result from `hit` and `part` (module docstring, step 4); `m` holds the membermask.
    Shared with warp_exchange's full-mask match."""
    dst = ins.operands[0]
    d, p = (dst.first, dst.second) if isinstance(dst, Pair) else (dst, None)
    mode = ins.modifiers[1] if ins.opcode == "vote" and len(ins.modifiers) > 1 else ins.modifiers[0]
    if ins.opcode == "vote":
        if mode == "ballot":
            em.emit(f"mov.b32 {d}, {hit}")
        elif mode == "any":
            em.emit(f"setp.ne.u32 {d}, {hit}, 0")
        elif mode == "all":
            em.emit(f"setp.eq.u32 {d}, {hit}, {part}")
        else:                                              # uni: none or every one true
            none, every = em.tmp(1), em.tmp(1)
            em.emit(f"setp.eq.u32 {none}, {hit}, 0")
            em.emit(f"setp.eq.u32 {every}, {hit}, {part}")
            em.emit(f"or.pred {d}, {none}, {every}")
        return
    if mode == "any":
        if not isinstance(d, Sink):
            em.emit(f"mov.b32 {d}, {hit}")
        return
    same = em.tmp(1)
    em.emit(f"setp.eq.u32 {same}, {hit}, {part}")
    if not isinstance(d, Sink):
        em.emit(f"selp.b32 {d}, {m}, 0, {same}")
    if p is not None and not isinstance(p, Sink):
        em.emit(f"mov.pred {p}, {same}")
