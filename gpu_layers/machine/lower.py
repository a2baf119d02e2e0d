"""Lowering: PTX -> machine code, a subset of PTX in which every instruction is one machine step.

The compiled machine executes a small set of instruction kinds in one step each (`MACHINE_KINDS`:
integer add/sub/min/max, logic, shifts, leading zeros (clz), integer compares and selects, moves
and integer conversions, memory accesses and atomics on integers, warp exchanges, control). Every other form
the interpreter supports is either expanded here into a sequence of machine steps, or refused by
name (`machine_problems`), never run wrongly.

Expansions keep the interpreter's semantics exactly, poison included:
  * a guarded instruction computes into fresh temporaries unguarded, then one guarded move writes
    its destination, so threads whose guard is false change nothing;
  * no expansion branches on data that may be undefined: bits are combined with selp (poison in
    an operand stays poison in the result, never becomes an observable branch), and the loops of
    the multiply and divide sequences run a fixed number of iterations on a fresh counter; only
    values proven defined (definedness.defined) are branched on: a 64-bit division on its
    divisor's size, a division skipping its leading steps (_dsteps), the float routines' fast
    entries;
  * integer division by zero and signed MIN / -1 select `%mq_undef`, a register nothing writes
    (the interpreter's poison), exactly where the original gives an undefined value;
  * every machine instruction has at most one immediate source operand (the datapath's one
    immediate field, gpu_layers/machine/datapath_program.py): the others move first, unguarded,
    into fresh temporaries of their operand's type (`_Emitter.push`; nvcc's `selp.b32 %r1, 1, 0,
    %p1` becomes `mov.b32 %mq7, 1` + `selp.b32 %r1, %mq7, 0, %p1`). Barrier thread counts stay.

Binary32 and binary64 arithmetic (add/sub/mul/fma/div in every rounding mode, sqrt, rcp,
min/max, setp, conversions between floats and integers and between f32 and f64, rounding to
integral values, .sat) becomes integer sequences in `softfloat.py`, with each format's NaN rules
(interp/fp.py, interp/fp64.py); add, sub, mul, fma, div, rcp and sqrt share one subroutine per
format emitted after the kernel (Kernel.calls records its call sites for liveness), and float
atomic adds become compare-and-swap loops around it.

Machine code is ordinary PTX for the reference interpreter, so tests run the lowered kernel next
to the original and compare outputs bit for bit. Costs are those of v1 (docs/machine.md): a
data-dependent multiply is a shift-and-add loop over the multiplier's bits, four a turn (about
5.75 steps a bit; a wide multiply loops over the w bits of its operand, not 2w), a multiply by a
constant becomes shifts and adds; an f32 fma is about 330 machine steps per thread.
"""
from __future__ import annotations

from dataclasses import replace
from functools import partial

from gpu_layers.errors import UnsupportedPTX
from gpu_layers.ptx.ir import TYPE_BITS, FImm, Imm, Kernel, Reg, RegDecl, Sink, Vec, in_own_module
from gpu_layers.ptx.parser import parse_instruction
from gpu_layers.ptx.validator import MACHINE_STEPS, SUPPORTED, validate

from . import partial_exchange, ranges, routines, softfloat, warp_exchange, word_memory
from .const_fold import fold_constants
from .definedness import defined
from .liveness import liveness

# Form kinds executed in one machine step (with the type restrictions of `_is_machine_form`).
MACHINE_KINDS = frozenset({
    "iadd", "isub", "imin", "imax", "logic", "not", "shl", "shr", "clz", *MACHINE_STEPS, "setp", "selp",
    "mov", "cvt", "cvta", "ld", "st", "atom", "red", "shfl", "vote", "match", "activemask", "warpsync", "bar",
    "bra", "exit", "nop"})
FLOAT_TYPES = ("f16", "f32", "f64", "bf16")
UNDEF = "%mq_undef"          # never written: reading it is the interpreter's poison


def _is_machine_form(ins) -> bool:
    form = SUPPORTED[ins.name]
    if form.kind not in MACHINE_KINDS:
        return False
    if form.kind in ("setp", "cvt", "atom", "red"):
        return not any(t in FLOAT_TYPES for t in ins.types)
    if form.kind == "selp":             # the datapath has one immediate per instruction
        return not _two_constants(ins)
    return True


def _two_constants(ins) -> bool:
    if len(ins.operands) < 3:
        return False
    a, b = ins.operands[1], ins.operands[2]
    return isinstance(a, (Imm, FImm)) and isinstance(b, (Imm, FImm)) and str(a) != str(b)


def _expansion(ins):
    """The expansion that lowers `ins`, or None (a machine form, or not supported)."""
    kind = SUPPORTED[ins.name].kind
    floats = any(t in softfloat.FORMATS for t in ins.types)          # f32 or f64
    if kind == "setp" and floats:
        return softfloat.x_fsetp
    if kind in ("cvt", "dcvt") and floats:
        return softfloat.cvt_expansion(ins)
    if kind in ("atom", "red") and "add" in ins.modifiers and ins.types[-1] in softfloat.FORMATS:
        return softfloat.x_fatom
    if kind == "dminmax":
        return softfloat.x_fminmax
    return _EXPANSIONS.get(kind)


def machine_problems(kernel) -> list[str]:
    """Every instruction of `kernel` (already lowered or not) the machine cannot run, by line."""
    return [f"line {ins.line}: `{ins.name}` is not supported by the compiled machine yet"
            for ins in kernel.instructions if not _is_machine_form(ins) and _expansion(ins) is None]


# lower's options, from the fewest steps to the fewest instructions: multiply and divide steps
# written out or in loops, conversions inline or as routines, and within each the float
# routines' fast entries, all, those of the smaller routines ({add, mul, div}, {add, mul}),
# add only, none, each written out at its sites first (inline_floats); last, local sub-word
# accesses and 32-bit divisions as routines too (call_sequences). core.machine_kernel takes the
# first whose allocated program fits (kept here, not in core.py, whose source keys the compiled
# core's cache)
_FAST_SETS = (True, frozenset({"add", "mul", "div"}), frozenset({"add", "mul"}), frozenset({"add"}), False)
LOWERINGS = tuple(x for o in ({"straight_steps": True}, {}, {"cvt_routines": True}) for f in _FAST_SETS
                  for x in (({**o, "fast_floats": f, "inline_floats": True},) if f else ())
                  + ({**o, "fast_floats": f},)) \
    + ({"cvt_routines": True, "fast_floats": False, "call_sequences": True},)


def lower(kernel: Kernel, one_warp: bool = False, warps: int = 1, cvt_routines: bool = False,
          straight_steps: bool = False, fast_floats=True, threads: int | None = None,
          inline_floats: bool = False, call_sequences: bool = False) -> Kernel:
    """The kernel as machine code (a new Kernel; the input is not changed). `one_warp`: for
    one-dimensional blocks (the machine core's scope), memory instructions become scalar word
    accesses of .global and .shared (gpu_layers.machine.word_memory: vectors, sub-word accesses,
    atomics, local memory in per-lane frames of shared memory). `warps` > 1 (a block of several
    warps): only what stays exact when other warps' steps run between a sequence's steps
    (word_memory.several_warps_problem names the rest); each atomic's turns, one per lane of the
    warp, are written out and hold the turn (Kernel.holds: the same warp takes the next step). `cvt_routines`: float-to-integer
    and f64-to-f32 conversions call one routine each with the mode in a register
    (gpu_layers.machine.cvt_routines: fewer instructions, more steps) instead of inline code.
    `straight_steps`: the machine's multiply and divide steps written out one after another
    instead of in counted loops (no counter steps, more instructions: for programs that fit)
    where they run often: in the float routines and inside the source's loops. `fast_floats`
    (True, False, or a set of "add", "mul", "fma", "div"): float sites of those operations whose
    operands are proven defined call the routines' fast entries (gpu_layers.machine.fast_paths:
    fewer steps, more instructions); `inline_floats`: those fast entries written out at each site
    instead (softfloat._inline: no argument copies, no branch and return chain; more
    instructions). `call_sequences`: unguarded local accesses of 1 or 2 bytes and 32-bit
    divisions call one routine per kind (gpu_layers.machine.routines: fewer instructions, more
    steps) instead of their inline sequences. `threads`: the block's threads, when the code is for a launch
    of that block (its %tid.x bound shortens multiplies, gpu_layers.machine.ranges; local memory has a frame for
    each, up to 32).

    Raises UnsupportedPTX listing every instruction that is neither a machine form nor expanded."""
    if kernel.module is not None:
        validate(kernel.module, kernel.name)
    problems = machine_problems(kernel)
    if problems:
        raise UnsupportedPTX(problems)
    kernel = fold_constants(generic_as_global(kernel))
    em = _Emitter(kernel, one_warp)
    em.straight = straight_steps
    em.looped = _in_loops(kernel)
    em.divergent = _divergent(kernel, em.looped)
    em.warps = warps
    em.cvt_routines = cvt_routines
    em.call_sequences = call_sequences
    em.fast_floats = fast_floats
    em.inline_floats = inline_floats
    em.threads = threads or em.threads
    em.bounds = ranges.bounds(kernel, em.threads)
    frames = word_memory.local_frames(kernel, threads or 32) if one_warp else None
    if frames:                              # local memory: every lane's frame in shared memory
        var, frame, em.local_size, em.local_masks = frames
        em.regbits[word_memory.LANE_FRAME] = 32
        word_memory.frame_prologue(em, frame, em.local_masks)
    stage = warp_exchange.staging(kernel, warps, em.constants) if one_warp else None
    active = warp_exchange.active_scratch(kernel, warps) if one_warp else None
    n = threads if threads and 32 * (warps - 1) < threads <= 32 * warps else 32 * warps
    sites = partial_exchange.Sites(kernel, em.constants, n) if one_warp else None
    pvar = sites and sites.var()
    extra = [v for v in ([frames[0]] if frames else []) + [stage, active, pvar] if v]
    at = warp_exchange.shared_addresses(kernel, extra)
    if stage:                               # shuffles: a staging array in shared memory
        em.regbits[warp_exchange.EPOCH] = 64
        em.stage_address = at[warp_exchange.STAGE]
        warp_exchange.prologue(em)
    if active:
        em.active_address = at[warp_exchange.ACTIVE]
    if sites and sites.at:                  # votes and matches of part of the warp
        em.partial, sites.address = sites, at[partial_exchange.PARTIAL]
        partial_exchange.prologue(em, sites)
    lock = word_memory.atomic_lock(kernel) if one_warp and warps == 1 else None
    if lock:                                # atomics: the warp's lock (word_memory.lane_loop)
        word_memory.lock_prologue(em, lock)
    starts, branchy = [], set()
    activemask = any(ins.opcode == "activemask" for ins in kernel.instructions)
    prologue_branches = activemask and _branches(em, 0, None)
    for i, ins in enumerate(kernel.instructions):
        starts.append(len(em.code))
        em.line = ins.line          # generated code carries the line it came from
        em.start = len(em.code)
        em.index = i
        em.source = ins
        if i in em.folded:
            continue                # a constant only the warp exchanges read: folded there
        if em.partial is not None and SUPPORTED[ins.name].kind == "exit":
            partial_exchange.mark_gone(em, em.partial, _guard(ins))
        if _is_machine_form(ins):
            em.push(ins)
        else:
            _expansion(ins)(em, ins)
        if activemask and _branches(em, em.start, ins):
            branchy.add(i)
    starts.append(len(em.code))
    if activemask:
        warp_exchange.check_activemask(kernel, branchy, prologue_branches)
    if softfloat.has_routines(em):
        last = kernel.instructions[-1] if kernel.instructions else None
        ends = last is not None and SUPPORTED[last.name].kind == "exit" and last.guard is None
        if not ends or starts[-1] in {starts[i] for i in kernel.labels.values()}:
            if em.partial is not None:
                partial_exchange.mark_gone(em, em.partial, "")
            em.emit("ret")          # nothing falls or branches into the routine
        em.index = None             # routine code: shared by every call
        softfloat.emit_routines(em)
    labels = {name: starts[i] for name, i in kernel.labels.items()}
    labels.update(em.labels)
    calls, returns = softfloat.call_table(em)
    regs, kvars = list(kernel.regs) + em.decls(), list(kernel.vars)
    if frames:
        regs.append(RegDecl(type="b32", names=[word_memory.LANE_FRAME], line=0))
        kvars.append(frames[0])
    if stage:
        regs.append(RegDecl(type="b64", names=[warp_exchange.EPOCH], line=0))
        kvars.append(stage)
    kvars += [v for v in (active, pvar) if v]
    if lock:
        kvars.append(lock)
    out = replace(kernel, regs=regs, instructions=em.code, labels=labels, vars=kvars,
                  directives=list(kernel.directives), calls=calls, returns=returns,
                  holds=frozenset(em.holds), warp_barriers=frozenset(em.warp_barriers),
                  checks=dict(em.checks), machine=True)
    validate(in_own_module(out, kernel).module, out.name)
    if extra:                               # the slots' addresses were emitted as numbers
        from gpu_layers.interp.decode import make_layout

        shared = make_layout(out).shared
        assert all(shared[v.name] == at[v.name] for v in extra)
    return out


_CONTROL = ("bra", "bar", "ret", "exit", "call")


def _branches(em, start, source) -> bool:
    """Whether the code emitted from `start` on has control flow of its own (a branch, a barrier,
    a label placed inside it) beyond the source instruction's own (`source`: a branch, exit or
    barrier pushed as it is); warp_exchange.check_activemask's `branchy`."""
    own = int(source is not None and source.opcode in _CONTROL)
    flow = sum(ins.opcode in _CONTROL for ins in em.code[start:])
    inner = any(start < at < len(em.code) or (at == start and source is None)
                for at in em.labels.values())
    return flow > own or inner


_SPACES = ("global", "shared", "local", "param", "const")


def generic_as_global(kernel: Kernel) -> Kernel:
    """Generic ld/st/atom/red as .global accesses when nothing in the kernel makes a generic
    address of shared or local memory (cvta.shared / cvta.local to generic): a generic address
    is then a global buffer's (interp/memory.py: global addresses are generic addresses, as
    nvcc's inline-asm pointers are) or no valid address, where both fault. (A shared-window
    address reached by arithmetic alone would fault here where the original reads shared
    memory: stricter, by raising.) The kernel itself when there is nothing to change."""
    code = kernel.instructions
    if any(i.opcode == "cvta" and "to" not in i.modifiers for i in code):
        return kernel
    out, changed = [], False
    for ins in code:
        if (ins.opcode in ("ld", "st", "atom", "red") and not any(m in _SPACES for m in ins.modifiers)
                and ins.name == ".".join((ins.opcode,) + tuple(ins.modifiers) + tuple(ins.types))):
            mods = ("global",) + tuple(ins.modifiers)
            ins = replace(ins, modifiers=mods, name=".".join((ins.opcode,) + mods + tuple(ins.types)))
            changed = True
        out.append(ins)
    return replace(kernel, instructions=out) if changed else kernel


# ----------------------------------------------------------------------------------- emitter


_TMP = {1: ("pred", "%mqp"), 16: ("b16", "%mqh"), 32: ("b32", "%mq"), 64: ("b64", "%mqd")}


class _Emitter:
    """New instructions, fresh temporaries and labels for one kernel."""

    def __init__(self, kernel, one_warp=False):
        self.one_warp = one_warp
        self.local_masks = None     # local memory's mask offset in a frame (word_memory.local_frames)
        self.straight = False       # multiply / divide steps written out (lower's straight_steps)
        self.fast_floats = False    # which float sites may call the routines' fast entries (lower's fast_floats)
        self.inline_floats = False  # fast entries written out at their sites (lower's inline_floats)
        self.cvt_routines = False   # float conversions call routines (lower's cvt_routines)
        self.call_sequences = False  # local sub-word accesses and divisions call routines (lower's call_sequences)
        self.inlining = False       # emitting such an entry now (its steps written out as the routine's)
        self.looped = set()         # source instruction indices inside a loop (a backward branch's range)
        self.divergent = set()      # ... where part of a warp may be elsewhere (_divergent)
        self.warps = 1
        self.holds = set()          # indices after which the same warp takes the next step
        self.source = None          # the source instruction being expanded
        self.warp_barriers = set()  # indices of the machine's warp barriers (Kernel.warp_barriers)
        self.partial = None         # partial_exchange.Sites of the known partial membermasks
        self.bounds = {}            # register -> its upper bound (gpu_layers.machine.ranges)
        self.threads = 1 << 32      # the block's threads where known (lower's `threads`)
        self.active_address = None  # activemask's words (warp_exchange.ACTIVE)
        self.checks = {}            # index -> what its deliberate fault means (Kernel.checks)
        self.code = []
        self.labels = {}
        self.count = {w: 0 for w in _TMP}
        self.nlabels = 0
        self.line = 0
        self.used_undef = False
        self.regnames = {n for d in kernel.regs for n in d.names if not n.startswith("%")}
        self.regbits = {n: TYPE_BITS[d.type] for d in kernel.regs for n in d.names}
        self.start = 0          # first emitted instruction of the current expansion
        # the source kernel's liveness (a shuffle's predicate nothing reads is not written) and
        # its constant registers (remat.constants: register -> index of its `mov`) with their
        # integer values (a multiply by one is shifts and adds; the warp exchanges fold them)
        from gpu_layers.machine.remat import constants

        self.liveness = liveness(kernel)
        self.defined = defined(kernel)      # registers defined before each source instruction
        movs = constants(kernel, self.liveness)
        self.constants = {r: kernel.instructions[i].operands[1].value for r, i in movs.items()
                          if isinstance(kernel.instructions[i].operands[1], Imm)}
        self.index = 0          # the source instruction being expanded
        self.folded = warp_exchange.folded_constants(kernel, movs, self.constants) if one_warp else set()

    def is_defined(self, x) -> bool:
        """Whether operand x (a register name or an int) is defined in every thread at the source
        instruction being expanded (definedness.defined); routine code (index None) proves nothing."""
        return isinstance(x, int) or (self.index is not None and x in self.defined[self.index])

    def read_elsewhere(self, last) -> set:
        """Registers the current expansion reads (other than as `last`'s destination): a value
        still read later in a loop must not be renamed."""
        names = set()
        for ins in self.code[self.start:]:
            ops = ins.operands[1:] if ins is last else ins.operands
            for op in ops:
                names.add(str(op))
        return names

    def tmp(self, bits: int) -> str:
        bits = {8: 16}.get(bits, bits)
        self.count[bits] += 1
        return f"{_TMP[bits][1]}{self.count[bits]}"

    def label(self) -> str:
        self.nlabels += 1
        return f"$Mq_{self.nlabels}"

    def place(self, label: str):
        self.labels[label] = len(self.code)

    def emit(self, text: str):
        self.push(parse_instruction(text.rstrip(";") + ";", self.line, self.regnames))

    def push(self, ins):
        """Append a machine instruction, with at most one immediate source operand: every
        immediate but the last moves first, unguarded, into a fresh temporary of its operand's
        type (the datapath has one immediate field per instruction; docs/machine.md §4). A
        barrier's thread count stays an immediate (the interpreter requires one). For one warp,
        memory instructions the memory unit does not serve expand into word accesses."""
        if self.one_warp and word_memory.needs(ins, self.regbits):
            word_memory.expand(self, ins)
            return
        if self.one_warp and warp_exchange.needs(ins) and ins is self.source:
            warp_exchange.expand(self, ins)
            return
        if ins.opcode == "mov" and any(isinstance(o, Vec) for o in ins.operands):
            _vector_mov(self, ins)
            return
        imms = _imm_positions(ins)
        if len(imms) > 1 and SUPPORTED[ins.name].kind != "bar":
            ops = list(ins.operands)
            for i, j in imms[:-1]:
                imm = ops[i] if j is None else ops[i].elems[j]
                ty = _MOV_TYPE.get(_operand_type(ins, i), _operand_type(ins, i))
                t = self.tmp(TYPE_BITS[ty])
                self.code.append(parse_instruction(f"mov.{ty} {t}, {imm.value};", self.line, self.regnames))
                if j is None:
                    ops[i] = Reg(t)
                else:
                    elems = list(ops[i].elems)
                    elems[j] = Reg(t)
                    ops[i] = Vec(tuple(elems))
            ins = replace(ins, operands=ops)
        self.code.append(ins)

    def undef(self) -> str:
        self.used_undef = True
        return UNDEF

    def decls(self) -> list:
        out = []
        for w, (t, prefix) in _TMP.items():
            if self.count[w]:
                out.append(RegDecl(type=t, names=[f"{prefix}{i}" for i in range(1, self.count[w] + 1)],
                                   line=0))
        if self.used_undef:
            out.append(RegDecl(type="b64", names=[UNDEF], line=0))
        return out


_MOV_TYPE = {"b8": "b16", "u8": "u16", "s8": "s16"}        # mov has no 8-bit forms


def _vector_mov(em, ins):
    """mov.bW d, {a, b, ..} (pack: element i at bits i * W/n) and mov.bW {a, b, ..}, s (unpack)
    as shifts, ors and truncating conversions: the datapath moves one register per step.
    Temporaries unguarded, the destinations written under the guard; an undefined element makes
    the packed word undefined, an undefined word every element (the interpreter's "prop")."""
    d, src = ins.operands
    w = TYPE_BITS[ins.types[0]]
    g = _guard(ins)
    if isinstance(d, Vec):                                  # unpack
        ew = w // len(d.elems)
        for i, e in enumerate(d.elems):
            if isinstance(e, Sink):
                continue
            x = str(src)
            if i:
                x = _op(em, w, "shr", x, i * ew, f"u{w}")
            em.emit(f"{g}cvt.u{max(ew, 16)}.u{w} {e}, {x}" if ew < w else f"{g}mov.b{w} {e}, {x}")
        return
    ew = w // len(src.elems)
    acc = None
    for i, e in enumerate(src.elems):
        x = _ext(em, ew, str(e), False, w)
        if i:
            x = _op(em, w, "shl", x, i * ew)
            x = _op(em, w, "or", acc, x)
        acc = x
    em.emit(f"{g}mov.b{w} {d}, {acc}")


def _imm_positions(ins) -> list:
    """(operand index, vector element index or None) of every integer immediate operand."""
    out = []
    for i, op in enumerate(ins.operands):
        if isinstance(op, Imm):
            out.append((i, None))
        elif isinstance(op, Vec):
            out += [(i, j) for j, e in enumerate(op.elems) if isinstance(e, Imm)]
    return out


def _operand_type(ins, i) -> str:
    """The PTX type source operand i of `ins` is read as."""
    kind = SUPPORTED[ins.name].kind
    if kind in ("setp", "selp") and i == 3:
        return "pred"
    if kind in ("shl", "shr") and i == 2:
        return "u32"
    if kind == "cvt" and i == 1:
        return ins.types[1]
    return ins.types[-1] if ins.types else "b32"


def _parts(ins):
    t = ins.types[0]
    return t, TYPE_BITS[t], t[0] == "s", [str(o) for o in ins.operands]


def _guard(ins) -> str:
    return f"{ins.guard} " if ins.guard else ""


def _undef_of(em, w):
    """A w-bit poison value (a never-written register read at width w)."""
    if w == 64:
        return em.undef()
    t = em.tmp(w)
    em.emit(f"cvt.u{w}.u64 {t}, {em.undef()}")
    return t


def _copy(em, w, src) -> str:
    """A fresh w-bit temporary holding src truncated to w bits."""
    t = em.tmp(w)
    em.emit(f"add.u{w} {t}, {src}, 0")
    return t


def _ext(em, w, src, signed, to) -> str:
    """src (w bits) sign- or zero-extended to `to` bits, in a fresh temporary (an immediate stays
    an immediate, so multiplies by constants become shifts)."""
    if src.lstrip("-").isdigit():
        v = int(src) & ((1 << w) - 1)
        if signed and v >> (w - 1):
            v -= 1 << w
        return str(v & ((1 << to) - 1))
    if to == w:
        return _copy(em, w, src)
    t = em.tmp(to)
    em.emit(f"cvt.{'s' if signed else 'u'}{to}.{'s' if signed else 'u'}{w} {t}, {src}")
    return t


def _sel(em, w, a, b, p) -> str:
    t = em.tmp(w)
    em.emit(f"selp.b{w} {t}, {a}, {b}, {p}")
    return t


def _setp(em, cmp, ty, a, b) -> str:
    p = em.tmp(1)
    em.emit(f"setp.{cmp}.{ty} {p}, {a}, {b}")
    return p


def _op(em, w, op, a, b, ty=None) -> str:
    t = em.tmp(w)
    em.emit(f"{op}.{ty or 'b%d' % w} {t}, {a}, {b}")
    return t


def _finish(em, ins, t, value):
    """The one guarded write of the destination. Unguarded, when the last instruction produced
    `value` at the destination's width (so no extension differs), it writes the destination."""
    dst = ins.operands[0]
    last = em.code[-1] if len(em.code) > em.start else None
    if (ins.guard is None and last is not None and last.operands and str(last.operands[0]) == value
            and last.opcode not in ("bra", "setp") and em.regbits.get(str(dst)) == TYPE_BITS[t]
            and TYPE_BITS.get(last.types[0] if last.types else "", 0) == TYPE_BITS[t]
            and value not in em.read_elsewhere(last)):
        last.operands[0] = dst
        return
    em.emit(f"{_guard(ins)}mov.{t} {dst}, {value}")


# -------------------------------------------------------------------------- multiply / divide


UNROLL = 4          # bits per iteration of the 64-bit division loop
STEP_UNROLL = 8     # machine multiply / divide steps (mstep, dstep) per iteration of their loops


def _known(em, x) -> str:
    """x, or its value where x is a constant register (remat.constants: one `mov` of an
    immediate, read only after it)."""
    return str(em.constants[x]) if x in em.constants else x


def _mul_lo(em, w, a, b) -> str:
    """a * b mod 2^w (w-bit patterns): constants become shifts and adds, else multiply steps
    (64 bits: a_lo b_lo + ((a_lo b_hi + a_hi b_lo) mod 2^32) << 32, three 32 x 32 products)."""
    for x, y in ((a, b), (b, a)):
        y = _known(em, y)
        if y.lstrip("-").isdigit():
            return _mul_const(em, w, x, int(y) & ((1 << w) - 1))
    if w <= 32:
        ka, kb = _bits(em, a, w), _bits(em, b, w)
        if ka < kb:                     # the operand with fewer bits is the multiplier
            a, b, ka, kb = b, a, kb, ka
        return _low(em, w, _mul_steps(em, _ext(em, w, a, False, 64), w, b, w, bits=kb, low32=True))
    ka, kb = _bits(em, a, 64), _bits(em, b, 64)
    if ka < kb:                         # b: the operand with fewer bits
        a, b, ka, kb = b, a, kb, ka
    if ka <= 32:                        # both below 2^32: one whole product
        return _mul_steps(em, a, ka, b, 64, bits=kb)
    (al, ah), (bl, bh) = _halves(em, a), _halves(em, b)
    if kb <= 32:                        # b below 2^32: a_lo b + ((a_hi b) mod 2^32) << 32
        cross = _mul_steps(em, ah, 32, b, 64, bits=kb, low32=True)
        return _op(em, 64, "add", _mul_steps(em, al, 32, b, 64, bits=kb), _op(em, 64, "shl", cross, 32), "u64")
    cross = _op(em, 64, "add", _mul32(em, al, bh, low32=True), _mul32(em, ah, bl, low32=True), "u64")
    return _op(em, 64, "add", _mul32(em, al, bl), _op(em, 64, "shl", cross, 32), "u64")


def _bits(em, x, w) -> int:
    """How many bits w-bit operand x needs (gpu_layers.machine.ranges; w when unknown)."""
    return ranges.bits_below(em.bounds, x, w, em.threads)


def _low(em, w, r64) -> str:
    """The low w bits of a 64-bit register (itself when w = 64)."""
    if w == 64:
        return r64
    t = em.tmp(w)
    em.emit(f"cvt.u{w}.u64 {t}, {r64}")
    return t


def _halves(em, x) -> tuple[str, str]:
    """(low, high) 32-bit halves of a 64-bit register, each zero-extended in a 64-bit register."""
    return _op(em, 64, "and", x, 0xFFFFFFFF), _op(em, 64, "shr", x, 32, "u64")


def _mul32(em, x, y, low32=False) -> str:
    """The 64-bit product of two 64-bit registers holding 32-bit values (_halves); with low32,
    only its low 32 bits are the product's (the rest is below the product, never above)."""
    return _mul_steps(em, x, 32, y, 64, bits=32, low32=low32)


QUAD_XBITS = 30     # x < 2^30: 3x < 2^32 fits mquad's high half whole


def pack3(em, x) -> str:
    """mquad's multiplicand word (3x mod 2^32) << 32 | x, for a 64-bit register x < 2^32: one
    machine step (`mtrip x, x`: (2x + x) mod 2^32 into the high half, x's low half kept)."""
    return _op(em, 64, "mtrip", x, x)


def _mul_steps(em, x, xbits, y, wy, bits=None, unroll=STEP_UNROLL, low32=False, packed=None) -> str:
    """A fresh 64-bit register holding x * y exactly, for a 64-bit x < 2^xbits and a multiplier
    y < 2^bits in a wy-bit register (bits defaults to wy), xbits + bits <= 64.

    Two multiplier bits a step (`mquad`) where x < 2^30 or only the product's low 32 bits are
    needed (low32): R = y << (64 - bits') (bits' = bits rounded up to even), b = pack3(x)
    (`packed`: already packed), then bits' / 2 steps R = 4 R + (0, x, 2x, 3x mod 2^32)[R's top
    two bits]. After k steps R = (y << 2k) << (64 - bits') + P with x * (y's top 2k bits) >= P
    >= 0 (equal when 3x < 2^32, congruent mod 2^32 otherwise): P grows below y's remaining bits
    without reaching them, and at the end it is the whole of R. Else one bit a step: `bits` steps
    `mstep R, R, x` (R = 2 R + (R's top bit ? x : 0)). Loops take `unroll` steps an iteration
    (fewer for mquad where the count needs it). A wider x (up to 32 bits, the whole product kept)
    is x = 4 x'' + x1: R = x'' * y by mquad steps (< 2^62), x1 put in R's top two bits, then two
    mstep by y finish 4 R + x1 * y (2 R + y < 2^63 never reaches x1's second bit). Each step reads
    x (or a word made from it) and R, so an undefined x or y makes the product undefined, as PTX's
    mul does."""
    bits = bits or wy
    assert xbits + bits <= 64 and bits <= wy
    if packed is None and not low32 and QUAD_XBITS < xbits <= QUAD_XBITS + 2:
        y64 = _ext(em, wy, y, False, 64) if wy < 64 else y
        r = _mul_steps(em, _op(em, 64, "shr", x, 2, "u64"), xbits - 2, y64, 64, bits, unroll)
        em.emit(f"add.u64 {r}, {r}, {_op(em, 64, 'shl', x, 62)}")
        for _ in range(2):
            em.emit(f"mstep.b64 {r}, {r}, {y64}")
        return r
    if packed is not None or low32 or xbits <= QUAD_XBITS:
        bits += bits & 1
        assert xbits + bits <= 64 and (low32 or xbits <= QUAD_XBITS)
        b = packed if packed is not None else pack3(em, x)
        r = _top(em, wy, y, bits)
        n = bits // 2
        u = max(d for d in range(1, unroll + 1) if n % d == 0)
        machine_steps(em, n, u, lambda: em.emit(f"mquad.b64 {r}, {r}, {b}"))
        return r
    assert bits % unroll == 0
    r = _top(em, wy, y, bits)
    machine_steps(em, bits, unroll, lambda: em.emit(f"mstep.b64 {r}, {r}, {x}"))
    return r


def _top(em, wy, y, bits) -> str:
    """A fresh 64-bit register holding y << (64 - bits) (a wy-bit y < 2^bits): one shift where y
    is already a 64-bit register."""
    if wy == 64 and not y.lstrip("-").isdigit():
        return _op(em, 64, "shl", y, 64 - bits)
    r = _ext(em, wy, y, False, 64)
    em.emit(f"shl.b64 {r}, {r}, {64 - bits}")
    return r


def machine_steps(em, n, unroll, step):
    """step() n times: written out when the kernel is lowered with straight_steps and the code
    runs often (a float routine, or a source instruction inside a loop: written out once, the
    counter's steps saved at every run), else in a counted loop of unroll steps an iteration (n a
    multiple of unroll)."""
    if _written_out(em):
        for _ in range(n):
            step()
        return
    _counted_loop(em, n // unroll, lambda: [step() for _ in range(unroll)])


def _written_out(em) -> bool:
    """Whether machine steps at this point are written out (straight_steps, and the code runs
    often: a float routine or its fast entry written out at a site, or a source instruction
    inside a loop)."""
    return em.straight and (em.index is None or em.index in em.looped or em.inlining)


def _dsteps(em, rx, bm, skip=False):
    """32 divide steps `dstep.b64 RX, RX, bm` (bm = (b << 32) - 1, RX = r << 32 | 32 dividend
    bits, r < b). With `skip` (RX and bm proven defined: it branches on them), the first 16, 24
    or all 32 steps are skipped where none of them could subtract: those steps only double RX,
    and step k subtracts only once RX << k > bm, so RX << s <= bm says the first s are shifts
    (RX << s is even, bm odd: never equal); RX << s is then RX for the remaining steps (no
    overflow: RX < 2^32 when r = 0). Three instructions where nothing is skipped, eight to
    eleven where steps are (a dividend much smaller than the divisor times 2^32: trial division
    by large divisors, a 64-bit dividend's high half below the divisor, ...)."""
    def step():
        em.emit(f"dstep.b64 {rx}, {rx}, {bm}")
    if not skip:
        machine_steps(em, 32, STEP_UNROLL, step)
        return
    full, s16, s24, at16, at24, done = (em.label() for _ in range(6))
    straight = _written_out(em)
    cnt = None if straight else em.tmp(32)
    t16 = _op(em, 64, "shl", rx, 16)
    em.emit(f"@!{_setp(em, 'le', 'u64', t16, bm)} bra {full}")
    t24 = _op(em, 64, "shl", t16, 8)
    em.emit(f"@!{_setp(em, 'le', 'u64', t24, bm)} bra {s16}")
    t32 = _op(em, 64, "shl", t24, 8)
    em.emit(f"@!{_setp(em, 'le', 'u64', t32, bm)} bra {s24}")
    em.emit(f"mov.b64 {rx}, {t32}")
    em.emit(f"bra {done}")
    for here, t, turns, entry in ((s24, t24, 1, at24), (s16, t16, 2, at16)):
        em.place(here)
        em.emit(f"mov.b64 {rx}, {t}")
        if cnt:
            em.emit(f"mov.b32 {cnt}, {turns}")
        em.emit(f"bra {entry if straight else at16}")
    em.place(full)
    if straight:
        for k in range(32):
            if k in (16, 24):
                em.place(at16 if k == 16 else at24)
            step()
    else:
        em.emit(f"mov.b32 {cnt}, 4")
        em.place(at16)                   # the loop: 8 steps a turn, cnt turns
        for _ in range(8):
            step()
        em.emit(f"sub.u32 {cnt}, {cnt}, 1")
        em.emit(f"@{_setp(em, 'ne', 'u32', cnt, 0)} bra {at16}")
    em.place(done)


def _naf(k: int, w: int) -> list[tuple[int, int]]:
    """k mod 2^w as signed powers of two, (bit, +1 or -1): its non-adjacent form (a run of ones
    is one power less another), digits at bit w and above dropped (they vanish mod 2^w); a
    positive digit first when there is one."""
    out, i = [], 0
    while k and i < w:
        if k & 1:
            d = 2 - (k & 3)
            out.append((i, d))
            k -= d
        k >>= 1
        i += 1
    return sorted(out, key=lambda t: t[1] < 0)


def _mul_const(em, w, x, k) -> str:
    """x * k as shifts, adds and subtracts of x (k a constant): in non-adjacent form where that
    has at least two terms fewer than k's set bits (2^w - 1 is one subtract, 1000 = 1024 - 32 + 8
    three terms), else k's bits (nvcc's alternating magic numbers like 0x66666667 save a term at
    most, and sums of positive terms change fewer of a register's data chunks); x * 0 is x ^ x:
    0, or undefined with x."""
    k &= (1 << w) - 1
    terms = _naf(k, w)
    if len(terms) > bin(k).count("1") - 2:
        terms = [(i, 1) for i in range(w) if (k >> i) & 1]
    if not terms:
        return _op(em, w, "xor", x, x)
    acc = None
    for i, d in terms:
        t = _op(em, w, "shl", x, i) if i else x
        if acc is None:
            acc = t if d > 0 else _op(em, w, "sub", 0, t, f"u{w}")
        else:
            acc = _op(em, w, "add" if d > 0 else "sub", acc, t, f"u{w}")
    return _copy(em, w, x) if acc is x else acc


def _mul_wide(em, w, a, b, signed) -> str:
    """The 2w-bit product of w-bit a and b: the unsigned product from a loop over b's w bits,
    then for signed operands ua ub - 2^w (A ub + B ua) (A, B: a, b negative)."""
    ka, kb = _known(em, a), _known(em, b)
    if ka.lstrip("-").isdigit() or kb.lstrip("-").isdigit():
        return _mul_lo(em, 2 * w, _ext(em, w, ka, signed, 2 * w), _ext(em, w, kb, signed, 2 * w))
    na, nb = _bits(em, a, w), _bits(em, b, w)
    if na < nb:                         # the operand with fewer bits is the multiplier
        a, b, na, nb = b, a, nb, na
    acc = _low(em, 2 * w, _mul_steps(em, _ext(em, w, a, False, 64), na, b, w, bits=nb))
    if signed:
        for u, v, nu in ((a, b, na), (b, a, nb)):
            if nu < w:
                continue                # below 2^(w-1): never negative
            neg = _setp(em, "lt", f"s{w}", u, 0)
            high = _op(em, 2 * w, "shl", _ext(em, w, v, False, 2 * w), w)
            em.emit(f"sub.u{2 * w} {acc}, {acc}, {_sel(em, 2 * w, high, 0, neg)}")
    return acc


def _mul_full(em, w, a, b, signed) -> tuple[str, str]:
    """(low, high) w-bit halves of the 2w-bit product of w-bit a and b."""
    if w <= 32:
        prod = _mul_wide(em, w, a, b, signed)
        lo, hi = em.tmp(w), em.tmp(w)
        em.emit(f"cvt.u{w}.u{2 * w} {lo}, {prod}")
        sh = _op(em, 2 * w, "shr", prod, w, f"u{2 * w}")
        em.emit(f"cvt.u{w}.u{2 * w} {hi}, {sh}")
        return lo, hi
    # 64 x 64 -> 128 from four 32 x 32 -> 64 products (unsigned), then the signed correction
    a, b = _copy(em, 64, a), _copy(em, 64, b)
    (al, ah), (bl, bh) = _halves(em, a), _halves(em, b)
    ll, lh, hl, hh = _mul32(em, al, bl), _mul32(em, al, bh), _mul32(em, ah, bl), _mul32(em, ah, bh)
    # low = ll + (lh << 32) + (hl << 32); carries into high
    lo = _copy(em, 64, ll)
    hi = _copy(em, 64, hh)
    for part in (lh, hl):
        sh = _op(em, 64, "shl", part, 32)
        nlo = _op(em, 64, "add", lo, sh, "u64")
        c = _setp(em, "lt", "u64", nlo, lo)
        cv = _sel(em, 64, 1, 0, c)
        em.emit(f"add.u64 {hi}, {hi}, {cv}")
        em.emit(f"mov.b64 {lo}, {nlo}")
        top = _op(em, 64, "shr", part, 32, "u64")
        em.emit(f"add.u64 {hi}, {hi}, {top}")
    if signed:      # hi_s = hi_u - (a < 0 ? b : 0) - (b < 0 ? a : 0)
        for x, y in ((a, b), (b, a)):
            neg = _setp(em, "lt", "s64", x, 0)
            sub = _sel(em, 64, y, 0, neg)
            em.emit(f"sub.u64 {hi}, {hi}, {sub}")
    return lo, hi


def _x_imul(em, ins):
    t, w, signed, (d, a, b) = _parts(ins)
    mode = ins.modifiers[0]
    if mode == "lo":
        _finish(em, ins, t, _mul_lo(em, w, a, b))
        return
    if mode == "wide":
        _finish(em, ins, f"{t[0]}{2 * w}", _mul_wide(em, w, a, b, signed))
        return
    _finish(em, ins, t, _mul_full(em, w, a, b, signed)[1])


def _x_imad(em, ins):
    t, w, signed, (d, a, b, c) = _parts(ins)
    mode = ins.modifiers[0]
    if mode == "lo":
        p = _mul_lo(em, w, a, b)
        _finish(em, ins, t, _op(em, w, "add", p, c, f"u{w}"))
    elif mode == "wide":
        p = _mul_wide(em, w, a, b, signed)
        _finish(em, ins, f"{t[0]}{2 * w}", _op(em, 2 * w, "add", p, c, f"u{2 * w}"))
    else:
        hi = _mul_full(em, w, a, b, signed)[1]
        _finish(em, ins, t, _op(em, w, "add", hi, c, f"u{w}"))


def _x_mul24(em, ins):
    t, w, signed, ops = _parts(ins)
    a24, b24 = (_bits24(em, x, signed) for x in ops[1:3])
    prod = _mul_lo(em, 64, a24, b24)          # the 48-bit product of the 24-bit values
    if ins.modifiers[0] == "lo":
        r = em.tmp(32)
        em.emit(f"cvt.u32.u64 {r}, {prod}")
    else:
        sh = _op(em, 64, "shr", prod, 16, "u64")
        r = em.tmp(32)
        em.emit(f"cvt.u32.u64 {r}, {sh}")
    if SUPPORTED[ins.name].kind == "imad24":
        r = _op(em, 32, "add", r, ops[3], "u32")
    _finish(em, ins, t, r)


def _bits24(em, x, signed) -> str:
    """The low 24 bits of x, sign- or zero-extended to 64 bits."""
    lo = _op(em, 32, "and", x, 0xFFFFFF)
    if signed:
        s = _op(em, 32, "shl", lo, 8)
        lo = _op(em, 32, "shr", s, 8, "s32")
    return _ext(em, 32, lo, signed, 64)


def _udivrem_by32(em, a, b, quotient=True, skip=False) -> tuple[str | None, str]:
    """(a / b, a % b) for a 64-bit a and b < 2^32: long division by divide steps in one 64-bit
    register RX = r << k | (k dividend bits), as _udivrem's w <= 32 case, in three parts: a's
    high 32 bits (r starts at 0), then 16 and 16. r < b < 2^32 carries over from part to part,
    so k = 16 keeps 2 RX below 2^64 (k = 32 would not). 64 steps and about 25 others, instead
    of about 500. `skip`: the first part skips the steps that cannot subtract (_dsteps)."""
    rx = _op(em, 64, "shr", a, 32, "u64")
    acc = prev = None
    bms = {}                             # (b << k) - 1 per part width
    for k, bits in ((32, None), (16, _op(em, 64, "and", _op(em, 64, "shr", a, 16, "u64"), 0xFFFF)),
                    (16, _op(em, 64, "and", a, 0xFFFF))):
        if bits is not None:             # the remainder so far, then the part's dividend bits
            rx = _op(em, 64, "or", _op(em, 64, "shl", _op(em, 64, "shr", rx, prev, "u64"), k), bits)
        if k not in bms:
            bms[k] = _op(em, 64, "sub", _op(em, 64, "shl", b, k), 1, "u64")
        bm = bms[k]
        if k == 32:
            _dsteps(em, rx, bm, skip)
        else:
            machine_steps(em, k, STEP_UNROLL, lambda rx=rx, bm=bm: em.emit(f"dstep.b64 {rx}, {rx}, {bm}"))
        if quotient:
            q = _op(em, 64, "and", rx, (1 << k) - 1)
            acc = q if acc is None else _op(em, 64, "or", _op(em, 64, "shl", acc, k), q)
        prev = k
    return acc, _op(em, 64, "shr", rx, 16, "u64")


def _udivrem_narrow(em, w, a, b, quotient=True, wide=True, skip=False) -> tuple[str | None, str]:
    """64-bit (a / b, a % b) for a divisor known to be below 2^32 (gpu_layers.machine.ranges):
    _udivrem_by32 without the branch on its size, or (`wide` False: the dividend is below 2^32
    too) the 32-bit division of the low words, widened."""
    if wide:
        return _udivrem_by32(em, a, b, quotient, skip)
    lo = [_low(em, 32, x) for x in (a, b)]
    q, r = _udivrem(em, 32, *lo, quotient=quotient, skip=skip)
    return (_ext(em, 32, q, False, 64) if quotient else None), _ext(em, 32, r, False, 64)


def _udivrem_branching(em, w, a, b, quotient=True, skip=False) -> tuple[str | None, str]:
    """64-bit (a / b, a % b) for a divisor proven defined (gpu_layers.machine.definedness): a
    divisor below 2^32 takes _udivrem_by32, a larger one the general loop; both branches go
    forward and meet after them (the cursor rule reconverges the lanes there)."""
    qo, ro = em.tmp(64), em.tmp(64)
    slow, done = em.label(), em.label()

    def keep(q, r):
        if quotient:
            em.emit(f"mov.b64 {qo}, {q}")
        em.emit(f"mov.b64 {ro}, {r}")
    em.emit(f"@{_setp(em, 'gt', 'u64', b, 0xFFFFFFFF)} bra {slow}")
    keep(*_udivrem_by32(em, a, b, quotient, skip))
    em.emit(f"bra {done}")
    em.place(slow)
    keep(*_udivrem(em, 64, a, b, quotient, wide_divisor=True))
    em.place(done)
    return (qo if quotient else None), ro


def _udivrem(em, w, a, b, quotient=True, wide_divisor=False, skip=False) -> tuple[str | None, str]:
    """(a / b, a % b) of unsigned w-bit values (b == 0 handled by callers): binary long division,
    a bit a step, in a loop on a fresh counter. Step k shifts the
    dividend's next bit into the remainder r; where r >= b it subtracts b and the quotient bit
    is 1. r never overflows: after k steps r = (a's top k bits) mod b < 2^k, so before the last
    shift r < 2^(w-1). w <= 32: r and the dividend share one 2w-bit register RX = r << w | x, so
    one shift moves the bit, and subtracting (b << w) - 1 also sets the quotient bit that
    entered x's bottom: after w steps RX = remainder << w | quotient (one machine step a bit,
    dstep, STEP_UNROLL an iteration). w = 64: r
    apart, the quotient shifting into the dividend's register (9 a bit; 7 for the remainder
    alone, `quotient=False`, which returns (None, remainder)). `wide_divisor` (w = 64, where
    b >= 2^32 is known: _udivrem_branching's other side): the first 32 steps would never
    subtract (r = a's top bits < 2^32 <= b), so r starts as a >> 32 and the loop takes the 32
    low bits only (the quotient is below 2^32). `skip` (a and b proven defined; w = 32): the
    leading steps that cannot subtract are skipped (_dsteps)."""
    if w <= 32:
        W = 2 * w
        rx = _ext(em, w, a, False, W)
        bb = _op(em, W, "shl", _ext(em, w, b, False, W), w)
        bm = _op(em, W, "sub", bb, 1, f"u{W}")
        # one machine divide step a bit: dstep RX, RX, bm is RX = 2 RX, less bm where RX >= bm
        # (2 RX is even and bm = (b << w) - 1 odd: RX >= bm exactly where RX >= b << w)
        if w == 32:
            _dsteps(em, rx, bm, skip)
        else:
            machine_steps(em, w, STEP_UNROLL, lambda: em.emit(f"dstep.b{W} {rx}, {rx}, {bm}"))
        q, r = em.tmp(w), em.tmp(w)
        em.emit(f"cvt.u{w}.u{W} {q}, {rx}")
        em.emit(f"cvt.u{w}.u{W} {r}, {_op(em, W, 'shr', rx, w, f'u{W}')}")
        return q, r
    r, x, b = em.tmp(w), _copy(em, w, a), _copy(em, w, b)
    hb, less, take = em.tmp(w), em.tmp(w), em.tmp(1)    # every step's
    bits = w
    if wide_divisor:
        bits = 32
        em.emit(f"shr.u64 {r}, {x}, 32")
        em.emit(f"shl.b64 {x}, {x}, 32")
    else:
        em.emit(f"mov.b{w} {r}, 0")

    def step():
        em.emit(f"shr.u{w} {hb}, {x}, {w - 1}")
        em.emit(f"shl.b{w} {r}, {r}, 1")
        em.emit(f"or.b{w} {r}, {r}, {hb}")
        em.emit(f"shl.b{w} {x}, {x}, 1")
        em.emit(f"setp.ge.u{w} {take}, {r}, {b}")
        em.emit(f"sub.u{w} {less}, {r}, {b}")
        em.emit(f"selp.b{w} {r}, {less}, {r}, {take}")
        if quotient:
            em.emit(f"or.b{w} {less}, {x}, 1")
            em.emit(f"selp.b{w} {x}, {less}, {x}, {take}")
    _counted_loop(em, bits // UNROLL, lambda: [step() for _ in range(UNROLL)])
    return (x if quotient else None), r


def _divergent(kernel, looped) -> set:
    """Indices of the source instructions where part of a warp may be elsewhere: inside a loop
    (`looped`: _in_loops) or between a forward branch and its target (an if's body; an else's,
    which the then-lanes skip)."""
    out = set(looped)
    for j, ins in enumerate(kernel.instructions):
        if ins.opcode == "bra" and ins.operands:
            t = kernel.labels.get(str(ins.operands[-1]))
            if t is not None and t > j:
                out.update(range(j + 1, t))
    return out


def _in_loops(kernel) -> set:
    """Indices of the source instructions between a backward branch's target and the branch."""
    out = set()
    for j, ins in enumerate(kernel.instructions):
        if ins.opcode == "bra" and ins.operands:
            t = kernel.labels.get(str(ins.operands[-1]))
            if t is not None and t <= j:
                out.update(range(t, j + 1))
    return out


def _counted_loop(em, n, body):
    """body() n times (n >= 1): a loop on a fresh counter, never on data."""
    cnt = em.tmp(32)
    em.emit(f"mov.b32 {cnt}, {n}")
    top = em.label()
    em.place(top)
    body()
    em.emit(f"sub.u32 {cnt}, {cnt}, 1")
    more = _setp(em, "ne", "u32", cnt, 0)
    em.emit(f"@{more} bra {top}")


def _x_divrem(em, ins):
    t, w, signed, (d, a, b) = _parts(ins)
    is_rem = SUPPORTED[ins.name].kind == "irem"
    if routines.calls_division(em, ins, w):
        _finish(em, ins, t, routines.call_division(em, ins, w, signed, is_rem, a, b))
        return

    # a 64-bit division may branch on the divisor's size where the divisor is defined (an
    # undefined dividend only makes both paths' results undefined, as the original's)
    def proven(x):                       # defined in every thread: a constant, or proven so
        return em.is_defined(x) or x.lstrip("-").isdigit()
    _finish(em, ins, t, _divrem(em, w, signed, is_rem, a, b, proven(a), proven(b)))


def _divrem(em, w, signed, is_rem, a, b, a_defined=False, b_defined=False) -> str:
    """_x_divrem's value of a / b or a % b (w bits) in a register; `a_defined`, `b_defined`:
    proven defined in every thread (the division may branch on them)."""
    divide = partial(_udivrem_branching if w == 64 and b_defined else _udivrem, skip=a_defined and b_defined)
    if w == 64 and not signed and _bits(em, b, 64) <= 32:      # a divisor known below 2^32
        divide = partial(_udivrem_narrow, wide=_bits(em, a, 64) > 32, skip=a_defined and b_defined)
    a, b = _copy(em, w, a), _copy(em, w, b)
    bad = _setp(em, "eq", f"b{w}", b, 0)
    if signed:
        an, bn = _setp(em, "lt", f"s{w}", a, 0), _setp(em, "lt", f"s{w}", b, 0)
        na, nb = _op(em, w, "sub", 0, a, f"u{w}"), _op(em, w, "sub", 0, b, f"u{w}")
        ua, ub = _sel(em, w, na, a, an), _sel(em, w, nb, b, bn)
        q, r = divide(em, w, ua, ub, quotient=not is_rem)
        if is_rem:
            r = _sel(em, w, _op(em, w, "sub", 0, r, f"u{w}"), r, an)   # the remainder has a's sign
        else:
            qneg = em.tmp(1)
            em.emit(f"xor.pred {qneg}, {an}, {bn}")
            q = _sel(em, w, _op(em, w, "sub", 0, q, f"u{w}"), q, qneg)
        ismin = _setp(em, "eq", f"b{w}", a, 1 << (w - 1))
        m1 = _setp(em, "eq", f"b{w}", b, (1 << w) - 1)
        ovf = em.tmp(1)
        em.emit(f"and.pred {ovf}, {ismin}, {m1}")
        em.emit(f"or.pred {bad}, {bad}, {ovf}")
    else:
        q, r = divide(em, w, a, b, quotient=not is_rem)
    return _sel(em, w, _undef_of(em, w), r if is_rem else q, bad)


# ----------------------------------------------------------------------------- bit operations


def _mask_of(em, w, n) -> str:
    """(1 << n) - 1 for 0 <= n (all ones for n >= w: PTX shifts by >= w give 0)."""
    one = _op(em, w, "shl", 1, n)
    return _op(em, w, "sub", one, 1, f"u{w}")


def _popc(em, w, x) -> str:
    c = [(0x5555555555555555, 1), (0x3333333333333333, 2), (0x0F0F0F0F0F0F0F0F, 4),
         (0x00FF00FF00FF00FF, 8), (0x0000FFFF0000FFFF, 16), (0x00000000FFFFFFFF, 32)]
    v = _copy(em, w, x)
    M = (1 << w) - 1
    for m, s in c:
        if s >= w:
            break
        lo = _op(em, w, "and", v, m & M)
        sh = _op(em, w, "shr", v, s, f"u{w}")
        hi = _op(em, w, "and", sh, m & M)
        v = _op(em, w, "add", lo, hi, f"u{w}")
    return v


def _x_popc(em, ins):
    t, w, _, (d, a) = _parts(ins)
    v = _popc(em, w, a)
    if w == 64:
        r = em.tmp(32)
        em.emit(f"cvt.u32.u64 {r}, {v}")
        v = r
    _finish(em, ins, "b32", v)


def _x_brev(em, ins):
    t, w, _, (d, a) = _parts(ins)
    v = _copy(em, w, a)
    M = (1 << w) - 1
    s = 1
    for m in (0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x00FF00FF00FF00FF,
              0x0000FFFF0000FFFF, 0x00000000FFFFFFFF):
        if s >= w:
            break
        sh = _op(em, w, "shr", v, s, f"u{w}")
        lo = _op(em, w, "and", sh, m & M)
        lv = _op(em, w, "and", v, m & M)
        hi = _op(em, w, "shl", lv, s)
        v = _op(em, w, "or", lo, hi)
        s *= 2
    _finish(em, ins, t, v)


def _x_bfind(em, ins):
    t, w, signed, (d, a) = _parts(ins)
    v = _copy(em, w, a)
    if signed:
        neg = _setp(em, "lt", f"s{w}", v, 0)
        v = _sel(em, w, _op(em, w, "xor", v, (1 << w) - 1), v, neg)
    n = em.tmp(32)
    em.emit(f"clz.b{w} {n}, {v}")                 # one ALU step
    zero = _setp(em, "eq", f"b{w}", v, 0)
    pos = n if "shiftamt" in ins.modifiers else _op(em, 32, "sub", w - 1, n, "u32")
    _finish(em, ins, "b32", _sel(em, 32, 0xFFFFFFFF, pos, zero))


def _x_bfe(em, ins):
    t, w, signed, (d, a, b, c) = _parts(ins)
    x = _copy(em, w, a)
    pos, ln = _op(em, 32, "and", b, 0xFF), _op(em, 32, "and", c, 0xFF)
    low = _op(em, w, "and", _op(em, w, "shr", x, pos, f"u{w}"), _mask_of(em, w, ln))
    if signed:
        # sign bit: bit min(pos + len - 1, msb) of a; it fills every bit past the field's width
        top = _op(em, 32, "min", _op(em, 32, "add", pos, _op(em, 32, "sub", ln, 1, "u32"), "u32"),
                  w - 1, "u32")
        sb = _op(em, w, "and", _op(em, w, "shr", x, top, f"u{w}"), 1)
        room = _op(em, 32, "sub", w, _op(em, 32, "min", pos, w, "u32"), "u32")
        e = _op(em, 32, "min", ln, room, "u32")
        fill = _op(em, w, "xor", _mask_of(em, w, e), (1 << w) - 1)
        one = _setp(em, "ne", f"b{w}", sb, 0)
        low = _sel(em, w, _op(em, w, "or", low, fill), low, one)
    z = _setp(em, "eq", "b32", ln, 0)
    _finish(em, ins, t, _sel(em, w, 0, low, z))


def _x_bfi(em, ins):
    t, w, _, (d, a, b, c, dd) = _parts(ins)
    pos, ln = _op(em, 32, "and", c, 0xFF), _op(em, 32, "and", dd, 0xFF)
    f = _op(em, w, "shl", _mask_of(em, w, ln), pos)
    keep = _op(em, w, "and", b, _op(em, w, "xor", f, (1 << w) - 1))
    ins_bits = _op(em, w, "and", _op(em, w, "shl", a, pos), f)
    _finish(em, ins, t, _op(em, w, "or", keep, ins_bits))


def _x_prmt(em, ins):
    t, w, _, (d, a, b, c) = _parts(ins)
    sel = _known(em, c)
    if sel.lstrip("-").isdigit():
        _finish(em, ins, t, _prmt_const(em, _known(em, a), _known(em, b), int(sel) & 0xFFFF))
        return
    wa, wb = _ext(em, 32, a, False, 64), _ext(em, 32, b, False, 64)
    src = _op(em, 64, "or", wa, _op(em, 64, "shl", wb, 32))
    cc = _copy(em, 32, c)
    r = em.tmp(32)
    em.emit(f"mov.b32 {r}, 0")
    for i in range(4):
        sel = _op(em, 32, "and", _op(em, 32, "shr", cc, 4 * i, "u32"), 0xF)
        sh = _op(em, 32, "shl", _op(em, 32, "and", sel, 7), 3)
        byte64 = _op(em, 64, "and", _op(em, 64, "shr", src, sh, "u64"), 0xFF)
        byte = em.tmp(32)
        em.emit(f"cvt.u32.u64 {byte}, {byte64}")
        neg = _setp(em, "ne", "b32", _op(em, 32, "and", byte, 0x80), 0)
        rep = _sel(em, 32, 0xFF, 0, neg)
        msb = _setp(em, "ne", "b32", _op(em, 32, "and", sel, 8), 0)
        byte = _sel(em, 32, rep, byte, msb)
        em.emit(f"or.b32 {r}, {r}, {_op(em, 32, 'shl', byte, 8 * i)}")
    _finish(em, ins, t, r)


def _prmt_const(em, a, b, sel) -> str:
    """prmt with a constant selector: each result byte is a byte of a or b moved by a whole number
    of bytes (or its sign spread), so the bytes taken from one source with one move are one shift
    and one mask: ~4 steps, not the general form's ~70. Both sources are read even where the
    selector takes no byte of one (prmt's poison is either source's), and the parts cover disjoint
    bytes, so no `or` of them sees an all-ones operand that would hide a poisoned part."""
    const = 0
    moves, signs = {}, {}                 # (source, byte shift) / (source, byte) -> result-byte mask
    for i in range(4):
        n = (sel >> (4 * i)) & 0xF
        src, j = (a, n & 3) if (n & 7) < 4 else (b, n & 3)
        key, table = ((src, j), signs) if n & 8 else ((src, i - j), moves)
        table[key] = table.get(key, 0) | 0xFF << (8 * i)
    parts = []
    for (src, k), mask in moves.items():
        if src.lstrip("-").isdigit():
            v = int(src) & 0xFFFFFFFF
            const |= ((v << 8 * k) if k >= 0 else (v >> -8 * k)) & mask
            continue
        x = src if k == 0 else _op(em, 32, "shl" if k > 0 else "shr", src, 8 * abs(k),
                                   None if k > 0 else "u32")
        natural = (0xFFFFFFFF << 8 * k) & 0xFFFFFFFF if k >= 0 else 0xFFFFFFFF >> -8 * k
        parts.append(x if mask == natural else _op(em, 32, "and", x, mask))
    for (src, j), mask in signs.items():
        if src.lstrip("-").isdigit():
            const |= mask if (int(src) >> (8 * j + 7)) & 1 else 0
            continue
        x = _op(em, 32, "shl", src, 24 - 8 * j) if j < 3 else src
        parts.append(_op(em, 32, "and", _op(em, 32, "shr", x, 31, "s32"), mask))
    if const or not parts:
        parts.append(str(const))
    r = parts[0]
    if r.lstrip("-").isdigit():
        r = em.tmp(32)
        em.emit(f"mov.b32 {r}, {parts[0]}")
    for x in parts[1:]:
        r = _op(em, 32, "or", r, x)
    used = {src for src, _ in list(moves) + list(signs)}
    for src in (a, b):                    # a source the selector takes nothing of: its poison
        if src not in used and not src.lstrip("-").isdigit():
            r = _op(em, 32, "add", r, _op(em, 32, "xor", src, src), "u32")
    return r


def _x_lop3(em, ins):
    t, w, _, (d, a, b, c, lut) = _parts(ins)
    lut = int(lut) & 0xFF
    xs = [_copy(em, 32, v) for v in (a, b, c)]
    nx = [_op(em, 32, "xor", v, 0xFFFFFFFF) for v in xs]
    r = em.tmp(32)
    em.emit(f"mov.b32 {r}, 0")
    for k in range(8):
        if (lut >> k) & 1:
            term = _op(em, 32, "and", xs[0] if k & 4 else nx[0], xs[1] if k & 2 else nx[1])
            term = _op(em, 32, "and", term, xs[2] if k & 1 else nx[2])
            em.emit(f"or.b32 {r}, {r}, {term}")
    _finish(em, ins, t, r)


def _x_shf(em, ins):
    t, w, _, (d, a, b, c) = _parts(ins)
    direction, mode = ins.modifiers[0], ins.modifiers[1]
    n = _op(em, 32, "and", c, 31) if mode == "wrap" else _op(em, 32, "min", c, 32, "u32")
    m = _op(em, 32, "sub", 32, n, "u32")
    if direction == "l":        # high word of (b:a) << n
        r = _op(em, 32, "or", _op(em, 32, "shl", b, n), _op(em, 32, "shr", a, m, "u32"))
    else:                       # low word of (b:a) >> n
        r = _op(em, 32, "or", _op(em, 32, "shr", a, n, "u32"), _op(em, 32, "shl", b, m))
    _finish(em, ins, t, r)


# -------------------------------------------------------------------------- small arithmetic


def _x_selp_consts(em, ins):
    """selp of two different constants: the first moved into a temporary (one immediate each)."""
    t, w, _, (d, a, b, p) = _parts(ins)
    x = em.tmp(w)
    em.emit(f"mov.{t} {x}, {a}")
    em.emit(f"{_guard(ins)}selp.{t} {d}, {x}, {b}, {p}")


def _x_neg(em, ins):
    t, w, _, (d, a) = _parts(ins)
    _finish(em, ins, t, _op(em, w, "sub", 0, a, f"u{w}"))


def _x_abs(em, ins):
    t, w, _, (d, a) = _parts(ins)
    x = _copy(em, w, a)
    neg = _setp(em, "lt", f"s{w}", x, 0)
    _finish(em, ins, t, _sel(em, w, _op(em, w, "sub", 0, x, f"u{w}"), x, neg))


def _x_isat(em, ins):
    t, w, _, (d, a, b) = _parts(ins)
    wa, wb = _ext(em, 32, a, True, 64), _ext(em, 32, b, True, 64)
    s = _op(em, 64, "add" if ins.opcode == "add" else "sub", wa, wb, "s64")
    s = _op(em, 64, "min", _op(em, 64, "max", s, -(1 << 31), "s64"), (1 << 31) - 1, "s64")
    r = em.tmp(32)
    em.emit(f"cvt.u32.u64 {r}, {s}")
    _finish(em, ins, t, r)


def _x_sad(em, ins):
    t, w, signed, (d, a, b, c) = _parts(ins)
    x, y = _copy(em, w, a), _copy(em, w, b)
    lt = _setp(em, "lt", t, x, y)
    diff = _sel(em, w, _op(em, w, "sub", y, x, f"u{w}"), _op(em, w, "sub", x, y, f"u{w}"), lt)
    _finish(em, ins, t, _op(em, w, "add", diff, c, f"u{w}"))


def _x_cnot(em, ins):
    t, w, _, (d, a) = _parts(ins)
    z = _setp(em, "eq", f"b{w}", a, 0)
    _finish(em, ins, t, _sel(em, w, 1, 0, z))


def _x_slct(em, ins):
    t, w, _, (d, a, b, c) = _parts(ins)
    ct = ins.types[1]
    if ct == "s32":
        pick = _setp(em, "ge", "s32", c, 0)
    else:       # f32: c >= 0.0 (-0.0 picks a, NaN picks b)
        mag = _op(em, 32, "and", c, 0x7FFFFFFF)
        nan = _setp(em, "gt", "u32", mag, 0x7F800000)
        pos = _setp(em, "eq", "b32", _op(em, 32, "and", c, 0x80000000), 0)
        zero = _setp(em, "eq", "b32", mag, 0)
        pick = em.tmp(1)
        em.emit(f"or.pred {pick}, {pos}, {zero}")
        ok = em.tmp(1)
        em.emit(f"not.pred {ok}, {nan}")
        em.emit(f"and.pred {pick}, {pick}, {ok}")
    _finish(em, ins, t, _sel(em, w, a, b, pick))


# ------------------------------------------------------------- float bit operations (no math)


def _fbits(em, ins, w):
    """abs/neg on the sign bit; f64 passes a NaN through quieted (interp/fp64.py)."""
    t, _, _, (d, a) = _parts(ins)
    sign = 1 << (w - 1)
    op = ("and", sign - 1) if ins.opcode == "abs" else ("xor", sign)
    r = _op(em, w, op[0], a, op[1])
    if w == 64:
        nan = _setp(em, "gt", "u64", _op(em, 64, "and", a, sign - 1), 0x7FF0000000000000)
        r = _sel(em, 64, _op(em, 64, "or", a, 1 << 51), r, nan)
    _finish(em, ins, f"b{w}", r)


def _copysign(em, ins, w):
    t, _, _, (d, a, b) = _parts(ins)
    sign = 1 << (w - 1)
    mag = _op(em, w, "and", b, sign - 1)
    _finish(em, ins, f"b{w}", _op(em, w, "or", mag, _op(em, w, "and", a, sign)))


def _testp(em, ins, w):
    """testp on raw bits (PTX ISA: +-0 count as normal numbers)."""
    t, _, _, (d, a) = _parts(ins)
    mant = 23 if w == 32 else 52
    inf = ((1 << (w - 1 - mant)) - 1) << mant
    mag = _op(em, w, "and", a, (1 << (w - 1)) - 1)
    mode = ins.modifiers[0]
    ty = f"u{w}"
    if mode == "finite":
        p = _setp(em, "lt", ty, mag, inf)
    elif mode == "infinite":
        p = _setp(em, "eq", ty, mag, inf)
    elif mode == "number":
        p = _setp(em, "le", ty, mag, inf)
    elif mode == "notanumber":
        p = _setp(em, "gt", ty, mag, inf)
    else:
        e = _op(em, w, "and", mag, inf)
        sub = _setp(em, "eq", f"b{w}", e, 0)          # exponent field 0: zero or subnormal
        nz = _setp(em, "ne", f"b{w}", mag, 0)
        if mode == "subnormal":
            p = em.tmp(1)
            em.emit(f"and.pred {p}, {sub}, {nz}")
        else:       # normal: exponent neither 0 nor all ones, or a zero
            fin = _setp(em, "lt", ty, mag, inf)
            p = em.tmp(1)
            em.emit(f"not.pred {p}, {sub}")
            em.emit(f"and.pred {p}, {p}, {fin}")
            z = em.tmp(1)
            em.emit(f"not.pred {z}, {nz}")
            em.emit(f"or.pred {p}, {p}, {z}")
    _finish(em, ins, "pred", p)


_EXPANSIONS = {
    "imul": _x_imul, "imad": _x_imad, "imul24": _x_mul24, "imad24": _x_mul24,
    "idiv": _x_divrem, "irem": _x_divrem,
    "popc": _x_popc, "brev": _x_brev, "bfind": _x_bfind, "bfe": _x_bfe,
    "bfi": _x_bfi, "prmt": _x_prmt, "lop3": _x_lop3, "shf": _x_shf,
    "ineg": _x_neg, "iabs": _x_abs, "isat": _x_isat, "sad": _x_sad, "cnot": _x_cnot,
    "slct": _x_slct, "selp": _x_selp_consts,
    "fbits": lambda em, ins: _fbits(em, ins, 32), "dbits": lambda em, ins: _fbits(em, ins, 64),
    "copysign": lambda em, ins: _copysign(em, ins, 32),
    "dcopysign": lambda em, ins: _copysign(em, ins, 64),
    "testp": lambda em, ins: _testp(em, ins, 32), "dtestp": lambda em, ins: _testp(em, ins, 64),
}
_EXPANSIONS.update(softfloat.FLOAT_EXPANSIONS)


