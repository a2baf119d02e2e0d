"""Static validation: list EVERY construct the machine does not support, before anything runs.

`SUPPORTED` is the table of instruction forms (full dotted opcode text, exactly as nvcc writes it,
e.g. "ld.global.v4.u32", "cvt.rzi.s32.f32", "setp.ltu.f32") the reference interpreter implements,
each with its operand signature. The interpreter decodes instructions through this same table and
`tests/test_validator.py` runs one checked instance of every form (its results compared with an
independent reference), so the table and the interpreter cannot drift apart: anything not listed
here is refused by name, never run wrongly.

Operand signature letters (comma separated):
  d  destination register (or `_`)       s  source: register, immediate or special register
  p  predicate source register            q  predicate destination (or `p|q` pair for setp)
  a  address [reg+off] / [sym+off]        l  label
  D  shfl / match.all destination: register or `d|p` pair
  V  vector destination {r, ...} / d  (ld.v*),  W  vector source {r, ...} (st.v*)
  m  mov source: register, immediate, symbol (address of a variable) or {a, b} to pack
  M  mov destination: register or {a, b} to unpack
Everything that is not in the table — f16, textures, surfaces, calls, `.func`, mma/wmma,
approximate or fast-math (`.approx`, `.ftz`, `.full`) arithmetic (f32 and f64), `.cc` carry chains,
cache hints, memory-order qualifiers (.relaxed/.acquire/...), `.rz/.rm/.rp` on f32 sqrt/rcp,
module-level `.global` / `.const` data, by-value struct parameters — is refused with its line
number and a reason. f64 (exact IEEE binary64, interp/fp64.py) is supported in every rounding
mode: add/sub/mul/fma/div/rcp/sqrt, min/max/abs/neg/copysign, setp/selp/testp, conversions to and
from f32 and the integers, ld/st, and atom/red.add.f64.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpu_layers.errors import UnsupportedPTX
from gpu_layers.ptx.ir import (
    Addr, FImm, Imm, Kernel, Module, Pair, Reg, Sink, Sym, Vec,
)


@dataclass(frozen=True)
class Form:
    kind: str          # handler family in the interpreter
    sig: str           # operand signature (see module docstring)


SUPPORTED: dict[str, Form] = {}

SINT = ("s16", "s32", "s64")
UINT = ("u16", "u32", "u64")
INT = SINT + UINT
BITS = ("b16", "b32", "b64")
ANY_INT = INT + BITS
CVT_INT = ("u8", "s8") + INT
LDST_T = ("u8", "s8", "b8", "u16", "s16", "b16", "u32", "s32", "b32", "u64", "s64", "b64", "f32",
          "f64")
RND = ("rn", "rz", "rm", "rp")
IRND = ("rni", "rzi", "rmi", "rpi")

SPECIAL_REGS = {
    f"%{n}.{c}" for n in ("tid", "ntid", "ctaid", "nctaid") for c in "xyz"
} | {"%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid", "%gridid",
     "%lanemask_eq", "%lanemask_lt", "%lanemask_le", "%lanemask_gt", "%lanemask_ge"}


def _add(name, kind, sig):
    SUPPORTED[name] = Form(kind, sig)


def _build():
    # integer arithmetic
    for t in INT:
        _add(f"add.{t}", "iadd", "d,s,s")
        _add(f"sub.{t}", "isub", "d,s,s")
        _add(f"min.{t}", "imin", "d,s,s")
        _add(f"max.{t}", "imax", "d,s,s")
        _add(f"div.{t}", "idiv", "d,s,s")
        _add(f"rem.{t}", "irem", "d,s,s")
        for m in ("lo", "hi"):
            _add(f"mul.{m}.{t}", "imul", "d,s,s")
            _add(f"mad.{m}.{t}", "imad", "d,s,s,s")
        if t[1:] in ("16", "32"):
            _add(f"mul.wide.{t}", "imul", "d,s,s")
            _add(f"mad.wide.{t}", "imad", "d,s,s,s")
    for t in INT:
        _add(f"sad.{t}", "sad", "d,s,s,s")
    for t in SINT:
        _add(f"neg.{t}", "ineg", "d,s")
        _add(f"abs.{t}", "iabs", "d,s")
    for t in ("s32", "u32"):
        for m in ("lo", "hi"):
            _add(f"mul24.{m}.{t}", "imul24", "d,s,s")
            _add(f"mad24.{m}.{t}", "imad24", "d,s,s,s")
    # bitwise
    for t in BITS + ("pred",):
        for op in ("and", "or", "xor"):
            _add(f"{op}.{t}", "logic", "d,s,s")
        _add(f"not.{t}", "not", "d,s")
    for t in BITS:
        _add(f"cnot.{t}", "cnot", "d,s")
        _add(f"shl.{t}", "shl", "d,s,s")
    for t in BITS + INT:
        _add(f"shr.{t}", "shr", "d,s,s")
    for t in ("b32", "b64"):
        _add(f"popc.{t}", "popc", "d,s")
        _add(f"clz.{t}", "clz", "d,s")
        _add(f"brev.{t}", "brev", "d,s")
        _add(f"bfi.{t}", "bfi", "d,s,s,s,s")
    for t in ("u32", "s32", "u64", "s64"):
        _add(f"bfind.{t}", "bfind", "d,s")
        _add(f"bfind.shiftamt.{t}", "bfind", "d,s")
        _add(f"bfe.{t}", "bfe", "d,s,s,s")
    for t in BITS:                  # machine code only (MACHINE_ONLY): the ALU's multiply and divide steps
        _add(f"mstep.{t}", "mstep", "d,s,s")
        _add(f"dstep.{t}", "dstep", "d,s,s")
    _add("mquad.b64", "mquad", "d,s,s")
    _add("mtrip.b64", "mtrip", "d,s,s")
    _add("prmt.b32", "prmt", "d,s,s,s")
    _add("lop3.b32", "lop3", "d,s,s,s,s")
    for op in ("add", "sub"):
        _add(f"{op}.sat.s32", "isat", "d,s,s")
    for d in ("l", "r"):
        for m in ("wrap", "clamp"):
            _add(f"shf.{d}.{m}.b32", "shf", "d,s,s,s")
    # comparisons and selects
    icmp = ("eq", "ne", "lt", "le", "gt", "ge")
    ucmp = ("lo", "ls", "hi", "hs")
    fcmp = icmp + ("equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
    for t in INT + BITS + ("f32", "f64"):
        ops = fcmp if t in ("f32", "f64") else (("eq", "ne") if t.startswith("b") else
                                       icmp + (ucmp if t.startswith("u") else ()))
        for c in ops:
            _add(f"setp.{c}.{t}", "setp", "q,s,s")
            for b in ("and", "or", "xor"):
                _add(f"setp.{c}.{b}.{t}", "setp", "q,s,s,p")
    for t in ANY_INT + ("f32", "f64"):
        _add(f"selp.{t}", "selp", "d,s,s,p")
        for ct in ("s32", "f32"):
            _add(f"slct.{t}.{ct}", "slct", "d,s,s,s")
    for t in ANY_INT + ("f32", "f64", "pred"):
        _add(f"mov.{t}", "mov", "M,m")
    # float, f32 (every result rounded once, to nearest even; f64 forms below)
    for op in ("add", "sub", "mul"):
        _add(f"{op}.f32", "fbin", "d,s,s")
        _add(f"{op}.rn.f32", "fbin", "d,s,s")
    for op in ("min", "max"):
        _add(f"{op}.f32", "fminmax", "d,s,s")
    _add("div.rn.f32", "fbin", "d,s,s")
    _add("fma.rn.f32", "ffma", "d,s,s,s")
    for r in ("rz", "rm", "rp"):       # directed rounding: exact rational arithmetic
        for op in ("add", "sub", "mul", "div"):
            _add(f"{op}.{r}.f32", "fbin", "d,s,s")
        _add(f"fma.{r}.f32", "ffma", "d,s,s,s")
    _add("mad.rn.f32", "ffma", "d,s,s,s")
    _add("sqrt.rn.f32", "funary", "d,s")
    _add("rcp.rn.f32", "funary", "d,s")
    _add("abs.f32", "fbits", "d,s")
    _add("copysign.f32", "copysign", "d,s,s")
    _add("neg.f32", "fbits", "d,s")
    _add("testp.finite.f32", "testp", "q,s")
    _add("testp.infinite.f32", "testp", "q,s")
    _add("testp.number.f32", "testp", "q,s")
    _add("testp.notanumber.f32", "testp", "q,s")
    _add("testp.normal.f32", "testp", "q,s")
    _add("testp.subnormal.f32", "testp", "q,s")
    # f64 (exact binary64, interp/fp64.py): every rounding mode, subnormals kept (no .ftz on f64)
    for op in ("add", "sub", "mul"):
        _add(f"{op}.f64", "dbin", "d,s,s")
    for r in RND:
        for op in ("add", "sub", "mul", "div"):
            _add(f"{op}.{r}.f64", "dbin", "d,s,s")
        _add(f"fma.{r}.f64", "dfma", "d,s,s,s")
        _add(f"mad.{r}.f64", "dfma", "d,s,s,s")
        _add(f"rcp.{r}.f64", "dunary", "d,s")
        _add(f"sqrt.{r}.f64", "dunary", "d,s")
    for op in ("min", "max"):
        _add(f"{op}.f64", "dminmax", "d,s,s")
    _add("abs.f64", "dbits", "d,s")
    _add("neg.f64", "dbits", "d,s")
    _add("copysign.f64", "dcopysign", "d,s,s")
    for m in ("finite", "infinite", "number", "notanumber", "normal", "subnormal"):
        _add(f"testp.{m}.f64", "dtestp", "q,s")
    # conversions
    for dt in CVT_INT:
        for st in CVT_INT:
            if dt != st:
                _add(f"cvt.{dt}.{st}", "cvt", "d,s")
                _add(f"cvt.sat.{dt}.{st}", "cvt", "d,s")
    for it in CVT_INT:
        for r in ("rn", "rz", "rm", "rp"):
            _add(f"cvt.{r}.f32.{it}", "cvt", "d,s")
        for r in ("rni", "rzi", "rmi", "rpi"):
            _add(f"cvt.{r}.{it}.f32", "cvt", "d,s")
            _add(f"cvt.{r}.sat.{it}.f32", "cvt", "d,s")
    for r in ("rni", "rzi", "rmi", "rpi"):
        _add(f"cvt.{r}.f32.f32", "cvt", "d,s")
    _add("cvt.sat.f32.f32", "cvt", "d,s")
    # conversions involving f64
    _add("cvt.f64.f32", "dcvt", "d,s")
    for r in RND:
        _add(f"cvt.{r}.f32.f64", "dcvt", "d,s")
        for it in CVT_INT:
            _add(f"cvt.{r}.f64.{it}", "dcvt", "d,s")
    for r in IRND:
        _add(f"cvt.{r}.f64.f64", "dcvt", "d,s")
        for it in CVT_INT:
            _add(f"cvt.{r}.{it}.f64", "dcvt", "d,s")
            _add(f"cvt.{r}.sat.{it}.f64", "dcvt", "d,s")
    _add("cvt.sat.f64.f64", "dcvt", "d,s")
    for sp in ("global", "shared", "local"):
        _add(f"cvta.{sp}.u64", "cvta", "d,s")
        _add(f"cvta.to.{sp}.u64", "cvta", "d,s")
    # memory
    for t in LDST_T:
        _add(f"ld.param.{t}", "ld", "d,a")
        for sp in ("global", "shared", "local", ""):
            pre = f"ld.{sp}." if sp else "ld."
            spre = f"st.{sp}." if sp else "st."
            for v in ("", "v2.", "v4."):
                if v and t in ("u64", "s64", "b64", "f64") and v == "v4.":
                    continue
                _add(f"{pre}{v}{t}", "ld", "V,a")
                _add(f"{spre}{v}{t}", "st", "a,W")
                if sp == "global":
                    _add(f"ld.global.nc.{v}{t}", "ld", "V,a")
                # volatile: one thread runs at a time, so a volatile access is a plain one
                vpre = f"volatile.{sp}." if sp else "volatile."
                _add(f"ld.{vpre}{v}{t}", "ld", "V,a")
                _add(f"st.{vpre}{v}{t}", "st", "a,W")
    for sp in ("global.", "shared.", ""):
        for op, ts in (("add", ("u32", "s32", "u64", "f32", "f64")), ("min", ("u32", "s32", "u64", "s64")),
                       ("max", ("u32", "s32", "u64", "s64")), ("and", ("b32", "b64")),
                       ("or", ("b32", "b64")), ("xor", ("b32", "b64")), ("exch", ("b32", "b64")),
                       ("inc", ("u32",)), ("dec", ("u32",)), ("cas", ("b32", "b64"))):
            for t in ts:
                # scopes (.cta .gpu .sys) do not change anything on a machine that runs one
                # thread at a time; nvcc writes them after the space
                for scope in ("", "cta.", "gpu.", "sys."):
                    _add(f"atom.{sp}{scope}{op}.{t}", "atom", "d,a,s,s" if op == "cas" else "d,a,s")
                    if op not in ("cas", "exch"):
                        _add(f"red.{sp}{scope}{op}.{t}", "red", "a,s")
    # warp-level
    for m in ("up", "down", "bfly", "idx"):
        _add(f"shfl.sync.{m}.b32", "shfl", "D,s,s,s,s")
    for m in ("all", "any", "uni"):
        _add(f"vote.sync.{m}.pred", "vote", "q,p,s")
    _add("vote.sync.ballot.b32", "vote", "d,p,s")
    for t in ("b32", "b64"):
        _add(f"match.any.sync.{t}", "match", "d,s,s")
        _add(f"match.all.sync.{t}", "match", "D,s,s")
    _add("activemask.b32", "activemask", "d")
    _add("bar.warp.sync", "warpsync", "s")
    # control
    for n in ("bar.sync", "barrier.sync", "barrier.sync.aligned", "bar.sync.aligned"):
        _add(n, "bar", "s")
    for n in ("membar.cta", "membar.gl", "membar.sys", "fence.sc.cta", "fence.acq_rel.cta",
              "fence.sc.gpu", "fence.acq_rel.gpu"):
        _add(n, "nop", "")
    _add("bra", "bra", "l")
    _add("bra.uni", "bra", "l")
    _add("ret", "exit", "")
    _add("exit", "exit", "")


_build()

# Why some common things are refused (the message names the reason).
_REASONS = {
    "tex": "texture instructions are not supported",
    "tld4": "texture instructions are not supported",
    "suld": "surface instructions are not supported",
    "sust": "surface instructions are not supported",
    "call": ".func/call not supported",
    "mma": "matrix (mma) instructions are not supported",
    "wmma": "matrix (wmma) instructions are not supported",
    "ldmatrix": "ldmatrix is not supported",
    "cp": "asynchronous copies are not supported",
    "ex2": "is not bit-defined (approximate)",
    "lg2": "is not bit-defined (approximate)",
    "sin": "is not bit-defined (approximate)",
    "cos": "is not bit-defined (approximate)",
    "tanh": "is not bit-defined (approximate)",
    "rsqrt": "is not bit-defined (approximate)",
    "addc": "carry chains (.cc) are not supported",
    "subc": "carry chains (.cc) are not supported",
    "madc": "carry chains (.cc) are not supported",
    "trap": "trap is not supported",
    "brkpt": "brkpt is not supported",
    "brx": "indirect branches are not supported",
}


# The machine's own instructions (gpu_layers/craft/blocks/alu.py, docs/machine.md §17): the lowering
# writes them into machine code (Kernel.machine); in PTX they are refused like any unknown opcode.
#   mstep.bW d, a, b    d = 2a + (a's bit W-1 ? b : 0)           one step of a multiply
#   dstep.bW d, a, b    t = 2a; d = t >= b ? t - b : t (unsigned)  one step of a restoring division
#   mquad.b64 d, a, b   d = 4a + (0, L, 2L, H)[a >> 62]           two multiply bits (L, H: b's halves)
#   mtrip.b64 d, a, b   d = ((2a + b) mod 2^32) << 32 | (a mod 2^32)  mquad's b from x (a = b = x)
MACHINE_STEPS = ("mstep", "dstep", "mquad", "mtrip")      # their form kinds
MACHINE_ONLY = frozenset(n for n, f in SUPPORTED.items() if f.kind in MACHINE_STEPS)


def instruction_problem(ins) -> str | None:
    """None if the machine supports `ins` (form and operand shapes), else a one-line reason."""
    form = SUPPORTED.get(ins.name)
    if form is None:
        head = f"line {ins.line}: instruction `{ins.name}`"
        if any(t in ("f16", "f16x2", "bf16", "bf16x2") for t in ins.types):
            return f"{head} is not supported (half precision is out of scope)"
        if ins.opcode in _REASONS:
            r = _REASONS[ins.opcode]
            return f"{head} {r}" if r.startswith("is") else f"{head}: {r}"
        if "approx" in ins.modifiers or "full" in ins.modifiers:
            return f"{head} is not bit-defined (approximate)"
        if "ftz" in ins.modifiers:
            return f"{head} is not supported (.ftz flush-to-zero is out of scope)"
        if "cc" in ins.modifiers:
            return f"{head} is not supported (carry chains)"
        return f"{head} is not supported"
    return _operand_problem(ins, form)


def _operand_problem(ins, form: Form) -> str | None:
    sig = [s for s in form.sig.split(",") if s]
    ops = ins.operands
    head = f"line {ins.line}: `{ins.name}`"
    if len(ops) != len(sig):
        if not (form.kind == "bar" and len(ops) == 2):
            return f"{head} takes {len(sig)} operands, found {len(ops)}"
    nvec = 4 if "v4" in ins.modifiers else 2 if "v2" in ins.modifiers else 1
    for s, op in zip(sig, ops):
        ok = True
        if s in ("d", "q"):
            ok = isinstance(op, (Reg, Sink)) or (s == "q" and isinstance(op, Pair))
        elif s == "s":
            ok = isinstance(op, (Reg, Imm, FImm))
        elif s == "p":
            ok = isinstance(op, Reg)
        elif s == "a":
            ok = isinstance(op, Addr)
        elif s == "l":
            ok = isinstance(op, Sym)
        elif s == "D":
            ok = isinstance(op, (Reg, Pair))
        elif s in ("V", "W"):
            if nvec == 1:
                ok = isinstance(op, (Reg, Sink) if s == "V" else (Reg, Imm, FImm))
            else:
                ok = isinstance(op, Vec) and len(op.elems) == nvec
        elif s == "m":
            ok = isinstance(op, (Reg, Imm, FImm, Sym, Vec)) or (isinstance(op, Addr) and isinstance(op.base, Sym))
        elif s == "M":
            ok = isinstance(op, (Reg, Vec))
        if not ok:
            return f"{head}: operand `{op}` has an unsupported form"
    if form.kind == "bar":
        if not (isinstance(ops[0], Imm) and ops[0].value == 0):
            return f"{head}: only barrier 0 is supported"
    if form.kind == "lop3" and not isinstance(ops[4], Imm):
        return f"{head}: the lookup table must be an immediate"
    return None


def validate_kernel(module: Module, kernel: Kernel) -> list[str]:
    """Every problem in `kernel` (and the module constructs it depends on), each with a line."""
    problems = []
    for line, text in module.unsupported:
        problems.append(f"line {line}: {text}")
    used = kernel.used_symbols()
    for v in module.vars:       # module-level variables matter only where the kernel uses them
        if v.name not in used:
            continue
        if v.space not in ("shared",):
            problems.append(f"line {v.line}: module-level .{v.space} variable `{v.name}` is not supported")
        elif v.init:
            problems.append(f"line {v.line}: initialised .shared variable `{v.name}` is not supported")
    for v in kernel.vars:
        if v.space not in ("shared", "local"):
            problems.append(f"line {v.line}: .{v.space} variable `{v.name}` in a kernel body is not supported")
        elif v.array == [] and not v.extern:
            problems.append(f"line {v.line}: unsized array `{v.name}` is not supported")
    for line, text in kernel.directives:
        if text.startswith((".pragma", ".maxntid", ".reqntid", ".minnctapersm", ".maxnreg",
                            ".maxclusterrank", ".noreturn")):
            continue
        problems.append(f"line {line}: {text} is not supported")
    for p in kernel.params:
        if p.array is not None or p.type not in ("u8", "s8", "b8", "u16", "s16", "b16", "u32",
                                                  "s32", "b32", "u64", "s64", "b64", "f32", "f64"):
            problems.append(f"line {p.line}: parameter `{p.name}` of type .{p.type}"
                            f"{'[%d]' % p.array if p.array else ''} is not supported")
    regtypes = {}
    for d in kernel.regs:
        if d.type not in ("pred", "b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32",
                          "f64"):
            problems.append(f"line {d.line}: registers of type .{d.type} are not supported")
        for n in d.names:
            if n in regtypes and regtypes[n] != d.type:
                problems.append(f"line {d.line}: register {n} redeclared with another type")
            regtypes[n] = d.type
    varnames = {v.name for v in module.vars} | {v.name for v in kernel.vars} | {p.name for p in kernel.params}
    for ins in kernel.instructions:
        if ins.name in MACHINE_ONLY and not kernel.machine:
            problems.append(f"line {ins.line}: instruction `{ins.name}` is not supported (it is qwenGPU's "
                            "machine instruction, not PTX)")
            continue
        pr = instruction_problem(ins)
        if pr:
            problems.append(pr)
            continue
        regs = []
        for op in ins.operands:
            regs.extend(_regs_of(op))
        if ins.guard:
            regs.append(ins.guard.reg)
        for r in regs:
            if r not in regtypes and r not in SPECIAL_REGS:
                problems.append(f"line {ins.line}: register `{r}` is not declared"
                                + (" (unsupported special register)" if "." in r or r[1:].isalpha() else ""))
        for op in ins.operands:
            sym = op.base if isinstance(op, Addr) and isinstance(op.base, Sym) else op if isinstance(op, Sym) else None
            if sym is not None and ins.opcode not in ("bra",) and sym.name not in varnames:
                problems.append(f"line {ins.line}: unknown symbol `{sym.name}`")
    return problems


def _regs_of(op):
    if isinstance(op, Reg):
        return [op.name]
    if isinstance(op, Addr) and isinstance(op.base, Reg):
        return [op.base.name]
    if isinstance(op, Vec):
        return [e.name for e in op.elems if isinstance(e, Reg)]
    if isinstance(op, Pair):
        return [e.name for e in (op.first, op.second) if isinstance(e, Reg)]
    return []


def validate(module: Module, kernel_name: str | None = None) -> None:
    """Raise UnsupportedPTX listing every problem of the kernel (all kernels if None)."""
    kernels = [module.kernel(kernel_name)] if kernel_name else [k for k in module.kernels.values() if k.is_entry]
    problems = []
    seen = set()
    if not kernels:
        problems.append("the PTX has no .entry kernel (.func alone cannot be launched)")
    for k in kernels:
        for p in validate_kernel(module, k):
            if p not in seen:
                seen.add(p)
                problems.append(p)
    if problems:
        raise UnsupportedPTX(sorted(problems, key=_line_key))


def _line_key(p: str):
    head = p.split(":", 1)[0]
    return int(head[5:]) if head.startswith("line ") and head[5:].isdigit() else 0


def fusion_warnings(kernel: Kernel) -> list[str]:
    """Plain `mul.f32` results feeding a plain `add.f32`/`sub.f32` (no `.rn` on either), and the
    same for f64.

    ptxas may contract such a pair into one fma on real hardware, while this machine rounds each
    operation as written; the results can differ in the last bit. Not an error: a warning list.
    """
    plain_mul = {}
    out = []
    for ins in kernel.instructions:
        if ins.name in ("mul.f32", "mul.f64") and isinstance(ins.operands[0], Reg):
            plain_mul[ins.operands[0].name] = (ins.line, ins.name)
        elif ins.name in ("add.f32", "sub.f32", "add.f64", "sub.f64"):
            for op in ins.operands[1:]:
                if isinstance(op, Reg) and op.name in plain_mul and plain_mul[op.name][1][-3:] == ins.name[-3:]:
                    line, mname = plain_mul[op.name]
                    hint = "__fmul_rn/__fadd_rn" if mname == "mul.f32" else "__dmul_rn/__dadd_rn"
                    out.append(f"line {ins.line}: `{ins.name}` adds the result of `{mname}` at line "
                               f"{line}; ptxas may fuse them into an fma on a real GPU "
                               f"(use {hint} for a bit-defined result)")
    return out
