"""The datapath program: for every machine PC of a lowered, register-allocated kernel, what the ALU
of each lane computes (the decoded form the compiled machine's operand fetch and ALU will read).

    ops = datapath_program(kernel, register_slots(kernel), grid, block, args)
    ops[pc]                                   # a DatapathOp

`kernel` is machine code (gpu_layers.machine.lower, then gpu_layers.machine.allocate); `slots` maps
each machine register to its register-file slot (0..31; `register_slots` gives the register file
v1's order, gpu_layers/machine/regfile.py `program_of`); PCs are the indices of
`gpu_layers.interp.machine.program_for(kernel).code` (= `kernel.instructions`).

The ALU is `gpu_layers.craft.blocks.alu` (`alu_ref(op, width, a, b, p) -> (r, q)` is its
definition): operands arrive as the source registers' bits zero-extended to 64 bits, a, b < 2**width
except for mov_a / zext* / sext* (a conversion's source may be wider), the shift amount b is a u32.
The destination receives r (truncated to width, zero-extended), or q for the predicate ops (setp_*,
pand por pxor pnot). Operand codes: 0..31 a register slot, SRC_IMM the instruction's one immediate
(`imm`, a 64-bit pattern: the literal masked to its operand's PTX type width, two's complement),
SRC_TID the thread's linear index in its block, SRC_CTAID the block's linear index in the grid,
SRC_NONE absent.

Mapping (PTX machine form -> op, width):
  add/sub.{s,u}W            add/sub, W           min/max.{s,u}W     min_s/min_u/max_s/max_u, W
  and/or/xor.bW             and/or/xor, W        and/or/xor.pred    pand/por/pxor
  not.bW / not.pred         not_a, W / pnot      shl.bW             shl, W
  shr.{b,u}W / shr.sW       shr_u / shr_s, W     setp.CMP.T         setp_CMP[_u|_s], width of T
  selp.T a, b, p            selp, width of T, p = slot of the predicate
  mov.T d, x                mov_a, W (x a register, an immediate, a special register or the
                            address of a .shared/.local variable); mov.pred: por with a = b = x
  cvt.D.S (integers)        the register's final value as one of mov_a / zext / zext8/16/32 /
                            sext8/16/32 at the destination register's width, else at a narrower
                            one (cvt.u16.s8 into a 32-bit register: sext8 at 16); exactly what
                            the interpreter writes (S truncates and extends, D masks and extends)
  cvta.to.global / .global  mov_a, 64 (the identity: interp/decode.py `_cvta_fn`)
  cvta.to.shared/.local     sub of the window (interp/memory.py), cvta.shared/.local: add
  ld.param (scalar)         mov_a, a = SRC_IMM, imm = the parameter's value in `args`, from the
                            interpreter's own argument binding (buffer arguments: GLOBAL_BASE + k *
                            GLOBAL_STRIDE for the k-th buffer, interp/memory.py), at the
                            destination register's width
  %tid.x / %ctaid.x         SRC_TID / SRC_CTAID when the block / grid is one-dimensional (then
                            they equal the linear indices); %laneid: SRC_TID in blocks of <= 32
                            threads; launch constants (%ntid.*, %nctaid.*, a %tid / %ctaid
                            component whose dimension is 1, %warpid in one-warp blocks,
                            %nwarpid, %smid, %gridid, %nsmid) become SRC_IMM; anything else
                            (a 2-D block's %tid.y or %tid.x, ...) raises DatapathError
  two constant operands     (a special register that became an immediate next to a literal)
                            folded by alu_ref itself: mov_a of the result (por for a predicate)
Width of the predicate ops: 16 (the ALU ignores it for them).

Not computed by the ALU (op None): kind "load" (ld other than a scalar ld.param), "store" (st),
"atomic" (atom, red), "control" (bra, ret/exit, bar, membar/fence), "warp" (shfl, vote, match,
activemask, bar.warp.sync), and "alu_unsupported": a register-writing form outside the mapping
(setp with .and/.or/.xor or two destinations, cvt.sat, mov of a vector, a source register wider
than its operand outside mov/cvt, a destination the interpreter would sign-extend or truncate, a
width outside 16/32/64); `datapath_problems` names each with the reason. For every op None:
width 64, a = b = SRC_NONE, imm 0, p None. guard / gneg are filled for every instruction.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from gpu_layers.craft.blocks.alu import ALU_OPS, ALU_WIDTHS, MOVES, PRED_OPS, SHIFT, alu_ref
from gpu_layers.errors import QwenGPUError
from gpu_layers.interp.memory import LOCAL_WINDOW, SHARED_WINDOW
from gpu_layers.ptx.ir import TYPE_BITS, Addr, FImm, Imm, Pair, Reg, Sym, Vec
from gpu_layers.ptx.validator import MACHINE_STEPS, SPECIAL_REGS, SUPPORTED

SRC_NONE, SRC_IMM, SRC_TID, SRC_CTAID = 32, 33, 34, 35   # operand codes; 0..31 = register slot
REGS = 32
PRED_WIDTH = 16
KINDS = ("alu", "alu_unsupported", "load", "store", "atomic", "control", "warp")
M64 = (1 << 64) - 1

_CMP = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
        "lo": "lt_u", "ls": "le_u", "hi": "gt_u", "hs": "ge_u"}
_KIND = {"ld": "load", "st": "store", "atom": "atomic", "red": "atomic",
         "bra": "control", "exit": "control", "bar": "control", "nop": "control",
         "shfl": "warp", "vote": "warp", "match": "warp", "activemask": "warp", "warpsync": "warp"}
_BINARY = {"iadd": "add", "isub": "sub"}


class DatapathError(QwenGPUError, ValueError):
    """A kernel or launch the datapath program cannot describe (named by instruction)."""


@dataclass(frozen=True)
class DatapathOp:
    op: str | None      # a name of gpu_layers.craft.blocks.alu.ALU_OPS, or None: not computed by the ALU
    kind: str           # "alu", "alu_unsupported", "load", "store", "atomic", "control", "warp"
    width: int          # ALU width 16, 32 or 64 (the ALU's `width` operand; 64 for non-ALU)
    a: int              # operand codes (0..31 register slot, SRC_*); SRC_NONE when absent
    b: int
    imm: int            # the 64-bit pattern of the one immediate, for the operand coded SRC_IMM
    p: int | None       # slot of selp's predicate operand (the ALU's `p` input), else None
    guard: int | None   # slot of the guard predicate, else None
    gneg: bool          # guard negated (@!p)


def register_slots(kernel) -> dict[str, int]:
    """{machine register: slot} as the register file assigns them (the interpreter's register
    table's order; past 32 machine registers, registers of different widths that are never live
    together share a slot: gpu_layers/machine/regfile.py `program_of`), without its limits on
    destinations."""
    from gpu_layers.machine.regalloc import register_slots as slots_of

    return slots_of(kernel, REGS)


def datapath_program(kernel, slots: dict[str, int], grid, block, args, buffer_offsets=None) -> list[DatapathOp]:
    """One DatapathOp per machine PC of `kernel` for a launch (grid, block, args and
    buffer_offsets as gpu_layers.interp.launch takes them). Raises DatapathError naming the instruction for a
    register without a slot < 32 and for thread or block indices the datapath does not have."""
    return [op for op, _ in _Decoder(kernel, slots, grid, block, args, buffer_offsets).run()]


def datapath_problems(kernel, slots, grid, block, args) -> list[str]:
    """The register-writing instructions the ALU does not compute (kind "alu_unsupported"), by
    line, with the reason."""
    out = []
    dec = _Decoder(kernel, slots, grid, block, args)
    for (op, why), ins in zip(dec.run(), kernel.instructions):
        if why:
            out.append(f"line {ins.line}: `{ins}`: {why}")
    return out


class _Unsupported(Exception):
    pass


def _mask(bits):
    return (1 << bits) - 1


class _Decoder:
    def __init__(self, kernel, slots, grid, block, args, buffer_offsets=None):
        from gpu_layers.interp.machine import _bind_arguments, _dims, program_for

        self.kernel = kernel
        self.prog = program_for(kernel)
        self.slots = slots
        self.grid = _dims(grid, "grid")
        self.block = _dims(block, "block")
        self.nthreads = self.block[0] * self.block[1] * self.block[2]
        # the interpreter's own binding: the same parameter bytes and buffer addresses as launch
        _, self.params, _ = _bind_arguments(kernel, self.prog, list(args), buffer_offsets)
        self.regbits = self.prog.regbits
        self.ins = None

    def run(self):
        return [self.decode(ins) for ins in self.kernel.instructions]

    def fail(self, why):
        ins = self.ins
        raise DatapathError(f"line {ins.line}: `{ins}`: {why}")

    def slot(self, name):
        s = self.slots.get(name)
        if s is None:
            self.fail(f"register {name} has no register-file slot")
        if not 0 <= s < REGS:
            self.fail(f"register {name} is in slot {s}: the datapath addresses slots 0..{REGS - 1}")
        return s

    # ---- one instruction ---------------------------------------------------------------------
    def decode(self, ins):
        self.ins = ins
        g = ins.guard
        guard = self.slot(g.reg) if g is not None else None
        gneg = bool(g.negated) if g is not None else False
        kind = SUPPORTED[ins.name].kind
        try:
            alu = self.alu(ins, kind)
        except _Unsupported as e:
            return DatapathOp(None, "alu_unsupported", 64, SRC_NONE, SRC_NONE, 0, None, guard, gneg), str(e)
        if alu is None:
            k = _KIND.get(kind)
            if k is None:
                raise DatapathError(f"line {ins.line}: `{ins}`: `{ins.name}` is not machine code "
                                    "(lower the kernel first: gpu_layers.machine.lower)")
            return DatapathOp(None, k, 64, SRC_NONE, SRC_NONE, 0, None, guard, gneg), ""
        op, width, a, b, p = alu
        imm = 0
        codes = []
        for x in (a, b):
            if isinstance(x, tuple):                 # ("imm", value)
                imm = x[1]
                codes.append(SRC_IMM)
            else:
                codes.append(x)
        assert not (isinstance(a, tuple) and isinstance(b, tuple)) or a == b, (a, b)
        assert op in ALU_OPS and width in ALU_WIDTHS, (op, width)
        return DatapathOp(op, "alu", width, codes[0], codes[1], imm & M64, p, guard, gneg), ""

    def alu(self, ins, kind):
        """(op, width, a, b, p) or None (not an ALU instruction); raises _Unsupported."""
        ops = ins.operands
        t = ins.types[0] if ins.types else None
        w = TYPE_BITS[t] if t else 0
        signed = bool(t) and t[0] == "s"
        if kind in ("iadd", "isub", "imin", "imax", "logic", "shl", "shr"):
            if t == "pred":
                return self.pred2("p" + ins.opcode, ops)
            if kind in _BINARY:
                op = _BINARY[kind]
            elif kind in ("imin", "imax"):
                op = f"{kind[1:]}_{'s' if signed else 'u'}"
            elif kind == "logic":
                op = ins.opcode
            elif kind == "shl":
                op = "shl"
            else:
                op = "shr_s" if signed else "shr_u"
            self.dest(ops[0], w, signed)
            a = self.src(ops[1], w, op)
            b = self.src(ops[2], 32 if op in SHIFT else w, op, shift=op in SHIFT)
            return self.fold(op, self.width(w), a, b, None)
        if kind == "not":
            if t == "pred":
                self.dest(ops[0], 1, False)
                return self.fold("pnot", PRED_WIDTH, self.src(ops[1], 1, "pnot"), SRC_NONE, None)
            self.dest(ops[0], w, False)
            return self.fold("not_a", self.width(w), self.src(ops[1], w, "not_a"), SRC_NONE, None)
        if kind == "setp":
            if len(ins.modifiers) > 1 or isinstance(ops[0], Pair):
                raise _Unsupported("a setp that combines with a predicate or writes two is not one ALU step")
            cmp = _CMP.get(ins.modifiers[0])
            if cmp is None or t in ("f16", "f32", "f64", "bf16"):
                raise _Unsupported(f"comparison {ins.modifiers[0]}.{t} is not an integer compare")
            if cmp in ("lt", "le", "gt", "ge"):
                cmp += "_s" if signed else "_u"
            op = "setp_" + cmp
            self.dest(ops[0], 1, False)
            return self.fold(op, self.width(w), self.src(ops[1], w, op), self.src(ops[2], w, op), None)
        if kind == "selp":
            self.dest(ops[0], w, signed)
            a, b = self.src(ops[1], w, "selp"), self.src(ops[2], w, "selp")
            pc = self.src(ops[3], 1, "selp")
            if isinstance(pc, tuple):                # a constant predicate picks one operand
                return self.fold("mov_a", self.width(w), a if pc[1] else b, SRC_NONE, None)
            return self.fold("selp", self.width(w), a, b, pc)
        if kind == "mov":
            d, s = ops
            if isinstance(d, Vec) or isinstance(s, Vec):
                raise _Unsupported("a vector mov packs or unpacks several registers")
            if t == "pred":
                self.dest(d, 1, False)
                x = self.src(s, 1, "por")
                return self.fold("por", PRED_WIDTH, x, x, None)
            self.dest(d, w, signed)
            return self.fold("mov_a", self.width(w), self.src(s, w, "mov_a"), SRC_NONE, None)
        if kind in MACHINE_STEPS:                    # the machine's multiply and divide steps
            self.dest(ops[0], w, False)
            return self.fold(kind, self.width(w), self.src(ops[1], w, kind), self.src(ops[2], w, kind), None)
        if kind == "clz":                            # a count < 2^7: whole in the .b32 destination
            self.dest(ops[0], 32, False)
            return self.fold("clz", self.width(w), self.src(ops[1], w, "clz"), SRC_NONE, None)
        if kind == "cvt":
            return self.cvt(ins)
        if kind == "cvta":
            space = ins.modifiers[-1]
            self.dest(ops[0], w, False)
            if space == "global":
                return self.fold("mov_a", self.width(w), self.src(ops[1], w, "mov_a"), SRC_NONE, None)
            win = SHARED_WINDOW if space == "shared" else LOCAL_WINDOW
            op = "sub" if ins.modifiers[0] == "to" else "add"
            return self.fold(op, self.width(w), self.src(ops[1], w, op), ("imm", win & _mask(w)), None)
        if kind == "ld" and "param" in ins.modifiers:
            return self.ld_param(ins, t, w, signed)
        return None

    def pred2(self, op, ops):
        self.dest(ops[0], 1, False)
        return self.fold(op, PRED_WIDTH, self.src(ops[1], 1, op), self.src(ops[2], 1, op), None)

    # ---- operands ----------------------------------------------------------------------------
    def width(self, w):
        if w not in ALU_WIDTHS:
            raise _Unsupported(f"a {w}-bit operation: the ALU computes {ALU_WIDTHS} bits")
        return w

    def dest(self, d, w, signed):
        """The destination must receive the w-bit result zero-extended (what the ALU writes)."""
        if not isinstance(d, Reg) or d.name not in self.regbits:
            raise _Unsupported(f"destination {d} is not a register")
        self.slot(d.name)
        rb = self.regbits[d.name]
        if rb < w:
            raise _Unsupported(f"the interpreter truncates the {w}-bit result into {rb}-bit {d.name}")
        if rb > w and signed and w > 1:
            raise _Unsupported(f"the interpreter sign-extends the {w}-bit result into {rb}-bit {d.name}")

    def src(self, x, bits, op, shift=False):
        """An operand read as `bits` bits: a slot, SRC_TID / SRC_CTAID, or ("imm", value)."""
        if isinstance(x, Reg):
            if x.name in SPECIAL_REGS:
                return self.special(x.name, bits)
            s = self.slot(x.name)
            rb = self.regbits[x.name]
            if rb > bits and bits > 1 and not shift and op not in MOVES:
                raise _Unsupported(f"the interpreter truncates {rb}-bit {x.name} to {bits} bits, "
                                   f"the ALU's {op} needs operands < 2**width")
            return s
        if isinstance(x, Imm):
            return ("imm", (1 if x.value else 0) if bits == 1 else x.value & _mask(bits))
        if isinstance(x, FImm):
            return ("imm", x.bits & _mask(bits))
        if isinstance(x, Sym):
            return ("imm", self.sym(x.name) & _mask(bits))
        if isinstance(x, Addr) and isinstance(x.base, Sym):
            return ("imm", (self.sym(x.base.name) + x.offset) & _mask(bits))
        raise _Unsupported(f"operand {x} is not a register or an immediate")

    def sym(self, name):
        L = self.prog.layout
        if name in L.shared:
            return L.shared[name]
        if name in L.local:
            return L.local[name]
        raise _Unsupported(f"the address of `{name}` is not a datapath constant")

    def special(self, name, bits):
        X, Y, Z = self.block
        comp = {"x": 0, "y": 1, "z": 2}
        c = comp.get(name[-1])
        val = None
        if name.startswith("%tid."):
            if self.block[c] == 1:
                val = 0
            elif c == 0 and Y * Z == 1:
                return SRC_TID
            else:
                self.fail(f"{name} in a block of {self.block}: the datapath has the thread's linear "
                          "index only (SRC_TID = %tid.x in one-dimensional blocks)")
        elif name.startswith("%ctaid."):
            if self.grid[c] == 1:
                val = 0
            elif c == 0 and self.grid[1] * self.grid[2] == 1:
                return SRC_CTAID
            else:
                self.fail(f"{name} in a grid of {self.grid}: the datapath has the block's linear "
                          "index only (SRC_CTAID = %ctaid.x in one-dimensional grids)")
        elif name.startswith("%ntid."):
            val = self.block[c]
        elif name.startswith("%nctaid."):
            val = self.grid[c]
        elif name == "%laneid":
            if self.nthreads == 1:
                val = 0
            elif self.nthreads <= 32 and Y * Z == 1:
                return SRC_TID
            else:
                self.fail(f"%laneid in a block of {self.block}: SRC_TID is the lane only in "
                          "one-dimensional blocks of <= 32 threads")
        elif name == "%warpid":
            if self.nthreads > 32:
                self.fail(f"%warpid in a block of {self.nthreads} threads is not a launch constant")
            val = 0
        elif name == "%nwarpid":
            val = (self.nthreads + 31) // 32
        elif name in ("%smid", "%gridid"):
            val = 0
        elif name == "%nsmid":
            val = 1
        else:
            self.fail(f"special register {name} is not a datapath operand")
        return ("imm", val & _mask(bits) if bits > 1 else int(bool(val)))

    def fold(self, op, width, a, b, p):
        """Two different constant operands (a special register that became an immediate next to
        a literal) do not fit the one immediate field: the ALU's own result becomes the
        immediate of a move (por a = b for a predicate)."""
        if not (isinstance(a, tuple) and isinstance(b, tuple) and a != b):
            return op, width, a, b, p
        if op == "selp":
            raise _Unsupported("a selp of two different constants (after the launch constants)")
        r, q = alu_ref(op, width, a[1], b[1], 0)
        if op in PRED_OPS:
            return "por", PRED_WIDTH, ("imm", q), ("imm", q), None
        return "mov_a", width, ("imm", r), SRC_NONE, None

    # ---- conversions and parameters ----------------------------------------------------------
    def cvt(self, ins):
        dt, st = ins.types
        if "sat" in ins.modifiers or any(x[0] == "f" or x == "bf16" for x in (dt, st)):
            raise _Unsupported(f"cvt.{'.'.join(ins.modifiers + ins.types)} is not an integer move")
        d, s = ins.operands
        if not isinstance(d, Reg) or d.name not in self.regbits:
            raise _Unsupported(f"destination {d} is not a register")
        self.slot(d.name)
        rb = self.regbits[d.name]
        width = self.width(rb)
        sw, dw = TYPE_BITS[st], TYPE_BITS[dt]

        def interp(x):
            """What the interpreter writes (interp/decode.py: the source truncated to S, a
            signed S sign-extended, masked to D; a wider register sign-extends a signed D)."""
            x &= _mask(sw)
            if st[0] == "s" and x >> (sw - 1):
                x -= 1 << sw
            x &= _mask(dw)
            if rb > dw and dt[0] == "s" and x >> (dw - 1):
                x -= 1 << dw
            return x & _mask(rb)

        a = self.src(s, sw, "mov_a")
        if isinstance(a, tuple):
            return "mov_a", width, ("imm", interp(a[1])), SRC_NONE, None
        rs = self.regbits.get(s.name, 32)            # a special register is 32 bits
        # Truncation, masking and sign extension move bits: each output bit is 0 or some input
        # bit, so every candidate and `interp` are GF(2)-linear maps of a; two agree on every
        # a < 2**rs iff they agree on the basis 1 << j, j < rs.
        # The ALU's r is zero-extended above its width, so a narrower width also fits a
        # register whose high bits the conversion clears (cvt.u16.s8 into a 32-bit register:
        # sext8 at width 16).
        first = "zext" if rb > rs else "mov_a"
        for w in (width,) + tuple(x for x in ALU_WIDTHS if x < width):
            for op in (first, "zext8", "zext16", "zext32", "sext8", "sext16", "sext32"):
                if all(alu_ref(op, w, 1 << j, 0, 0)[0] == interp(1 << j) for j in range(rs)):
                    return op, w, a, SRC_NONE, None
        raise _Unsupported(f"cvt.{dt}.{st} from {rs}-bit {s} into {rb}-bit {d.name} is not one ALU move")

    def ld_param(self, ins, t, w, signed):
        d, aop = ins.operands
        if isinstance(d, Vec):
            return None                               # a vector load of parameters: kind "load"
        if not isinstance(aop, Addr) or not isinstance(aop.base, Sym):
            self.fail("ld.param needs a parameter name as its address")
        off = self.prog.layout.params[aop.base.name][0] + aop.offset
        v = self.params.load(off, w // 8, check_init=False)
        if not isinstance(d, Reg) or d.name not in self.regbits:
            raise _Unsupported(f"destination {d} is not a register")
        self.slot(d.name)
        rb = self.regbits[d.name]
        if rb > w and signed and v >> (w - 1):
            v |= _mask(rb) & ~_mask(w)               # the interpreter sign-extends
        v &= _mask(rb)
        return "mov_a", self.width(rb), ("imm", v), SRC_NONE, None


# ------------------------------------------------------------------------ checking (the proof)


@dataclass
class CheckStats:
    """What `check_program` checked of one launch."""
    alu_steps: int = 0            # warp-steps of ALU instructions (op not None)
    lanes: int = 0                # lanes of those steps checked: alu_ref == the interpreter's write
    poison: int = 0               # lanes skipped: an operand the ALU reads was poison
    guard_steps: int = 0          # steps whose executed lanes were checked against the guard
    unsupported_steps: int = 0    # steps of "alu_unsupported" instructions (not checked)
    mismatches: list = field(default_factory=list)    # descriptions of the first failures
    by_op: Counter = field(default_factory=Counter)   # "op.width" -> lanes checked

    @property
    def ok(self) -> bool:
        return not self.mismatches


def check_program(kernel, grid, block, args, dynamic_shared_bytes=0, *, lanes=4, step_budget=None,
                  limit=20, ops=None) -> CheckStats:
    """Run machine code `kernel` on the reference interpreter and check its datapath program at
    every step: for every lane that executed an ALU instruction, alu_ref(op, width, A, B, P) equals
    what the interpreter wrote (q for the predicate ops, else r), A / B / P read from the op's
    operand codes in the registers as they were before the step (the immediate, the linear thread
    or block index); the operands meet the ALU's precondition (< 2**width, the shift amount
    < 2**32); and the lanes that executed are exactly the issued lanes whose guard holds. A lane
    whose operand is poison is skipped and counted (for selp only the predicate and the selected
    operand count, as in the interpreter). `ops`: the program to check (default: datapath_program's
    for this launch; tests pass corrupted ones to see the check fail)."""
    from gpu_layers.interp.machine import _dims, launch, program_for

    prog = program_for(kernel)
    slots = register_slots(kernel)
    if ops is None:
        ops = datapath_program(kernel, slots, grid, block, args)
    slot_of = {prog.regcol[n]: s for n, s in slots.items() if s < REGS}   # (shared slots: many to one)
    dst = [next((c for c in ins.dsts if c in slot_of), None) for ins in prog.code]
    nthreads = 1
    for x in _dims(block, "block"):
        nthreads *= x
    stats = CheckStats()
    shadow = {}                 # (block, warp) -> [slot] -> 32 lane values before the step
    bad = stats.mismatches

    def note(msg):
        if len(bad) < limit:
            bad.append(msg)

    def observe(W, ins, pc, active, done):
        key = (W.block_id, W.index)
        regs = shadow.get(key)
        if regs is None:
            if shadow and next(iter(shadow))[0] != W.block_id:
                shadow.clear()
            n = min(32, nthreads - 32 * W.index)
            regs = shadow[key] = [[None] * n + [0] * (32 - n) for _ in range(REGS)]
        op = ops[pc]
        where = f"block {W.block_id} warp {W.index} pc {pc} `{ins.text}`"
        # the guard: exactly the issued lanes whose guard holds execute
        if op.guard is None:
            want = set(active)
        else:
            G = regs[op.guard]
            want = {l for l in active if G[l] is not None and G[l] != int(op.gneg)}
        got = set(done)
        if op.kind == "warp":           # a warp-synchronous step may run parked lanes, or none yet
            if got & set(active) - want:
                note(f"{where}: lanes {sorted(got & set(active) - want)} executed with a false guard")
        elif got != want:
            note(f"{where}: executed lanes {sorted(got)}, the guard gives {sorted(want)}")
        stats.guard_steps += 1
        if op.kind == "alu_unsupported":
            stats.unsupported_steps += 1
        if op.op is not None:
            stats.alu_steps += 1
            D = W.R[dst[pc]]
            pred = op.op in PRED_OPS
            lim_a = None if op.op in MOVES else 1 << op.width
            lim_b = (1 << 32) if op.op in SHIFT else 1 << op.width
            tag = f"{op.op}.{op.width}"

            def val(code, l):
                if code < REGS:
                    return regs[code][l]
                if code == SRC_IMM:
                    return op.imm
                if code == SRC_TID:
                    return W.tids[l]
                if code == SRC_CTAID:
                    return W.block_id
                return 0

            for l in done:
                A, B = val(op.a, l), val(op.b, l)
                P = regs[op.p][l] if op.p is not None else 0
                if op.op == "selp":
                    if P is None or (A if P else B) is None:
                        stats.poison += 1
                        continue
                    A, B = (A, B if B is not None else 0) if P else (A if A is not None else 0, B)
                elif A is None or B is None:
                    stats.poison += 1
                    continue
                stats.lanes += 1
                stats.by_op[tag] += 1
                if lim_a is not None and A >= lim_a or op.b != SRC_NONE and B >= lim_b:
                    note(f"{where} lane {l}: operands {A:#x}, {B:#x} outside the ALU's precondition")
                r, q = alu_ref(op.op, op.width, A, B, P)
                if (q if pred else r) != D[l]:
                    note(f"{where} lane {l}: {op.op}.{op.width}({A:#x}, {B:#x}, {P}) = "
                         f"{(q if pred else r):#x}, the interpreter wrote {D[l]}")
        for c in ins.dsts:              # the executed lanes write their slot (others keep it:
            s = slot_of.get(c)          # with shared slots it may hold another register's value)
            if s is not None:
                for l in done:
                    regs[s][l] = W.R[c][l]

    launch(kernel, grid, block, list(args), dynamic_shared_bytes, lanes=lanes,
           step_budget=step_budget, observer=observe)
    return stats
