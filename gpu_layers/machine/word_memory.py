"""Memory instructions as scalar word accesses, for blocks of one warp (`lower(one_warp=True)`).

The memory unit (memory_map) serves scalar loads and stores of one 32- or 64-bit word per lane
and step. Everything else that touches memory becomes a sequence of such accesses here:

  * vector accesses (ld/st .v2/.v4): one 64-bit access per 8 bytes (a 16-byte vector checks its
    alignment first), the elements split out of / packed into the words with shifts and masks;
  * sub-word accesses (.u8/.s8/.u16/.s16/.b8/.b16, scalar or vector, below 4 bytes): the
    containing word is loaded and the element shifted out (sign- or zero-extended); a store is a
    read-modify-write of the word, in rounds, one per position of the element in its word: lanes
    storing to one word in one round write the same bytes, so the last lane wins, as in the
    interpreter, and a later round reads what the earlier ones stored;
  * a signed 32-bit load into a 64-bit register: a 32-bit load and a sign extension;
  * atomics (atom, red; integer and bit types, and the compare-and-swap of float atomic adds):
    turns over the warp's lanes in ascending order (the interpreter's order), in which only
    lane i loads, computes and stores, the others branching past (`lane_loop`, four turns a
    pass, under the warp's atomic lock): each atomic sees every earlier lane's;
  * local memory: each lane's frame (the local size rounded up to 16 bytes) in a shared array
    (`local_frames`: a frame per thread of the block), its address computed once at the kernel's
    entry; each access is checked against the local size first (frames are adjacent: an overrun
    would reach the next lane's) and becomes the same access to shared memory. Accesses of 1 or
    2 bytes keep the interpreter's byte-by-byte rule exactly: the frame has a mask bit per byte
    written so far (`_local_sub_word`).

Why only for one warp: a sequence is atomic only if no other thread's instruction runs between
its steps. The interpreter runs blocks one after another and a warp's instructions in order, so
with one warp per block (the machine core's scope) nothing interleaves; with several warps,
round-robin scheduling would. The loop bound is %ntid.x and the lane is %laneid: the block must
be one-dimensional (gpu_layers.machine.flatten makes it so).

Exactness at the edges, each checked against the interpreter's rules (interp/memory.py):
  * a misaligned access faults in the interpreter; a 2-byte element and a 16-byte vector are
    checked explicitly (a guarded load from address 0 faults, as the original does, though the
    message names the check's load), the others by their own word access's alignment;
  * sub-word accesses of .global: global buffers are initialised whole, so a word read for one
    byte is defined exactly when the byte is; a local word can be partly written, where the
    interpreter's byte would be undefined and the word's is not: its frame's byte masks decide
    (`_local_sub_word`); a shared word too, and shared words are written by every lane of the
    block: sub-word shared accesses are refused;
    and global buffers must be whole words (core.prepare refuses the launch otherwise), so a
    byte's word is in range exactly when the byte is;
  * an atomic's operands are strict in the interpreter (an undefined one raises): the stored
    value carries every operand's poison (x ^ x is 0, or undefined exactly when x is), so the
    sequence raises where the original does. An atomic on a shared word nothing has written
    raises in both (the loaded word is undefined, and so the stored value).
"""
from __future__ import annotations

from gpu_layers.errors import UnsupportedPTX
from gpu_layers.machine import routines
from gpu_layers.ptx.ir import TYPE_BITS, Addr, Imm, Reg, Sink, Sym, Vec

_VEC = ("v2", "v4")
_SPACES = ("global", "shared", "local")


def needs(ins, regbits: dict) -> bool:
    """Whether `ins` is a memory instruction this module expands (`regbits`: register widths)."""
    op = ins.opcode
    if op in ("atom", "red"):
        return True
    if op not in ("ld", "st") or "param" in ins.modifiers or "const" in ins.modifiers:
        return False
    if "local" in ins.modifiers:
        return True
    bits = TYPE_BITS.get(ins.types[0], 0) if ins.types else 0
    if any(m in _VEC for m in ins.modifiers) or bits < 32:
        return True
    return op == "ld" and ins.types[0] == "s32" and regbits.get(str(ins.operands[0])) == 64


def several_warps_problem(ins, regbits: dict) -> str | None:
    """Why `ins`, which this module expands, cannot run in a block of several warps (None: it
    can). Other warps' steps run between a sequence's steps there: a sub-word or scalar load is
    one word access and stays exact, an atomic's read-modify-write holds the turn
    (Kernel.holds); a store of part of a word (read-modify-write rounds), a vector access (split
    into words another warp could write between) and local memory (frames per lane of one warp)
    are not done yet."""
    if not needs(ins, regbits) or ins.opcode in ("atom", "red"):
        return None
    if "local" in ins.modifiers:
        return "local memory (its frames are per lane of one warp)"
    if any(m in _VEC for m in ins.modifiers):
        return "a vector access (split into word accesses another warp's steps could run between)"
    if ins.opcode == "st":
        return "a sub-word store (a read-modify-write of its word in rounds)"
    return None


def expand(em, ins):
    if "local" in ins.modifiers:
        _local(em, ins)
    elif ins.opcode in ("atom", "red"):
        _atomic(em, ins)
    elif ins.opcode == "ld":
        _load(em, ins)
    else:
        _store(em, ins)


# ------------------------------------------------------------------------------------ helpers


def _space(ins) -> str:
    return next((m for m in ins.modifiers if m in _SPACES), "")


def _refuse(ins, why):
    raise UnsupportedPTX([f"line {ins.line}: `{ins}`: {why}"])


def _guard(ins) -> str:
    from gpu_layers.machine.lower import _guard as guard_of
    return guard_of(ins)


def _where_guard(em, w, value, otherwise, guard) -> str:
    """A w-bit register holding `value` in lanes whose guard holds and `otherwise` in the others
    (`value` itself without a guard)."""
    if guard is None:
        return value
    on, off = (value, otherwise) if not guard.negated else (otherwise, value)
    t = em.tmp(w)
    em.emit(f"selp.b{w} {t}, {on}, {off}, {guard.reg}")
    return t


def fault_where(em, p, reg, why: str):
    """A load from address 0 where predicate p (or "!q") holds: a fault in the interpreter (no buffer
    there) and in the machine (outside the memory map), so a check that fails ends the run as
    the original's fault does. `reg` is any register defined here: the load never writes it, and
    a fresh one would be live (a guarded write reads its destination) from the kernel's entry.
    `why` (Kernel.checks) is what the fault means, for the error a run reports."""
    em.checks[len(em.code)] = why
    em.emit(f"@{p} ld.global.u32 {reg}, [0]")


TURNS = 4                        # turns a pass of lane_loop writes out


ATOMIC_LOCK = "__mq_atomic_lock"  # a shared word: 0 while a group of the warp is in lane_loop


AWAY = f"{ATOMIC_LOCK}+4"         # 1 while the lane whose turn it is runs a routine, else 0


def atomic_lock(kernel):
    """The shared VarDecl of the warp's atomic lock (and AWAY, when the kernel has float atomic
    adds: softfloat's turns) when the kernel has atomics, else None."""
    from gpu_layers.ptx.ir import VarDecl

    atoms = [i for i in kernel.instructions if i.opcode in ("atom", "red")]
    if not atoms:
        return None
    away = any(i.types and i.types[-1] in ("f32", "f64") for i in atoms)
    return VarDecl("shared", ATOMIC_LOCK, "b32", 0, align=4, array=[2] if away else None)


def lock_prologue(em, lock):
    """The lock free (1) and nobody away (0), at the kernel's entry."""
    r = em.tmp(32)                   # (the memory unit stores registers)
    em.emit(f"mov.u32 {r}, 1")
    em.emit(f"st.shared.u32 [{ATOMIC_LOCK}], {r}")
    if lock.array:
        em.emit(f"mov.u32 {r}, 0")
        em.emit(f"st.shared.u32 [{AWAY}], {r}")


def lane_loop(em, me, body, turns: int = TURNS, after=None):
    """Turns in ascending lane order, for one warp: for i in 0, TURNS, ... below %ntid.x, and each
    k < turns, the lane whose `me` is i + k runs body() while the others branch past it (only its
    group issues the body; its code is forward, so the cursor rule runs it before the others go
    on). A lane whose `me` is no lane's (32) never runs it. Written out `turns` (1, 2 or 4) to a
    pass; lanes whose turn is not in the pass branch past it, so a pass of four turns (a group
    of four lanes) costs the warp six steps and only that group the turns' two each. after(top),
    when given, emits code the threads still in the loop run after each turn and after each pass
    (`top`: the turn's first instruction, or the pass's end).

    The loop's backward branch lets threads of the warp waiting further on run (the cursor
    rule): in divergent code another group may reach an atomic while this one is in its turns.
    The atomic lock keeps them apart: a group takes it before its turns (spinning while another
    holds it; a group that arrives together with the holder's first step takes it with it, as
    one group) and frees it after, so no two lanes load and store one word in one step. The
    word is 1 when free, so taking it stores the counter's 0 and freeing it the 1 it loaded."""
    free, busy, wait = em.tmp(32), em.tmp(1), em.label()
    i, d = em.tmp(32), em.tmp(32)
    em.emit(f"mov.u32 {i}, 0")
    em.place(wait)
    em.emit(f"ld.shared.u32 {free}, [{ATOMIC_LOCK}]")
    em.emit(f"setp.eq.u32 {busy}, {free}, 0")
    em.emit(f"@{busy} bra {wait}")
    em.emit(f"st.shared.u32 [{ATOMIC_LOCK}], {i}")
    top, end = em.label(), em.label()
    em.place(top)
    # d = me ^ i: i is a multiple of `turns` (a power of two), so me is i + k (k < turns) exactly
    # when d is k, and d >= turns otherwise; me - i would do as well, but a lane below i makes it
    # a wrapped negative: three data chunks a lane instead of one
    em.emit(f"xor.b32 {d}, {me}, {i}")
    if turns > 1:                        # lanes whose turn is not in this pass skip it
        out = em.tmp(1)
        em.emit(f"setp.ge.u32 {out}, {d}, {turns}")
        em.emit(f"@{out} bra {end}")
    for k in range(turns):
        p, skip, turn = em.tmp(1), em.label(), em.label()
        em.place(turn)
        em.emit(f"setp.ne.u32 {p}, {d}, {k}")
        em.emit(f"@{p} bra {skip}")
        body()
        em.place(skip)
        if after is not None:
            after(turn)
    em.place(end)
    if after is not None and turns > 1:
        after(end)
    em.emit(f"add.u32 {i}, {i}, {turns}")
    more = em.tmp(1)
    em.emit(f"setp.lt.u32 {more}, {i}, %ntid.x")
    em.emit(f"@{more} bra {top}")
    em.emit(f"st.shared.u32 [{ATOMIC_LOCK}], {free}")


def thread_index(em) -> str:
    """The thread's index in the block as operand a: %laneid in one warp (the datapath reads it
    as the thread index), %tid.x in a block of several warps. Specials are operand a only."""
    return "%laneid" if em.warps == 1 else "%tid.x"


def warp_first(em) -> str:
    """A register holding the block index of lane 0 of this thread's warp (several warps)."""
    first = em.tmp(32)
    em.emit(f"and.b32 {first}, %tid.x, -32")
    return first


def lane_id(em) -> str:
    """A register holding the thread's lane in its warp: %laneid (one warp: the datapath reads it
    as the thread index) or %tid.x & 31 (several warps; one-dimensional blocks). Specials are
    operand a only: the core reads them there."""
    lane = em.tmp(32)
    if em.warps == 1:
        em.emit(f"mov.u32 {lane}, %laneid")
    else:
        em.emit(f"and.b32 {lane}, %tid.x, 31")
    return lane


def _effective(em, aop, w=None, into=None) -> tuple[str, int]:
    """(a fresh register (or `into`) holding address operand aop's base + offset, its width w): w
    bits, by default the base register's width (a symbol's 32, an absolute address's 64)."""
    base = aop.base
    if isinstance(base, Reg):
        bw = em.regbits.get(base.name, 64)
        w = w or bw
        src = str(base)
        if bw < w:
            src = em.tmp(w)
            em.emit(f"cvt.u{w}.u{bw} {src}, {base}")
        t = into or em.tmp(w)
        em.emit(f"add.u{w} {t}, {src}, {aop.offset}")
        return t, w
    w = w or (32 if isinstance(base, Sym) else 64)
    t = into or em.tmp(w)
    em.emit(f"mov.u{w} {t}, {base if isinstance(base, Sym) else aop.offset}")
    if isinstance(base, Sym) and aop.offset:
        em.emit(f"add.u{w} {t}, {t}, {aop.offset}")
    return t, w


class _Access:
    """One ld/st: its address operand, element type and count, total bytes."""

    def __init__(self, em, ins, aop, elems):
        self.em, self.ins = em, ins
        self.aop = aop
        self.t = ins.types[0]
        self.eb = TYPE_BITS[self.t]                 # element bits
        self.n = len(elems)
        self.total = self.eb * self.n // 8           # bytes
        self.space = _space(ins)
        if not isinstance(aop, Addr):
            _refuse(ins, "the address is not [reg+offset] or [symbol+offset]")
        if self.total not in (1, 2, 4, 8, 16):
            _refuse(ins, f"a {self.total}-byte access")
        if self.total < 4 and self.space != "global":
            _refuse(ins, f"a sub-word .{self.space} access (the machine serves sub-word accesses of "
                         ".global only: a partly written word's bytes would not stay undefined)")

    def addr(self, extra=0) -> str:
        a = self.aop
        return str(Addr(a.base, a.offset + extra))

    def ea(self):
        """The effective address in a fresh register, its width and its low 32 bits."""
        em = self.em
        t, w = _effective(em, self.aop)
        if w == 32:
            return t, w, t
        lo = em.tmp(32)
        em.emit(f"cvt.u32.u64 {lo}, {t}")
        return t, w, lo

    def check_align(self, lo32, n):
        _check_align(self.em, self.ins, lo32, n, f"a misaligned {n}-byte vector access")

    def word_ops(self) -> str:
        """ld/st modifiers without the vector count."""
        return ".".join(m for m in self.ins.modifiers if m not in _VEC)


def _check_align(em, ins, lo32, n, why):
    """A guarded load from address 0 (a fault in the interpreter and the machine) for every
    executing lane whose address (low 32 bits lo32) is not a multiple of n."""
    r = em.tmp(32)
    em.emit(f"and.b32 {r}, {lo32}, {n - 1}")
    r = _where_guard(em, 32, r, 0, ins.guard)
    p = em.tmp(1)
    em.emit(f"setp.ne.u32 {p}, {r}, 0")
    fault_where(em, p, r, why)


def _byte_shift(em, lo) -> str:
    """A register holding the bit offset of address lo's byte in its word: (lo & 3) * 8."""
    shift = em.tmp(32)
    em.emit(f"and.b32 {shift}, {lo}, 3")
    em.emit(f"shl.b32 {shift}, {shift}, 3")
    return shift


def _put_keep(em, value, shift, nbytes) -> tuple[str, str]:
    """(value << shift, the mask of the word's other bytes): a store of nbytes at bit `shift` of
    a word is (word & keep) | put."""
    put, keep = em.tmp(32), em.tmp(32)
    em.emit(f"shl.b32 {put}, {value}, {shift}")
    em.emit(f"mov.b32 {keep}, {(1 << (8 * nbytes)) - 1}")
    em.emit(f"shl.b32 {keep}, {keep}, {shift}")
    em.emit(f"not.b32 {keep}, {keep}")
    return put, keep


def _fresh(em, bits, guarded) -> str:
    """A fresh temporary; set to 0 first when a guarded instruction will write it (a guarded
    write reads its destination: never written, it would be live, and undefined, from the
    kernel's entry, and every such temporary would take a register-file slot)."""
    t = em.tmp(bits)
    if guarded:
        em.emit(f"mov.b{bits} {t}, 0")
    return t


def _opname(ins, mods, t) -> str:
    return ".".join([ins.opcode] + ([mods] if mods else []) + [t])


# ------------------------------------------------------------------------------------- loads


def _load(em, ins):
    dsts = list(ins.operands[0].elems) if isinstance(ins.operands[0], Vec) else [ins.operands[0]]
    acc = _Access(em, ins, ins.operands[1], dsts)
    mods = acc.word_ops()
    g = _guard(ins)
    words = []                        # (register, bits): the loaded little-endian words
    shift = None                      # sub-word: the element's bit offset in its word (a register)
    if acc.total < 4:
        ea, w, lo = acc.ea()
        if acc.total == 2:
            acc.check_align(lo, 2)
        wa = em.tmp(w)
        em.emit(f"and.b{w} {wa}, {ea}, -4")
        word = _fresh(em, 32, g)
        em.emit(f"{g}{_opname(ins, mods, 'u32')} {word}, [{wa}]")
        shift = _byte_shift(em, lo)
        words = [(word, 32)]
    elif acc.total == 4:
        word = _fresh(em, 32, g)
        em.emit(f"{g}{_opname(ins, mods, 'u32')} {word}, {acc.addr()}")
        words = [(word, 32)]
    else:
        if acc.total == 16:
            acc.check_align(acc.ea()[2], 16)
        for k in range(acc.total // 8):
            word = _fresh(em, 64, g)
            em.emit(f"{g}{_opname(ins, mods, 'u64')} {word}, {acc.addr(8 * k)}")
            words.append((word, 64))
    signed = acc.t[0] == "s"
    for i, d in enumerate(dsts):
        if isinstance(d, Sink):
            continue
        bit = i * acc.eb
        src, sw = words[bit // 64] if words[0][1] == 64 else words[0]
        bit %= sw
        _write_elem(em, ins, d, _elem(em, src, sw, bit, acc.eb, signed, shift), acc.eb, signed)


def _elem(em, src, sw, bit, eb, signed, shift):
    """Element of eb bits at bit offset `bit` (+ the register `shift`) of the sw-bit word `src`,
    extended to 32 bits (eb < 64), or src itself (eb == 64)."""
    if eb == 64:
        return src
    if sw == 64:
        if bit:
            t = em.tmp(64)
            em.emit(f"shr.u64 {t}, {src}, {bit}")
            src = t
        t = em.tmp(32)
        em.emit(f"cvt.u32.u64 {t}, {src}")
        src, bit = t, 0
    if shift is not None:
        s = shift
        if bit:
            s = em.tmp(32)
            em.emit(f"add.u32 {s}, {shift}, {bit}")
        t = em.tmp(32)
        em.emit(f"shr.u32 {t}, {src}, {s}")
        src = t
    elif bit:
        t = em.tmp(32)
        em.emit(f"shr.u32 {t}, {src}, {bit}")
        src = t
    if eb == 32:
        return src
    t = em.tmp(32)
    if signed:
        em.emit(f"shl.b32 {t}, {src}, {32 - eb}")
        em.emit(f"shr.s32 {t}, {t}, {32 - eb}")
    else:
        em.emit(f"and.b32 {t}, {src}, {(1 << eb) - 1}")
    return t


def _write_elem(em, ins, d, v, eb, signed):
    """The guarded write of destination d from v (32 bits, or 64 when eb == 64)."""
    g = _guard(ins)
    dw = em.regbits.get(str(d), 32)
    if eb == 64:
        em.emit(f"{g}mov.b64 {d}, {v}")
    elif dw == 64:
        em.emit(f"{g}cvt.{'s64.s32' if signed else 'u64.u32'} {d}, {v}")
    elif dw == 16:
        em.emit(f"{g}cvt.u16.u32 {d}, {v}")
    else:
        em.emit(f"{g}mov.b32 {d}, {v}")


# ------------------------------------------------------------------------------------ stores


def _store(em, ins):
    vals = list(ins.operands[1].elems) if isinstance(ins.operands[1], Vec) else [ins.operands[1]]
    acc = _Access(em, ins, ins.operands[0], vals)
    mods = acc.word_ops()
    g = _guard(ins)
    eb = acc.eb
    if acc.total >= 8:                      # 64-bit words: 8 bytes each
        if acc.total == 16:
            acc.check_align(acc.ea()[2], 16)
        per = 64 // eb
        for k in range(acc.total // 8):
            word = _pack(em, vals[k * per:(k + 1) * per], eb, 64)
            em.emit(f"{g}{_opname(ins, mods, 'u64')} {acc.addr(8 * k)}, {word}")
        return
    if acc.total == 4:
        em.emit(f"{g}{_opname(ins, mods, 'u32')} {acc.addr()}, {_pack(em, vals, eb, 32)}")
        return
    # sub-word: read-modify-write of the containing word, one round per position in the word
    ea, w, lo = acc.ea()
    if acc.total == 2:
        acc.check_align(lo, 2)
    wa = em.tmp(w)
    em.emit(f"and.b{w} {wa}, {ea}, -4")
    pos = em.tmp(32)
    em.emit(f"and.b32 {pos}, {lo}, 3")
    shift = em.tmp(32)
    em.emit(f"shl.b32 {shift}, {pos}, 3")
    put, keep = _put_keep(em, _pack(em, vals, eb, 32), shift, acc.total)    # the element(s) placed
    pos = _where_guard(em, 32, pos, 4, ins.guard)       # lanes whose guard is false take no round
    word = _fresh(em, 32, True)
    for k in range(0, 4, acc.total):
        p = em.tmp(1)
        em.emit(f"setp.eq.u32 {p}, {pos}, {k}")
        em.emit(f"@{p} {_opname(ins, mods, 'u32').replace('st.', 'ld.', 1)} {word}, [{wa}]")
        em.emit(f"and.b32 {word}, {word}, {keep}")
        em.emit(f"or.b32 {word}, {word}, {put}")
        em.emit(f"@{p} {_opname(ins, mods, 'u32')} [{wa}], {word}")


def _pack(em, vals, eb, bits) -> str:
    """The elements `vals` (eb bits each, element i at bit i * eb) as one `bits`-bit register."""
    if eb == bits and len(vals) == 1:
        return _as_bits(em, vals[0], eb)
    acc = None
    for i, v in enumerate(vals):
        x = _as_bits(em, v, eb)
        if eb < 32:
            t = em.tmp(32)
            em.emit(f"and.b32 {t}, {x}, {(1 << eb) - 1}")
            x = t
        if bits == 64 and eb < 64:
            t = em.tmp(64)
            em.emit(f"cvt.u64.u32 {t}, {x}")
            x = t
        if i:
            t = em.tmp(bits)
            em.emit(f"shl.b{bits} {t}, {x}, {i * eb}")
            x = t
            t = em.tmp(bits)
            em.emit(f"or.b{bits} {t}, {acc}, {x}")
            x = t
        acc = x
    return acc


def _as_bits(em, v, eb) -> str:
    """Operand v as a register of max(eb, 32) bits holding its value's low eb bits (or more)."""
    w = 64 if eb == 64 else 32
    if isinstance(v, Imm):
        t = em.tmp(w)
        em.emit(f"mov.b{w} {t}, {v.value & ((1 << w) - 1)}")
        return t
    vw = em.regbits.get(str(v), 32)
    t = em.tmp(w)
    em.emit(f"mov.b{w} {t}, {v}" if vw == w else f"cvt.u{w}.u{vw} {t}, {v}")
    return t


# ----------------------------------------------------------------------------------- atomics


def _atomic(em, ins):
    atom = ins.opcode == "atom"
    ops = ins.operands
    d, aop, b = (ops[0], ops[1], ops[2]) if atom else (None, ops[0], ops[1])
    c = ops[3] if atom and len(ops) > 3 else None
    t = ins.types[-1]
    w = TYPE_BITS[t]
    op = next((m for m in ins.modifiers if m in _ATOM_OPS), None)
    if op is None or w not in (32, 64) or t[0] == "f":
        _refuse(ins, f"a .{op} atomic on .{t} (the machine runs integer atomics of 32 and 64 bits)")
    if not isinstance(aop, Addr):
        _refuse(ins, "the address is not [reg+offset] or [symbol+offset]")
    mods = ".".join(m for m in ins.modifiers if m in _SPACES)
    ld = ".".join(["ld"] + ([mods] if mods else []) + [f"u{w}"])
    st = ld.replace("ld.", "st.", 1)
    taint = None                          # b ^ b (^ c ^ c): 0, or undefined when an operand is
    for x in (b, c):
        if isinstance(x, Reg):
            tx = em.tmp(w)
            em.emit(f"xor.b{w} {tx}, {x}, {x}")
            if taint is not None:
                em.emit(f"xor.b{w} {tx}, {tx}, {taint}")
            taint = tx
    lane = lane_id(em)
    me = _where_guard(em, 32, lane, 32, ins.guard)    # this lane's turn; 32 (never): guarded off
    old = _fresh(em, w, True)

    def turn(g=""):                       # the turn's lane (guard g) loads, computes, stores
        em.emit(f"{g}{ld} {old}, {aop}")
        new = _ATOM_OPS[op](em, w, t, old, b, c)
        x = em.tmp(w)                     # the stored value carries the old word's poison too
        em.emit(f"xor.b{w} {x}, {old}, {old}")
        if taint is not None:
            em.emit(f"xor.b{w} {x}, {x}, {taint}")
        em.emit(f"xor.b{w} {x}, {x}, {new}")
        em.emit(f"{g}{st} {aop}, {x}")

    if em.warps == 1:
        lane_loop(em, me, turn)
    else:                     # 32 turns written out, guarded (a branch cannot hold the turn)
        start = len(em.code)  # and holding the turn: one unit, as the atom is
        for i in range(32):
            p = em.tmp(1)
            em.emit(f"setp.eq.u32 {p}, {me}, {i}")
            turn(f"@{p} ")
        em.holds.update(range(start, len(em.code) - 1))
    if atom and not isinstance(d, Sink):
        em.emit(f"{_guard(ins)}mov.b{w} {d}, {old}")


def _bin(name):
    """old <name> b; min / max compare as the atomic's type (signed for .s32 / .s64)."""
    def f(em, w, t, old, b, c):
        from gpu_layers.machine.lower import _op
        kind = "b" if name in ("and", "or", "xor") else "s" if t[0] == "s" else "u"
        return _op(em, w, name, old, b, f"{kind}{w}")
    return f


def _exch(em, w, t, old, b, c):
    r = em.tmp(w)                         # (a mov: b may be an immediate)
    em.emit(f"mov.b{w} {r}, {b}")
    return r


def _cas(em, w, t, old, b, c):
    """(old == b) ? c : old"""
    from gpu_layers.machine.lower import _sel, _setp
    return _sel(em, w, c, old, _setp(em, "eq", f"b{w}", old, b))


def _inc(em, w, t, old, b, c):
    """(old >= b) ? 0 : old + 1"""
    from gpu_layers.machine.lower import _op, _sel, _setp
    return _sel(em, w, 0, _op(em, w, "add", old, 1, f"u{w}"), _setp(em, "ge", f"u{w}", old, b))


def _dec(em, w, t, old, b, c):
    """(old == 0 || old > b) ? b : old - 1"""
    from gpu_layers.machine.lower import _op, _sel, _setp
    wrap = _op(em, 1, "or", _setp(em, "eq", f"u{w}", old, 0), _setp(em, "gt", f"u{w}", old, b), "pred")
    return _sel(em, w, b, _op(em, w, "sub", old, 1, f"u{w}"), wrap)


_ATOM_OPS = {"add": _bin("add"), "min": _bin("min"), "max": _bin("max"), "and": _bin("and"),
             "or": _bin("or"), "xor": _bin("xor"), "exch": _exch, "cas": _cas, "inc": _inc, "dec": _dec}


# ------------------------------------------------------------------------------ local memory

LOCAL_FRAMES = "__mq_local"      # the shared array holding every lane's local memory
LANE_FRAME = "%mq_frame"         # this lane's frame in it (a shared address), set at entry


def _access_bytes(ins) -> int:
    """Bytes an ld/st moves (its element times its vector count)."""
    vals = ins.operands[0 if ins.opcode == "ld" else 1]
    n = len(vals.elems) if isinstance(vals, Vec) else 1
    return TYPE_BITS[ins.types[0]] // 8 * n


def _sub_word_local(kernel) -> bool:
    return any(i.opcode in ("ld", "st") and "local" in i.modifiers and _access_bytes(i) < 4
               for i in kernel.instructions)


def local_frames(kernel, threads: int = 32):
    """(the shared VarDecl of the lanes' frames, frame bytes, local bytes, mask offset) when the
    kernel accesses local memory, else None. A lane's frame is its local memory (the local size
    rounded up to 16 bytes, so a frame keeps every alignment of the local address inside it), one
    frame per thread of the block (up to 32). When the kernel accesses local memory in parts of a
    word, the frame also holds a mask word per 8 data words after them (mask offset; else None):
    4 bits a word, one per byte written so far (`_local_sub_word`)."""
    from gpu_layers.interp.decode import make_layout
    from gpu_layers.ptx.ir import VarDecl

    if not any(i.opcode in ("ld", "st") and "local" in i.modifiers for i in kernel.instructions):
        return None
    size = make_layout(kernel).local_size
    frame = max(16, -(-size // 16) * 16)
    masks = None
    if _sub_word_local(kernel):
        masks, words = frame, -(-(frame // 4) // 8)
        frame += -(-4 * words // 16) * 16
    n = max(1, min(32, threads))
    return VarDecl("shared", LOCAL_FRAMES, "b8", 0, align=16, array=[n * frame]), frame, size, masks


def frame_prologue(em, frame, masks=None):
    """LANE_FRAME = LOCAL_FRAMES + %laneid * frame (once, at the kernel's entry), and the frame's
    mask words zeroed (nothing written yet)."""
    from gpu_layers.machine.lower import _mul_const

    off = _mul_const(em, 32, "%laneid", frame)
    em.emit(f"mov.u32 {LANE_FRAME}, {LOCAL_FRAMES}")
    em.emit(f"add.u32 {LANE_FRAME}, {LANE_FRAME}, {off}")
    if masks is not None:
        z = em.tmp(32)
        em.emit(f"mov.u32 {z}, 0")
        for off in range(masks, frame, 4):
            em.emit(f"st.shared.u32 [{LANE_FRAME}+{off}], {z}")


def _local(em, ins):
    """A local access as the same access to the lane's frame in shared memory. The local address
    is checked against the local size first (a guarded load from address 0 faults where the
    original's out-of-range local access would): frames are adjacent, so an overrun would
    otherwise reach the next lane's. Shared words and local bytes follow the same rules for
    what was never written (interp/memory.py's Region), so loads read what the original reads."""
    is_ld = ins.opcode == "ld"
    aop = ins.operands[1] if is_ld else ins.operands[0]
    vals = ins.operands[0] if is_ld else ins.operands[1]
    if not isinstance(aop, Addr):
        _refuse(ins, "the address is not [reg+offset] or [symbol+offset]")
    size = _access_bytes(ins)
    if routines.calls_local(em, ins, size):
        routines.call_local(em, ins, size, aop)
        return
    ea, _ = _effective(em, aop, 64)
    chk = _where_guard(em, 64, ea, 0, ins.guard)      # lanes whose guard is false check address 0
    why = f"a {size}-byte local access outside the thread's {em.local_size} bytes of local memory"
    local_at(em, ins, vals, size, ea, chk, why)


def local_at(em, ins, vals, size, ea, chk, why):
    """_local's access at local address ea (64 bits): the range check of chk (ea, or 0 where the
    guard is false; `why` its fault), then the access to the lane's frame."""
    from dataclasses import replace

    is_ld = ins.opcode == "ld"
    lo = em.tmp(32)
    em.emit(f"cvt.u32.u64 {lo}, {ea}")
    if em.local_size < size:                # never in range: every executing lane faults
        em.checks[len(em.code)] = why
        em.emit(f"{_guard(ins)}ld.global.u32 {lo}, [0]")
    else:
        p = em.tmp(1)
        em.emit(f"setp.gt.u64 {p}, {chk}, {em.local_size - size}")
        fault_where(em, p, lo, why)
    sa = em.tmp(32)
    em.emit(f"add.u32 {sa}, {lo}, {LANE_FRAME}")
    if size < 4:
        _local_sub_word(em, ins, vals, size, lo, sa)
        return
    mods = tuple("shared" if m == "local" else m for m in ins.modifiers)
    ops = [vals, Addr(Reg(sa), 0)] if is_ld else [Addr(Reg(sa), 0), vals]
    em.push(replace(ins, modifiers=mods, name=ins.name.replace(".local", ".shared"), operands=ops))
    if not is_ld and em.local_masks is not None:       # its bytes are written now
        _mark_written(em, ins, lo, size)


def _mask_word(em, ins, lo):
    """(the frame address of the mask word covering local offset `lo`, less the mask offset, and
    the bit of lo's byte in it): mask words sit at the frame's mask offset, one per 8 data words,
    4 bits a word."""
    maddr, bit = em.tmp(32), em.tmp(32)
    em.emit(f"shr.u32 {maddr}, {lo}, 5")
    em.emit(f"shl.b32 {maddr}, {maddr}, 2")
    em.emit(f"add.u32 {maddr}, {maddr}, {LANE_FRAME}")
    em.emit(f"and.b32 {bit}, {lo}, 31")               # (word & 7) * 4 + byte = lo & 31, 4 bits a word
    return maddr, bit


def _mark_written(em, ins, lo, size):
    """Set the mask bits of the `size` bytes (4, 8 or 16, aligned) a local store at offset lo
    wrote."""
    g = _guard(ins)
    maddr, bit = _mask_word(em, ins, lo)
    mw = _fresh(em, 32, bool(g))
    em.emit(f"{g}ld.shared.u32 {mw}, [{maddr}+{em.local_masks}]")
    _set_mask_bits(em, g, maddr, mw, bit, size)


def _set_mask_bits(em, g, maddr, mw, bit, size):
    """Store mask word mw (loaded from maddr) with the bits of `size` bytes from `bit` set."""
    put = em.tmp(32)
    em.emit(f"mov.u32 {put}, {(1 << size) - 1}")
    em.emit(f"shl.b32 {put}, {put}, {bit}")
    em.emit(f"or.b32 {mw}, {mw}, {put}")
    em.emit(f"{g}st.shared.u32 [{maddr}+{em.local_masks}], {mw}")


def _local_sub_word(em, ins, vals, size, lo, sa):
    """A local access of 1 or 2 bytes, exactly. The interpreter tracks every byte: a byte never
    written reads as poison when no byte of the access was written, and as 0 in a partly written
    access. The frame's words are whole, so its mask bits (one a byte, zeroed at the entry) say
    which bytes were written: a store reads its word as 0 where none of the word's bytes was
    (the word itself would be poison) and sets its bytes' bits; a load gives poison (a register
    never written, lower._undef_of) where none of its bytes was written. Frames are the lane's own:
    no other lane writes them between these steps."""

    is_ld = ins.opcode == "ld"
    g = _guard(ins)
    if size == 2:
        _check_align(em, ins, lo, 2, "a misaligned 2-byte access")
    maddr, bit = _mask_word(em, ins, lo)
    mw = _fresh(em, 32, bool(g))
    em.emit(f"{g}ld.shared.u32 {mw}, [{maddr}+{em.local_masks}]")
    wa = em.tmp(32)
    em.emit(f"and.b32 {wa}, {sa}, -4")
    shift = _byte_shift(em, lo)
    word = _fresh(em, 32, bool(g))
    em.emit(f"{g}ld.shared.u32 {word}, [{wa}]")
    if is_ld:
        t, written = em.tmp(32), em.tmp(1)
        em.emit(f"shr.u32 {t}, {mw}, {bit}")
        em.emit(f"and.b32 {t}, {t}, {(1 << size) - 1}")
        em.emit(f"setp.ne.u32 {written}, {t}, 0")
        dsts = list(vals.elems) if isinstance(vals, Vec) else [vals]
        eb = TYPE_BITS[ins.types[0]]
        signed = ins.types[0][0] == "s"
        undef = None
        for i, d in enumerate(dsts):
            if isinstance(d, Sink):
                continue
            v = _elem(em, word, 32, i * eb, eb, signed, shift)
            if undef is None:
                from gpu_layers.machine.lower import _undef_of
                undef = _undef_of(em, 32)
            r = em.tmp(32)
            em.emit(f"selp.b32 {r}, {v}, {undef}, {written}")
            _write_elem(em, ins, d, r, eb, signed)
        return
    any_, t = em.tmp(1), em.tmp(32)
    wbit = em.tmp(32)
    em.emit(f"and.b32 {wbit}, {bit}, -4")              # the word's first mask bit
    em.emit(f"shr.u32 {t}, {mw}, {wbit}")
    em.emit(f"and.b32 {t}, {t}, 15")
    em.emit(f"setp.ne.u32 {any_}, {t}, 0")
    base = em.tmp(32)
    em.emit(f"selp.b32 {base}, {word}, 0, {any_}")     # a word nothing wrote: its bytes are 0
    eb = TYPE_BITS[ins.types[0]]
    value = _pack(em, list(vals.elems) if isinstance(vals, Vec) else [vals], eb, 32)
    put, keep = _put_keep(em, value, shift, size)
    em.emit(f"and.b32 {base}, {base}, {keep}")
    em.emit(f"or.b32 {base}, {base}, {put}")
    em.emit(f"{g}st.shared.u32 [{wa}], {base}")
    _set_mask_bits(em, g, maddr, mw, bit, size)
