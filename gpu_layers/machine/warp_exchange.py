"""Warp exchanges for one warp (`lower(one_warp=True)`): shfl.sync and vote.sync through a
staging array in shared memory.

The datapath reads only the executing lane's registers, so a lane cannot read another's. A
shuffle becomes:

  1. `bar.sync 0`. The interpreter runs shfl.sync once every non-exited thread its membermask
     names has arrived at it. With one warp per block, a membermask that names every thread of
     the block (checked next) makes that "every non-exited thread of the block", which is what
     the block barrier waits for; after it the warp runs as one, so the rest of the sequence
     executes for all lanes together.
  2. The membermask check: a mask missing a thread of the block faults (a guarded load from
     address 0): partial masks are refused at run time, never run with the wrong waiting rule.
  3. Each lane stores its value with the shuffle's epoch (a per-thread count of shuffles, equal in
     every lane that takes part, kept shifted to the slot's high word) in its 8-byte slot of the
     staging array.
  4. shfl: each lane computes its source lane j and pval by PTX's rule (interp/decode.py
     `_shfl`), loads slot j and checks its epoch: a slot of this shuffle, or the lane read does
     not take part (it exited): the interpreter raises there, and the sequence faults. vote:
     each lane ORs every slot of this exchange into its own word (a loop over the block's
     slots); a lane of an older epoch (exited) does not count, as in the interpreter's vote over
     the executing lanes.

In a block of several warps (`lower(warps=W)`, W > 1) the block barrier would wait for the
other warps, which may never come: the wait in step 1 is the machine's warp barrier instead
(`bar.warp.sync -1` at an index in Kernel.warp_barriers: the block barrier's rule for the
threads of one warp, interp/machine.py), the membermask must name every thread of the warp,
the staging array has 32 slots per warp (slot = %tid.x) and a vote reads its own warp's slots.
Another warp's steps may run between the sequence's steps; they touch only their own slots.

Stricter than the original in one case only, and by raising: a lane whose value is undefined
raises at its store even when no lane reads it (a store's value is observable).
"""
from __future__ import annotations

from dataclasses import replace

from gpu_layers.errors import UnsupportedPTX
from gpu_layers.ptx.ir import Pair, Reg, Sink, VarDecl

from . import partial_exchange
from .liveness import _regs
from .partial_exchange import FULL, is_partial, known
from .word_memory import fault_where, lane_id, thread_index, warp_first

STAGE = "__mq_stage"             # 32 slots of 8 bytes: value | epoch << 32
ACTIVE = "__mq_active"           # activemask: a word per lane
EPOCH = "%mq_epoch"              # (shuffles this thread has taken part in) << 32, 64 bits
EPOCH_ONE = 1 << 32
HIGH_WORD = 0xFFFFFFFF00000000


def needs(ins) -> bool:
    """Whether `ins` is a warp-synchronous source instruction this module expands (the machine's
    own warp barrier, `bar.warp.sync -1` emitted here, is pushed as it is: lower checks that the
    instruction is the source one)."""
    return ins.opcode in ("shfl", "vote", "match", "activemask") or _is_warpsync(ins)


def _is_warpsync(ins) -> bool:
    return ins.opcode == "bar" and "warp" in ins.modifiers


def staging(kernel, warps: int = 1, constants=None):
    """The staging array's VarDecl (32 slots per warp of the block) when the kernel shuffles,
    votes or matches with a membermask that is not a known partial one
    (gpu_layers.machine.partial_exchange), else None."""
    if not any(i.opcode in ("shfl", "vote", "match") and not is_partial(i, constants or {})
               for i in kernel.instructions):
        return None
    return VarDecl("shared", STAGE, "b8", 0, align=8, array=[32 * warps * 8])


def active_scratch(kernel, warps: int = 1):
    """activemask's words (32 per warp) when the kernel has one, else None."""
    if not any(i.opcode == "activemask" for i in kernel.instructions):
        return None
    return VarDecl("shared", ACTIVE, "b8", 0, align=8, array=[32 * warps * 4])


def prologue(em):
    """Epoch 0, and this lane's slot written (epoch 0: no exchange yet), so a vote reads a
    defined slot for a lane that exits before it."""
    em.emit(f"mov.b64 {EPOCH}, 0")
    em.emit(f"st.shared.u64 [{_slot(em, thread_index(em))}], {EPOCH}")


def _lane(em) -> str:
    """The thread's lane in its warp, as an operand a: %laneid itself (one warp) or a register
    (word_memory.lane_id)."""
    return "%laneid" if em.warps == 1 else lane_id(em)


def expand(em, ins):
    if ins.guard is not None:
        raise UnsupportedPTX([f"line {ins.line}: `{ins}`: a guarded {ins.opcode} (the machine's "
                              "warp exchange waits for the whole block)"])
    if ins.opcode == "activemask":
        _activemask(em, ins)
    elif _is_warpsync(ins):
        _warpsync(em, ins)
    elif ins.opcode != "shfl" and em.partial is not None and em.index in em.partial.at:
        partial_exchange.expand(em, ins, em.partial, partial_exchange.mask_of(ins, em.constants))
    elif ins.opcode == "vote":
        _vote(em, ins)
    elif ins.opcode == "match":
        _match(em, ins)
    else:
        _shfl(em, ins)


def _arrive(em, value, mask):
    """Steps 1-3: the barrier, the membermask check, this lane's slot = value | epoch << 32."""
    _wait(em, mask)
    em.emit(f"add.u64 {EPOCH}, {EPOCH}, {EPOCH_ONE}")
    slot = _slot(em, thread_index(em))
    em.emit(f"st.shared.u64 [{slot}], {EPOCH}")     # the epoch's high word, then the value's low one
    em.emit(f"st.shared.u32 [{slot}], {value}")


def _wait(em, mask):
    """Steps 1-2: the barrier and the membermask check (it names every thread of the block /
    warp)."""
    if em.warps == 1:
        em.emit("bar.sync 0")
    else:                            # the machine's warp barrier: this warp's threads only
        em.warp_barriers.add(len(em.code))
        em.emit("bar.warp.sync -1")
    known = _known(em, mask)
    if known is not None:            # (its register's mov may not be emitted: folded_constants)
        mask = known
    if known != FULL:                # a full mask names every thread: no check
        bm = em.tmp(32)              # the membermask names every thread of the block (warp):
        if em.warps == 1:            # (mask | ~((1 << n) - 1)) == ~0 (n >= 32: shl gives 0)
            em.emit(f"shl.b32 {bm}, 1, %ntid.x")
        else:                        # n = ntid - 32 W: the warp's threads
            n = warp_first(em)
            em.emit(f"sub.u32 {n}, %ntid.x, {n}")
            em.emit(f"shl.b32 {bm}, 1, {n}")
        em.emit(f"sub.u32 {bm}, {bm}, 1")
        em.emit(f"not.b32 {bm}, {bm}")
        em.emit(f"or.b32 {bm}, {bm}, {mask}")
        bad = em.tmp(1)
        em.emit(f"setp.ne.u32 {bad}, {bm}, -1")
        fault_where(em, bad, bm, f"`{em.source}`: its membermask does not name every thread of the "
                    f"{'block' if em.warps == 1 else 'warp'} (the machine's exchange waits for them all)")


def folded_constants(kernel, movs, values) -> set:
    """Indices of the `mov`s of constant registers (`movs`: register -> index of its `mov`,
    remat.constants; `values`: those of an integer) that only warp exchanges read, and only as
    operands they fold (shfl's b, c and membermask; vote's membermask): not emitted at all."""
    own = {movs[r] for r in values}
    read = set()
    for i, ins in enumerate(kernel.instructions):
        if i in own:
            continue                                 # a constant's own write
        ops = ins.operands[:2] if needs(ins) else ins.operands      # dst and a / dst and p
        for op in ops:
            read.update(_regs(op))
        if ins.guard is not None:
            read.add(ins.guard.reg)
    return {movs[r] for r in values if r not in read}


def _known(em, op):
    """The 32-bit value of an operand known when lowering (partial_exchange.known), else None."""
    return known(op, em.constants)


def _read(em, lane):
    """(value, whether the slot is this exchange's) of `lane`'s slot."""
    got, hi = em.tmp(64), em.tmp(64)
    em.emit(f"ld.shared.u64 {got}, [{_slot(em, lane)}]")
    em.emit(f"and.b64 {hi}, {got}, {HIGH_WORD}")
    ok = em.tmp(1)
    em.emit(f"setp.eq.u64 {ok}, {hi}, {EPOCH}")
    v = em.tmp(32)
    em.emit(f"cvt.u32.u64 {v}, {got}")
    return v, ok


def _vote(em, ins):
    """vote.sync.{ballot,any,all,uni}: every lane stores a word whose OR over the lanes taking
    part gives the answer (ballot: p << lane; any: p; all: !p; uni: p ? 1 : 2), then ORs every
    slot of this exchange's epoch into its own (a loop over the block's slots); lanes that
    exited (an older epoch) do not count."""
    mode = ins.modifiers[1] if len(ins.modifiers) > 1 else ins.modifiers[0]
    d, p, mask = ins.operands
    if not isinstance(p, Reg):
        raise UnsupportedPTX([f"line {ins.line}: `{ins}`: the predicate operand is not a register"])
    word = em.tmp(32)
    yes, no = {"all": (0, 1), "uni": (1, 2)}.get(mode, (1, 0))
    em.emit(f"selp.b32 {word}, {yes}, {no}, {p}")
    if mode == "ballot":
        em.emit(f"shl.b32 {word}, {word}, {lane_id(em)}")
    _arrive(em, word, mask)
    acc = em.tmp(64)
    em.emit(f"mov.b64 {acc}, 0")
    _each_slot(em, lambda got, ok: em.emit(f"@{ok} or.b64 {acc}, {acc}, {got}"))   # (high words dropped)
    low = em.tmp(32)
    em.emit(f"cvt.u32.u64 {low}, {acc}")
    if mode == "ballot":
        em.emit(f"mov.b32 {d}, {low}")
    elif mode == "any":
        em.emit(f"setp.ne.u32 {d}, {low}, 0")
    elif mode == "all":
        em.emit(f"setp.eq.u32 {d}, {low}, 0")
    else:                                            # uni: not both a true and a false lane
        em.emit(f"setp.ne.u32 {d}, {low}, 3")


def _match(em, ins):
    """match.sync.{any,all} with a full (or checked) membermask: every lane stores its value,
    then reads every slot of this exchange: `part` the lanes taking part, `hit` those holding
    its own value (a b64 value: the low and the high words exchanged one after the other, the
    hits of both); the result as partial_exchange.finish makes it."""
    _, value, mask = ins.operands
    if ins.types[-1] == "b64":
        lo, hi = em.tmp(32), em.tmp(32)
        em.emit(f"cvt.u32.u64 {lo}, {value}")
        wide = em.tmp(64)
        em.emit(f"shr.u64 {wide}, {value}, 32")
        em.emit(f"cvt.u32.u64 {hi}, {wide}")
        words = [lo, hi]
    else:
        words = [value]
    hit = part = None
    for word in words:
        _arrive(em, word, mask)
        h, part = _gather(em, word)
        if hit is None:
            hit = h
        else:
            em.emit(f"and.b32 {hit}, {hit}, {h}")
    known = _known(em, mask)
    m = mask
    if known is not None:
        m = em.tmp(32)
        em.emit(f"mov.u32 {m}, {known}")
    partial_exchange.finish(em, ins, hit, part, m)


def _gather(em, mine):
    """(hit, part) over this exchange's slots of the warp: lanes whose slot holds this epoch,
    and those of them whose value equals `mine`."""
    hit, part, bit = em.tmp(32), em.tmp(32), em.tmp(32)
    em.emit(f"mov.u32 {hit}, 0")
    em.emit(f"mov.u32 {part}, 0")
    em.emit(f"mov.u32 {bit}, 1")

    def body(got, ok):
        em.emit(f"@{ok} or.b32 {part}, {part}, {bit}")
        low, same = em.tmp(32), em.tmp(1)
        em.emit(f"cvt.u32.u64 {low}, {got}")
        em.emit(f"setp.eq.u32 {same}, {low}, {mine}")
        em.emit(f"and.pred {same}, {same}, {ok}")
        em.emit(f"@{same} or.b32 {hit}, {hit}, {bit}")
        em.emit(f"shl.b32 {bit}, {bit}, 1")
    _each_slot(em, body)
    return hit, part


def _each_slot(em, body):
    """A loop over this warp's slots that exist: body(slot word, whether it is this exchange's,
    i.e. its lane takes part), then the next slot."""
    at, end = _slot_range(em)
    top = em.label()
    em.place(top)
    got, hi, ok = em.tmp(64), em.tmp(64), em.tmp(1)
    em.emit(f"ld.shared.u64 {got}, [{at}+{em.stage_address}]")
    em.emit(f"and.b64 {hi}, {got}, {HIGH_WORD}")
    em.emit(f"setp.eq.u64 {ok}, {hi}, {EPOCH}")
    body(got, ok)
    em.emit(f"add.u32 {at}, {at}, 8")
    more = em.tmp(1)
    em.emit(f"setp.lt.u32 {more}, {at}, {end}")
    em.emit(f"@{more} bra {top}")


def _slot_range(em):
    """(first, end) byte offsets of this warp's slots that exist (the block's last warp may be
    partial), in fresh registers."""
    at, end = em.tmp(32), em.tmp(32)
    if em.warps == 1:
        em.emit(f"mov.u32 {at}, 0")                  # the slot's offset: 8 x lane
        em.emit(f"mov.u32 {end}, %ntid.x")
        em.emit(f"shl.b32 {end}, {end}, 3")
    else:                                            # this warp's slots: 8 x (32 W .. 32 W + 31)
        em.emit(f"shl.b32 {at}, {warp_first(em)}, 3")
        em.emit(f"mov.u32 {end}, %ntid.x")
        em.emit(f"shl.b32 {end}, {end}, 3")
        top = em.tmp(32)
        em.emit(f"add.u32 {top}, {at}, 256")
        em.emit(f"min.u32 {end}, {end}, {top}")
    return at, end


def _warpsync(em, ins):
    """bar.warp.sync (__syncwarp) with a membermask that names every thread of the warp: the
    warp-wide wait (the block barrier in one warp, the machine's warp barrier in several); a
    known partial mask is refused by name."""
    mask = ins.operands[0]
    known = _known(em, mask)
    if known is not None and known != FULL:
        raise UnsupportedPTX([f"line {ins.line}: `{ins}`: a partial membermask "
                              f"({known:#010x}) for bar.warp.sync (the machine waits for whole warps there)"])
    _wait(em, mask)


def _activemask(em, ins):
    """activemask: the threads of the warp issued at this step. Every active lane clears its
    warp's 32 words, sets its own to its bit and ORs them all: straight-line code, which the
    group runs through together (the cursor rule) while the warp's other threads stay where
    they are. That the group is the original's is lower's check (check_activemask)."""
    d = ins.operands[0]
    base, zero = em.tmp(32), em.tmp(64)
    if em.warps == 1:
        em.emit(f"mov.u32 {base}, 0")
    else:
        em.emit(f"shl.b32 {base}, {warp_first(em)}, 2")
    em.emit(f"mov.b64 {zero}, 0")
    for q in range(16):
        em.emit(f"st.shared.u64 [{base}+{em.active_address + 8 * q}], {zero}")
    lane, mine, bit = lane_id(em), em.tmp(32), em.tmp(32)
    em.emit(f"shl.b32 {mine}, {lane}, 2")
    em.emit(f"add.u32 {mine}, {mine}, {base}")
    em.emit(f"shl.b32 {bit}, 1, {lane}")
    em.emit(f"st.shared.u32 [{mine}+{em.active_address}], {bit}")
    acc = em.tmp(64)
    for q in range(16):
        word = em.tmp(64)
        em.emit(f"ld.shared.u64 {word}, [{base}+{em.active_address + 8 * q}]")
        if q == 0:
            em.emit(f"mov.b64 {acc}, {word}")
        else:
            em.emit(f"or.b64 {acc}, {acc}, {word}")
    lo, top = em.tmp(32), em.tmp(64)
    em.emit(f"shr.u64 {top}, {acc}, 32")
    em.emit(f"or.b64 {acc}, {acc}, {top}")
    em.emit(f"cvt.u32.u64 {lo}, {acc}")
    em.emit(f"mov.b32 {d}, {lo}")


def check_activemask(kernel, branchy, prologue_branches):
    """Raise UnsupportedPTX unless every activemask sees the original's active threads: the
    machine runs a source instruction's straight-line expansion as one step of the group (the
    cursor rule), so where nothing that can run before an activemask has branches of its own
    (a routine's call, a loop, a barrier: `branchy`, source indices) the warp's groups form as
    in the original, step for step."""
    from gpu_layers.ptx.validator import SUPPORTED

    code = kernel.instructions
    preds = {i: [] for i in range(len(code))}
    for i, ins in enumerate(code):
        kind = SUPPORTED[ins.name].kind
        nxt = []
        if kind == "bra":
            nxt.append(kernel.labels[ins.operands[0].name])
        if not (kind in ("bra", "exit") and ins.guard is None):
            nxt.append(i + 1)
        for n in nxt:
            if n < len(code):
                preds[n].append(i)
    for a, ins in enumerate(code):
        if ins.opcode != "activemask":
            continue
        seen, todo = {a}, [a]
        while todo:
            for p in preds[todo.pop()]:
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        bad = sorted(seen & branchy)
        if bad or prologue_branches:
            why = (f"line {code[bad[0]].line} (`{code[bad[0]]}`), which may run before it, is lowered into "
                   "code with branches of its own" if bad else "the lowering's prologue branches")
            raise UnsupportedPTX([f"line {ins.line}: `{ins}`: {why}, so the machine's active threads "
                                  "there need not be the original's"])


def _shfl(em, ins):
    mode = next(m for m in ins.modifiers if m in ("up", "down", "bfly", "idx"))
    dst, a, b, c, mask = ins.operands
    d, p = (dst.first, dst.second) if isinstance(dst, Pair) else (dst, None)
    t32 = lambda: em.tmp(32)           # noqa: E731
    partial = em.partial is not None and em.index in em.partial.at
    if partial:                        # a known partial mask: partial_exchange's rendezvous
        site = partial_exchange.arrive(em, ins, em.partial, _known(em, mask), a)
        _, part = partial_exchange.wait(em, site, compare=False)
    else:
        _arrive(em, a, mask)
    me = _lane(em)                     # the lane in the warp (operand a)
    # the source lane j and pval (PTX ISA shfl.sync; interp/decode.py _shfl); with b and c known
    # when lowering, their fields are immediates and a segment of 0 drops its terms
    kb, kc = _known(em, b), _known(em, c)
    if kb is not None:
        bval = kb & 31
    else:
        bval = t32()
        em.emit(f"and.b32 {bval}, {b}, 31")
    if kc is not None:
        cval, seg = kc & 31, (kc >> 8) & 31
        nseg = ~seg & FULL
    else:
        cval, seg, nseg = t32(), t32(), t32()
        em.emit(f"and.b32 {cval}, {c}, 31")
        em.emit(f"shr.u32 {seg}, {c}, 8")
        em.emit(f"and.b32 {seg}, {seg}, 31")
        em.emit(f"not.b32 {nseg}, {seg}")
    if seg == 0:                       # a segment of the whole warp: minl 0, maxl = cval
        minl, maxl = 0, cval
    else:
        minl, maxl = t32(), t32()
        em.emit(f"and.b32 {minl}, {me}, {seg}")
        if kc is not None:
            em.emit(f"or.b32 {maxl}, {minl}, {cval & nseg}")
        else:
            em.emit(f"and.b32 {maxl}, {cval}, {nseg}")
            em.emit(f"or.b32 {maxl}, {maxl}, {minl}")
    j, out = t32(), em.tmp(1)          # out: not pval (the lane reads itself)
    if mode == "up":
        em.emit(f"sub.u32 {j}, {me}, {bval}")
        em.emit(f"setp.lt.s32 {out}, {j}, {maxl}")
    else:
        if mode == "down":
            em.emit(f"add.u32 {j}, {me}, {bval}")
        elif mode == "bfly":
            em.emit(f"xor.b32 {j}, {me}, {bval}")
        elif isinstance(bval, int) and isinstance(nseg, int):
            em.emit(f"or.b32 {j}, {minl}, {bval & nseg}" if seg else f"mov.u32 {j}, {bval}")
        else:
            em.emit(f"and.b32 {j}, {nseg}, {bval}")
            em.emit(f"or.b32 {j}, {j}, {minl}")
        em.emit(f"setp.gt.s32 {out}, {j}, {maxl}")
    src = t32()                        # (the lane is operand a: the core reads specials there)
    em.emit(f"selp.b32 {src}, {me}, {j}, {out}")
    why = f"`{em.source}`: a lane read a lane that does not take part (it exited)"
    if partial:
        v = partial_exchange.read(em, site, part, src, why.replace("(it exited)", "(it exited, or "
                                                                    "the membermask does not name it)"))
    else:
        if em.warps > 1:               # the source's slot: 32 W + its lane
            first = warp_first(em)
            em.emit(f"add.u32 {first}, {first}, {src}")
            src = first
        v, ok = _read(em, src)
        fault_where(em, f"!{ok}", src, why)          # as the interpreter raises
    if not isinstance(d, Sink):
        em.emit(f"mov.b32 {d}, {v}")
    if p is not None and not isinstance(p, Sink) and p.name in em.liveness.live_out[em.index]:
        em.emit(f"not.pred {p}, {out}")              # (a predicate nothing reads is not written)


def shared_addresses(kernel, extra) -> dict:
    """Shared addresses in the lowered kernel, whose variables are the kernel's, then `extra`
    (interp/decode.py make_layout): a slot is then `[lane * 8 + address]`, one instruction."""
    from gpu_layers.interp.decode import make_layout

    if not extra:
        return {}
    return make_layout(replace(kernel, vars=list(kernel.vars) + list(extra))).shared


def _slot(em, lane) -> str:
    """The address operand (inside the brackets) of `lane`'s staging slot."""
    off = em.tmp(32)
    em.emit(f"shl.b32 {off}, {lane}, 3")
    return f"{off}+{em.stage_address}"
