"""The typed IR the PTX parser produces and the validator/interpreter consume.

A `Module` holds kernels (`.entry` functions) and module-level variables (`.shared`, `.global`,
`.const`, including `extern .shared` arrays). A `Kernel` holds its `.param` list, `.reg`
declarations, function-scoped variables (`.local` depots, `.shared` arrays) and a flat list of
`Instruction`s; labels are resolved to instruction indices (`Kernel.labels`).

An instruction's dotted opcode is split into `opcode` (first component), `modifiers` (every
component that is not a type) and `types` (the type components, in order), e.g.
`cvt.rzi.s32.f32` -> opcode "cvt", modifiers ("rzi",), types ("s32", "f32");
`ld.global.v4.u32` -> "ld", ("global", "v4"), ("u32",). `name` is the full dotted text.

Operands are small frozen dataclasses: Reg, Imm (integer), FImm (float literal as raw bits),
Sym (a variable or label name), Addr ([base+offset]), Vec ({a, b, ...}), Pair (d|p, the
predicate-out form of shfl/setp) and Sink (`_`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Every PTX fundamental type name, with its width in bits.
TYPE_BITS = {
    "pred": 1,
    "b8": 8, "b16": 16, "b32": 32, "b64": 64, "b128": 128,
    "u8": 8, "u16": 16, "u32": 32, "u64": 64,
    "s8": 8, "s16": 16, "s32": 32, "s64": 64,
    "f16": 16, "f16x2": 32, "bf16": 16, "bf16x2": 32, "tf32": 32,
    "f32": 32, "f64": 64,
    "e4m3": 8, "e5m2": 8, "e4m3x2": 16, "e5m2x2": 16,
    "s4": 4, "u4": 4, "b1": 1,
}


@dataclass(frozen=True)
class Reg:
    name: str          # e.g. "%r5", "%p1", "%tid.x", "%SPL"

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class Imm:
    value: int         # as written (may be negative); the consumer truncates to its type

    def __str__(self):
        return str(self.value)


@dataclass(frozen=True)
class FImm:
    bits: int          # raw IEEE bits
    width: int         # 32 (0f........) or 64 (0d................)

    def __str__(self):
        return ("0f%08X" if self.width == 32 else "0d%016X") % self.bits


@dataclass(frozen=True)
class Sym:
    name: str          # a variable, parameter or label name

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class Addr:
    base: Reg | Sym | None   # None: an absolute address [imm]
    offset: int = 0

    def __str__(self):
        b = "" if self.base is None else str(self.base)
        if self.base is None:
            return f"[{self.offset}]"
        return f"[{b}+{self.offset}]" if self.offset else f"[{b}]"


@dataclass(frozen=True)
class Vec:
    elems: tuple      # of Reg / Imm / FImm / Sink

    def __str__(self):
        return "{" + ", ".join(map(str, self.elems)) + "}"


@dataclass(frozen=True)
class Pair:
    first: object      # Reg or Sink
    second: object     # Reg (a predicate) or Sink

    def __str__(self):
        return f"{self.first}|{self.second}"


@dataclass(frozen=True)
class Sink:
    def __str__(self):
        return "_"


@dataclass(frozen=True)
class Guard:
    reg: str           # predicate register name
    negated: bool = False

    def __str__(self):
        return ("@!" if self.negated else "@") + self.reg


@dataclass
class Instruction:
    opcode: str
    modifiers: tuple
    types: tuple
    guard: Guard | None
    operands: list
    line: int
    name: str = ""     # full dotted opcode text, e.g. "ld.global.v4.u32"

    def __str__(self):
        g = f"{self.guard} " if self.guard else ""
        return f"{g}{self.name} " + ", ".join(map(str, self.operands))


@dataclass
class Param:
    name: str
    type: str          # "u64", "u32", "f32", ... (or "b8" for byte arrays)
    line: int
    align: int | None = None
    array: int | None = None    # element count for `.param .align 8 .b8 p[16]`
    ptr: bool = False           # `.ptr` attribute present

    @property
    def size(self) -> int:
        return TYPE_BITS[self.type] // 8 * (self.array or 1)


@dataclass
class RegDecl:
    type: str          # "pred", "b32", "f32", ...
    names: list        # expanded names, e.g. ["%r0", ..., "%r8"] for %r<9>
    line: int


@dataclass
class VarDecl:
    space: str         # "shared", "local", "global", "const"
    name: str
    type: str
    line: int
    align: int | None = None
    array: list | None = None   # dimensions; [] for an unsized `name[]`
    extern: bool = False
    init: list | None = None    # initialiser values (module-level .global/.const only)

    @property
    def elem_bytes(self) -> int:
        return max(1, TYPE_BITS[self.type] // 8)

    @property
    def size(self) -> int:
        n = 1
        for d in self.array or []:
            n *= d
        return n * self.elem_bytes


@dataclass
class Kernel:
    name: str
    params: list = field(default_factory=list)        # [Param]
    regs: list = field(default_factory=list)          # [RegDecl]
    vars: list = field(default_factory=list)          # [VarDecl] declared inside the body
    instructions: list = field(default_factory=list)  # [Instruction]
    labels: dict = field(default_factory=dict)        # label -> instruction index
    line: int = 0
    is_entry: bool = True
    directives: list = field(default_factory=list)    # [(line, text)] e.g. .maxntid, .pragma
    # machine code only (gpu_layers/machine/softfloat.py): subroutine calls as (index of the call's
    # bra, index of the routine's entry, index the routine returns to), and the indices of the
    # routine's return branches; liveness treats a call as one instruction
    calls: list = field(default_factory=list)
    returns: frozenset = frozenset()
    # machine code only (gpu_layers/machine/word_memory.py): indices of instructions after which
    # the same warp takes the next step (a read-modify-write sequence no other warp may split)
    holds: frozenset = frozenset()
    # machine code only (gpu_layers/machine/warp_exchange.py): indices of `bar.warp.sync -1`
    # instructions that are the machine's warp barrier (interp/machine.py: the block barrier's
    # rule for the threads of one warp) instead of PTX's warp-synchronous bar.warp.sync
    warp_barriers: frozenset = frozenset()
    # machine code only (gpu_layers/machine/word_memory.fault_where): index -> what the lowering's
    # deliberate fault there means (a load from address 0 where a check fails)
    checks: dict = field(default_factory=dict)
    # machine code (gpu_layers/machine/lower.py's output): it may use the machine's own instructions
    # (ptx.validator.MACHINE_ONLY), which PTX does not have
    machine: bool = False
    module: object = field(default=None, repr=False, compare=False)   # the enclosing Module

    def reg_types(self) -> dict:
        out = {}
        for d in self.regs:
            for n in d.names:
                out[n] = d.type
        return out

    def used_symbols(self) -> set:
        """Names of variables the instructions refer to (directly, as an address base, in a vector)."""
        used = set()
        for ins in self.instructions:
            for op in ins.operands:
                if isinstance(op, Sym):
                    used.add(op.name)
                elif isinstance(op, Addr) and isinstance(op.base, Sym):
                    used.add(op.base.name)
                elif isinstance(op, Vec):
                    used.update(e.name for e in op.elems if isinstance(e, Sym))
        return used

    def renumbered(self, code: list, at, land) -> "Kernel":
        """This kernel with instructions `code` and every field that names an instruction index
        moved: an instruction's own index by at(i) (a call's branch, return branches, held
        turns, warp barriers, checks), a place control goes to by land(i) (labels, a call's
        entry and return point; i may be len(instructions): the end). The passes that insert or
        drop machine instructions (remat, regalloc.drop_self_moves) go through here, so a new
        index field is moved everywhere."""
        from dataclasses import replace

        return replace(self, instructions=code,
                       labels={name: land(i) for name, i in self.labels.items()},
                       calls=[(at(c), land(e), land(r)) for c, e, r in self.calls],
                       returns=frozenset(at(i) for i in self.returns),
                       holds=frozenset(at(i) for i in self.holds),
                       warp_barriers=frozenset(at(i) for i in self.warp_barriers),
                       checks={at(i): why for i, why in self.checks.items()})


def in_own_module(out: Kernel, src: Kernel) -> Kernel:
    """Give `out`, a pass's result made from kernel `src`, a module of its own with `src`'s module
    header and module-level variables (the passes validate it next). Returns `out`."""
    m = src.module
    out.module = Module(version=m.version if m else "", target=m.target if m else "",
                        address_size=m.address_size if m else 64, kernels={out.name: out},
                        vars=list(m.vars) if m else [])
    return out


@dataclass
class Module:
    version: str = ""
    target: str = ""
    address_size: int = 64
    kernels: dict = field(default_factory=dict)       # name -> Kernel (entries and .func)
    vars: list = field(default_factory=list)          # module-level [VarDecl]
    unsupported: list = field(default_factory=list)   # [(line, text)] module-level constructs

    def kernel(self, name: str | None = None) -> Kernel:
        entries = [k for k in self.kernels.values() if k.is_entry]
        if name is None:
            if len(entries) != 1:
                from gpu_layers.errors import CaseError
                raise CaseError(f"the PTX has {len(entries)} kernels; name one of "
                                f"{[k.name for k in entries]}")
            return entries[0]
        if name not in self.kernels or not self.kernels[name].is_entry:
            from gpu_layers.errors import CaseError
            raise CaseError(f"kernel {name!r} not found in the PTX (kernels: {[k.name for k in entries]})")
        return self.kernels[name]
