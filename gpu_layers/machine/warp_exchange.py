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
     every lane that takes part) in its 8-byte slot of the staging array.
  4. shfl: each lane computes its source lane j and pval by PTX's rule (interp/decode.py
     `_shfl`), loads slot j and checks its epoch: a slot of this shuffle, or the lane read does
     not take part (it exited): the interpreter raises there, and the sequence faults. vote:
     each lane reads every lane's slot (a loop over the block's lanes); a lane of an older
     epoch (exited) does not count, as in the interpreter's vote over the executing lanes.

Stricter than the original in one case only, and by raising: a lane whose value is undefined
raises at its store even when no lane reads it (a store's value is observable).
"""
from __future__ import annotations

from gpu_layers.errors import UnsupportedPTX
from gpu_layers.ptx.ir import Pair, Reg, Sink, VarDecl

from .word_memory import fault_where, lane_loop

STAGE = "__mq_stage"             # 32 slots of 8 bytes: value | epoch << 32
EPOCH = "%mq_epoch"              # shuffles this thread has taken part in


def needs(ins) -> bool:
    return ins.opcode in ("shfl", "vote")


def staging(kernel):
    """The staging array's VarDecl when the kernel shuffles or votes, else None."""
    if not any(needs(i) for i in kernel.instructions):
        return None
    return VarDecl("shared", STAGE, "b8", 0, align=8, array=[32 * 8])


def prologue(em):
    """Epoch 0, and this lane's slot written (epoch 0: no exchange yet), so a vote reads a
    defined slot for a lane that exits before it."""
    em.emit(f"mov.u32 {EPOCH}, 0")
    zero = em.tmp(64)
    em.emit(f"mov.b64 {zero}, 0")
    em.emit(f"st.shared.u64 [{_slot(em, '%laneid')}], {zero}")


def expand(em, ins):
    if ins.guard is not None:
        raise UnsupportedPTX([f"line {ins.line}: `{ins}`: a guarded {ins.opcode} (the machine's "
                              "warp exchange waits for the whole block)"])
    if ins.opcode == "vote":
        _vote(em, ins)
    else:
        _shfl(em, ins)


def _arrive(em, value, mask):
    """Steps 1-3: the barrier, the membermask check, this lane's slot = value | epoch << 32."""
    em.emit("bar.sync 0")
    bm = em.tmp(32)                  # the membermask names every thread of the block:
    em.emit(f"shl.b32 {bm}, 1, %ntid.x")            # (mask | ~((1 << ntid) - 1)) == ~0 (ntid 32: 0)
    em.emit(f"sub.u32 {bm}, {bm}, 1")
    em.emit(f"not.b32 {bm}, {bm}")
    em.emit(f"or.b32 {bm}, {bm}, {mask}")
    bad = em.tmp(1)
    em.emit(f"setp.ne.u32 {bad}, {bm}, -1")
    fault_where(em, bad, bm)
    em.emit(f"add.u32 {EPOCH}, {EPOCH}, 1")
    w, e = em.tmp(64), em.tmp(64)
    em.emit(f"cvt.u64.u32 {w}, {value}")
    em.emit(f"cvt.u64.u32 {e}, {EPOCH}")
    em.emit(f"shl.b64 {e}, {e}, 32")
    em.emit(f"or.b64 {w}, {w}, {e}")
    em.emit(f"st.shared.u64 [{_slot(em, '%laneid')}], {w}")


def _read(em, lane):
    """(value, whether the slot is this exchange's) of `lane`'s slot."""
    got, hi64 = em.tmp(64), em.tmp(64)
    em.emit(f"ld.shared.u64 {got}, [{_slot(em, lane)}]")
    hi = em.tmp(32)
    em.emit(f"shr.u64 {hi64}, {got}, 32")
    em.emit(f"cvt.u32.u64 {hi}, {hi64}")
    ok = em.tmp(1)
    em.emit(f"setp.eq.u32 {ok}, {hi}, {EPOCH}")
    v = em.tmp(32)
    em.emit(f"cvt.u32.u64 {v}, {got}")
    return v, ok


def _vote(em, ins):
    """vote.sync.{ballot,any,all,uni}: every lane stores its predicate, then reads every lane's
    slot (a loop over the block's lanes); lanes that exited (an older epoch) do not count."""
    mode = ins.modifiers[1] if len(ins.modifiers) > 1 else ins.modifiers[0]
    d, p, mask = ins.operands
    if not isinstance(p, Reg):
        raise UnsupportedPTX([f"line {ins.line}: `{ins}`: the predicate operand is not a register"])
    bit = em.tmp(32)
    em.emit(f"selp.b32 {bit}, 1, 0, {p}")
    _arrive(em, bit, mask)
    acc, act = em.tmp(32), em.tmp(32)
    for r in (acc, act):
        em.emit(f"mov.b32 {r}, 0")

    def count(i):
        v, ok = _read(em, i)
        one = em.tmp(32)
        em.emit(f"selp.b32 {one}, 1, 0, {ok}")       # lane i takes part
        em.emit(f"and.b32 {v}, {v}, {one}")          # ... and its predicate holds
        em.emit(f"shl.b32 {one}, {one}, {i}")
        em.emit(f"or.b32 {act}, {act}, {one}")
        em.emit(f"shl.b32 {v}, {v}, {i}")
        em.emit(f"or.b32 {acc}, {acc}, {v}")

    lane_loop(em, count)
    if mode == "ballot":
        em.emit(f"mov.b32 {d}, {acc}")
    elif mode == "any":
        em.emit(f"setp.ne.u32 {d}, {acc}, 0")
    elif mode == "all":
        em.emit(f"setp.eq.u32 {d}, {acc}, {act}")
    else:                                            # uni: all equal
        z = em.tmp(1)
        em.emit(f"setp.eq.u32 {z}, {acc}, 0")
        em.emit(f"setp.eq.u32 {d}, {acc}, {act}")
        em.emit(f"or.pred {d}, {d}, {z}")


def _shfl(em, ins):
    mode = next(m for m in ins.modifiers if m in ("up", "down", "bfly", "idx"))
    dst, a, b, c, mask = ins.operands
    d, p = (dst.first, dst.second) if isinstance(dst, Pair) else (dst, None)
    t32 = lambda: em.tmp(32)           # noqa: E731
    _arrive(em, a, mask)
    # the source lane j and pval (PTX ISA shfl.sync; interp/decode.py _shfl)
    bval, cval, seg = t32(), t32(), t32()
    em.emit(f"and.b32 {bval}, {b}, 31")
    em.emit(f"and.b32 {cval}, {c}, 31")
    em.emit(f"shr.u32 {seg}, {c}, 8")
    em.emit(f"and.b32 {seg}, {seg}, 31")
    minl, maxl, nseg = t32(), t32(), t32()
    em.emit(f"and.b32 {minl}, %laneid, {seg}")
    em.emit(f"not.b32 {nseg}, {seg}")
    em.emit(f"and.b32 {maxl}, {cval}, {nseg}")
    em.emit(f"or.b32 {maxl}, {maxl}, {minl}")
    j, out = t32(), em.tmp(1)          # out: not pval (the lane reads itself)
    if mode == "up":
        em.emit(f"sub.u32 {j}, %laneid, {bval}")
        em.emit(f"setp.lt.s32 {out}, {j}, {maxl}")
    else:
        if mode == "down":
            em.emit(f"add.u32 {j}, %laneid, {bval}")
        elif mode == "bfly":
            em.emit(f"xor.b32 {j}, %laneid, {bval}")
        else:
            em.emit(f"and.b32 {j}, {bval}, {nseg}")
            em.emit(f"or.b32 {j}, {j}, {minl}")
        em.emit(f"setp.gt.s32 {out}, {j}, {maxl}")
    src = t32()                        # (%laneid is operand a: the core reads specials there)
    em.emit(f"selp.b32 {src}, %laneid, {j}, {out}")
    v, ok = _read(em, src)
    fault_where(em, f"!{ok}", src)                   # the lane read did not take part: fault
    if not isinstance(d, Sink):
        em.emit(f"mov.b32 {d}, {v}")
    if p is not None and not isinstance(p, Sink):
        em.emit(f"not.pred {p}, {out}")



def _slot(em, lane) -> str:
    """A register holding the shared address of `lane`'s staging slot."""
    off, base = em.tmp(32), em.tmp(32)
    em.emit(f"shl.b32 {off}, {lane}, 3")
    em.emit(f"mov.u32 {base}, {STAGE}")
    em.emit(f"add.u32 {base}, {base}, {off}")
    return base
