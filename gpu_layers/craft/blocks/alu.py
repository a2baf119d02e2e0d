"""The integer ALU of one lane: every integer machine operation of PTX on 16/32/64-bit registers, in
4 MLP stages (depth 4), as one block.

Interface

    alu(c, op, width, a, b, p, name="alu", enc="bits") -> Block with outputs [r, q]

  op     onehot(len(ALU_OPS)) field (input or computed): the operation, ALU_OPS[k]
  width  onehot(3) field over ALU_WIDTHS = (16, 32, 64): the operation width w
  a, b   64-bit fields whose .bit(i) is an exact 0/1 Lin (bits, dual or rail3 encodings)
  p      1-bit field: the selp predicate
  r      64-bit result (`enc`: "bits" (+-1) or "dual"), truncated to w and zero-extended: exactly
         the destination register PTX writes (add.s32, shl.b64, shr.s16, cvt.s64.s8, ...); 0 for
         the predicate ops
  q      1-bit predicate result (same encoding) of setp_* and pand/por/pxor/pnot; 0 otherwise

Operands arrive as the source registers' bits zero-extended to 64 bits. Precondition (what the
register file delivers): a < 2**w and b < 2**w for every op except mov_a / zext* / sext*, which read
any a (a conversion's source register may be wider or narrower than w); for the shifts b is the
u32 shift amount (b < 2**32; bits 32..63 are ignored). `alu_ref` is the definition on valid inputs
(it masks every operand to its PTX type width, as the reference interpreter does).

Outside the precondition (a lane that is not issued reads its register slot, which may hold a
wider value: docs/machine.md §35) every field stays on its code, so the residual's norm does not
move and the lane's flags keep their margins; r is then still alu_ref's for every op but
OFF_RANGE_UNSPECIFIED (the compares, min/max, clz and mquad read a's and b's high bits).

  mov_a, zext     r = a                      (zext: the source was already zero-extended)
  add, sub        r = a + b, a - b
  and, or, xor    bitwise; not_a: r = ~a
  shl, shr_u      amounts >= w give 0 (PTX clamps the u32 amount to w)
  shr_s           sign = bit w-1; amounts >= w give all sign bits
  min_*, max_*    unsigned or signed (bit w-1 is the sign)
  selp            r = p ? a : b
  setp_CMP        q = a CMP b, CMP in eq ne lt le gt ge, _u unsigned / _s signed
  pand por pxor   q = a0 OP b0 on bit 0 of a and b; pnot: q = !a0
  sext8/16/32     r = a's low 8/16/32 bits sign-extended to w (truncated when w is narrower)
  zext8/16/32     r = a's low 8/16/32 bits zero-extended to w (cvt.u32.u8 of a 16-bit register, ...)
  clz             r = the leading zeros of w-bit a (w for 0): PTX clz.b32 / clz.b64 (a count < 2^7,
                  so the 32-bit destination of clz.b64 receives it whole)
  mstep           r = 2a + (a's bit w-1 ? b : 0): one step of a multiply whose multiplier rides in
                  a's high bits above the accumulator (machine code only, docs/machine.md §17)
  dstep           t = 2a; r = t >= b ? t - b : t (unsigned): one step of a restoring division
                  whose remainder and quotient share a (machine code only)
  mquad           r = 4a + (0, L, 2L, H)[a's bits 63..62], L = b's low and H = b's high 32 bits:
                  two multiplier bits a step, with b = (3x mod 2^32) << 32 | x (machine code
                  only: the lowering uses width 64; narrower, a's top bits are 0 and r = 4a;
                  docs/machine.md §23)
  mtrip           r = ((2a + b) mod 2^32) << 32 | (a mod 2^32): mquad's b from x in one step
                  (mtrip x, x; machine code only)

Construction (all steps are threshold steps of `circuit.Step`; every unit's last steps are gated by
`op` and the width mask, so the result mux costs no stage; a step may write many dims at once)

  stage 1  shifter coarse digit (amount bits 4-5, shifts 0/16/32/48) in two frames: a for shl, the
           bit-reversed sign-extended a for shr_u/shr_s (a right shift is a left shift of the
           reversed word: both later digit stages are shared); fine-digit one-hot (bits 0-1);
           `big` = amount >= 64; `sgn` = a's sign bit at width w; chunk generate/propagate of
           a + b, a + ~b + 1 and of the signed variant (sign bit flipped) of the chunks holding bit
           15, 31, 63; [b_i and sub] (so b' = b xor sub is a linear form); clz's t_k = [a >> k == 0]
           (one step on the sum of a's bits k..63: a < 2^w, so the same t serves every width)
  stage 2  shifter fine digit (0-3); mid-digit one-hot (bits 2-3; `none` when big or not a shift);
           carries into the 8-bit chunks (lookahead over chunk G/P, add or sub); q (setp from
           the chunked a - b: lt = no carry out, eq = every chunk only propagates; predicate ops);
           `pa` = "pick a" for the select unit (min/max from the compare, selp from p, 1 for moves)
  stage 3  shifter mid digit (0/4/8/12) into y, with the shr_s sign fill; the select unit
           (pa ? a : b) and sext's high bits also into y (normal frame); per-bit carries inside
           each chunk: [sum_{j<p} 2^j (a_j + b'_j) + C_chunk >= 2^p]; clz's count n = sum_{k<w} t_k
           into y bit by bit: t is monotone, so [n >= c] = t_{w-c} and bit j of n is the exact 0/1
           form sum_{m >= 1} (-1)^(m+1) t_{w - m 2^j}
  stage 4  r: y passed through (normal frame) or bit-reversed (shr) under the width mask; add, sub,
           and, or, xor from S_i = a_i + b'_i + c_i (c = 0 for the logic ops) as
           [S >= 1 + and] - [S >= 2 : xor/add/sub] + [S >= 3 : add/sub]; not_a

The two step ops run on the adder: its first operand is `aa` (stage 2: a, or 2a for the step
ops), its second b, ~b (dstep) or b masked by a's top bit (mstep: b - nb); stage 1 adds their chunk
generate/propagate (gpd, gpm: a's bits read one place up), stage 2 their chunk carries and dstep's
compare ge, stage 3 routes 2a into y when dstep's t < b (`dge` = dstep and ge enables the sum).
mquad's first operand is 4a (aa, stage 2) and its second vq, the multiple of x that a's top two
bits pick (stage 1, from b's halves; `nb` cancels b itself in b'): stage 1 adds the chunk
generate/propagate of each case (gpq), stage 2 their carries. mtrip adds 2a + b on the same
adder (chunks 0-3 only) and writes its low 32 sum bits to r's high half, a's low half through y.

Thresholds with sums of up to 2^8 (chunk carries, compares) make stages 1-3 exact in fp32 only
(`Compiled.bf16_unsafe()` names them); the shifter alone would be bf16-safe.
"""
from __future__ import annotations

from ..circuit import Circuit, CircuitError, MLPStage, Step
from ..fields import Field, Lin, lsum
from .base import finish, out_field

ALU_OPS = ("mov_a", "add", "sub", "and", "or", "xor", "not_a", "shl", "shr_u", "shr_s",
           "min_u", "min_s", "max_u", "max_s", "selp",
           "setp_eq", "setp_ne", "setp_lt_u", "setp_lt_s", "setp_le_u", "setp_le_s",
           "setp_gt_u", "setp_gt_s", "setp_ge_u", "setp_ge_s",
           "pand", "por", "pxor", "pnot", "zext", "sext8", "sext16", "sext32",
           "zext8", "zext16", "zext32", "clz", "mstep", "dstep", "mquad", "mtrip")
ALU_WIDTHS = (16, 32, 64)
N = 64
CHUNK = 8
NCH = N // CHUNK
SIGN_CHUNK = {w: w // CHUNK - 1 for w in ALU_WIDTHS}       # the chunk holding bit w-1

PRED_OPS = frozenset({"pand", "por", "pxor", "pnot"} | {o for o in ALU_OPS if o.startswith("setp_")})
SHR = ("shr_u", "shr_s")
SHIFT = ("shl",) + SHR
ARITH = ("add", "sub")
TOPS = ("add", "sub", "and", "or", "xor")
MOVES = ("mov_a", "zext", "sext8", "sext16", "sext32", "zext8", "zext16", "zext32")
SELB = ("selp", "min_u", "min_s", "max_u", "max_s")
SIGNED = ("min_s", "max_s", "setp_lt_s", "setp_le_s", "setp_gt_s", "setp_ge_s")
STEPS = ("mstep", "dstep")
QUAD = ("mquad",)                   # 4a + a multiple of b: the adder's first operand is 4a
TRIP = ("mtrip",)                   # 2a + b into the high half, a's low half kept
SEXT = {"sext8": 8, "sext16": 16, "sext32": 32}
OFF_RANGE_UNSPECIFIED = frozenset({o for o in ALU_OPS if o.startswith(("setp_", "min_", "max_"))}
                                  | {"clz", "mquad"})
ZEXT = {"zext8": 8, "zext16": 16, "zext32": 32}


# ---------------------------------------------------------------------------- the reference

def _sx(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


def alu_ref(op, width, a: int, b: int, p: int) -> tuple[int, int]:
    """(r, q) of one ALU operation. op: a name of ALU_OPS or its index; width: 16, 32 or 64."""
    if not isinstance(op, str):
        op = ALU_OPS[int(op)]
    w = int(width)
    if w not in ALU_WIDTHS:
        raise ValueError(f"width {w} not in {ALU_WIDTHS}")
    M = (1 << w) - 1
    a, b = int(a), int(b)
    x, y = a & M, b & M
    sx, sy = _sx(x, w), _sx(y, w)
    k = b & 0xFFFFFFFF                 # PTX: the shift amount is a .u32
    cmp = {"eq": x == y, "ne": x != y, "lt_u": x < y, "le_u": x <= y, "gt_u": x > y, "ge_u": x >= y,
           "lt_s": sx < sy, "le_s": sx <= sy, "gt_s": sx > sy, "ge_s": sx >= sy}
    if op.startswith("setp_"):
        return 0, int(cmp[op[5:]])
    a0, b0 = a & 1, b & 1
    if op in PRED_OPS:
        return 0, {"pand": a0 & b0, "por": a0 | b0, "pxor": a0 ^ b0, "pnot": 1 - a0}[op]
    if op in ("mov_a", "zext"):
        r = x
    elif op == "add":
        r = x + y
    elif op == "sub":
        r = x - y
    elif op == "and":
        r = x & y
    elif op == "or":
        r = x | y
    elif op == "xor":
        r = x ^ y
    elif op == "not_a":
        r = ~x
    elif op == "shl":
        r = x << k if k < w else 0
    elif op == "shr_u":
        r = x >> k if k < w else 0
    elif op == "shr_s":
        r = sx >> min(k, w)
    elif op in ("min_u", "max_u"):
        r = (min if op == "min_u" else max)(x, y)
    elif op in ("min_s", "max_s"):
        r = (min if op == "min_s" else max)(sx, sy)
    elif op == "selp":
        r = x if p & 1 else y
    elif op in SEXT:
        r = _sx(a, SEXT[op])
    elif op in ZEXT:
        r = a & ((1 << ZEXT[op]) - 1)
    elif op == "clz":
        r = w - x.bit_length()
    elif op == "mstep":
        r = (x << 1) + (y if x >> (w - 1) else 0)
    elif op == "dstep":
        t = (x << 1) & M
        r = t - y if t >= y else t
    elif op == "mquad":
        lo, hi = y & 0xFFFFFFFF, y >> 32
        r = (x << 2) + (0, lo, 2 * lo, hi)[x >> 62]
    elif op == "mtrip":
        r = ((((x << 1) + y) & 0xFFFFFFFF) << 32) | (x & 0xFFFFFFFF)
    else:
        raise AssertionError(op)
    return r & M, 0


# ---------------------------------------------------------------------------- construction

def _ub(t: Lin) -> float:
    """An upper bound of |t| over valid inputs (every dim's raw value lies in [-1, 1])."""
    return abs(t.const) + sum(abs(v) for v in t.coef.values())


class _Stage:
    """One MLP stage whose steps may write several output bits at once. Every output bit is
    0 + sum(ck * step) (the steps that can fire together are exclusive by construction)."""

    def __init__(self, c: Circuit, name: str):
        self.c, self.name = c, name
        self.steps: list[Step] = []
        self.bias: dict[int, float] = {}
        self.outputs: list[Field] = []

    def field(self, f: Field) -> Field:
        self.outputs.append(f)
        for i in range(f.n):
            if f.enc == "bits":
                self.bias[f.start + i] = -1.0
            elif f.enc == "dual":
                self.bias[f.start + 2 * i + 1] = 1.0
            elif f.enc != "onehot":
                raise CircuitError(f"{f.name}: the ALU writes bits, dual or onehot fields")
        return f

    def step(self, t: Lin, margin: float, targets, gates=()):
        """[t > 0 and every gate] (t: margin `margin`; gates: 0/1 Lins) adding ck to each target
        (field, bit, ck). A gate g enters as G (g - 1) with G = max|t| + margin."""
        gates = list(gates)
        if gates:
            G = _ub(t) + margin
            t = t + G * (lsum(gates) - float(len(gates)))
        out: dict[int, float] = {}
        for f, i, ck in targets:
            if f.enc == "bits":
                dims = [(f.start + i, 2.0 * ck)]
            elif f.enc == "dual":
                dims = [(f.start + 2 * i, ck), (f.start + 2 * i + 1, -ck)]
            else:
                dims = [(f.start + i, ck)]
            for d, v in dims:
                out[d] = out.get(d, 0.0) + v
        if out:
            self.steps.append(Step(t, margin, out))

    def build(self) -> MLPStage:
        st = MLPStage(self.name, self.steps, {d: v for d, v in self.bias.items() if v}, list(self.outputs))
        self.c.add_stage(st)
        return st


def alu(c: Circuit, op: Field, width: Field, a: Field, b: Field, p: Field, name: str = "alu",
        enc: str = "bits"):
    """The integer ALU of one lane (see the module docstring): outputs [r, q]."""
    if op.enc != "onehot" or op.n != len(ALU_OPS):
        raise CircuitError(f"alu: op must be onehot({len(ALU_OPS)}) over ALU_OPS")
    if width.enc != "onehot" or width.n != len(ALU_WIDTHS):
        raise CircuitError("alu: width must be onehot(3) over (16, 32, 64)")
    if a.n != N or b.n != N:
        raise CircuitError("alu: a and b must be 64-bit fields")
    if enc not in ("bits", "dual"):
        raise CircuitError("alu: enc must be 'bits' or 'dual'")
    name = c.unique(name)
    idx = {o: k for k, o in enumerate(ALU_OPS)}

    def O(*names) -> Lin:
        return lsum(op.hot(idx[o]) for o in names)

    def W(w) -> Lin:
        return width.hot(ALU_WIDTHS.index(w))

    def allow(i) -> Lin:            # 1 when bit i lies inside the operation width
        return lsum(W(w) for w in ALU_WIDTHS if i < w)

    A, B = a.bit, b.bit

    def match(bitpos, v) -> Lin:    # sum of literals: == len(bitpos) iff b's bits equal v
        return lsum(B(j) if (v >> q) & 1 else 1.0 - B(j) for q, j in enumerate(bitpos))

    def new(suffix, f_enc, n):
        return out_field(c, f"{name}_{suffix}", f_enc, n)

    # ---- stage 1 -------------------------------------------------------------------------
    s1 = _Stage(c, f"{name}_s1")
    x1 = s1.field(new("x1", "bits", N))
    dfine = s1.field(new("dfine", "onehot", 5))
    big = s1.field(new("big", "bits", 1))
    sgn = s1.field(new("sgn", "bits", 1))
    gpa = s1.field(new("gpa", "bits", 2 * NCH))
    gps = s1.field(new("gps", "bits", 2 * NCH))
    gpw = s1.field(new("gpw", "bits", 2 * len(ALU_WIDTHS)))
    andb = s1.field(new("andb", "bits", N))
    clzt = s1.field(new("clzt", "bits", N))
    gpd = s1.field(new("gpd", "bits", 2 * NCH))
    gpm = s1.field(new("gpm", "bits", 2 * NCH))
    gpq = s1.field(new("gpq", "bits", 2 * NCH))
    vq = s1.field(new("vq", "bits", 33))

    def T(i) -> Lin:                # the step ops' first operand 2a, bit i
        return A(i - 1) if i else Lin()
    for v in range(4):              # coarse digit: amount bits 4, 5 -> shift 16 v
        m = match((4, 5), v)
        for i in range(16 * v, N):
            s1.step(m + A(i - 16 * v) - 2.5, 0.5, [(x1, i, 1.0)], [O("shl")])
            k = 63 - (i - 16 * v)   # a's bits at or above w never enter a right shift: the
            #                         sign fill below writes those positions (exclusive for any a)
            s1.step(m + A(k) - 2.5, 0.5, [(x1, i, 1.0)], [O(*SHR)] + ([allow(k)] if k >= 16 else []))
        for w in ALU_WIDTHS:        # shr_s: sign extension to 64 bits and the vacated low positions
            top = min(N - 1, N - 1 - w + 16 * v)
            if top >= 0:
                s1.step(m + A(w - 1) - 2.5, 0.5, [(x1, j, 1.0) for j in range(top + 1)], [O("shr_s"), W(w)])
    for v in range(4):
        s1.step(match((0, 1), v) - 1.5, 0.5, [(dfine, v, 1.0)], [O(*SHIFT)])
    s1.step(0.5 - O(*SHIFT), 0.5, [(dfine, 4, 1.0)])
    s1.step(lsum(B(j) for j in range(6, 32)) - 0.5, 0.5, [(big, 0, 1.0)])
    for w in ALU_WIDTHS:
        s1.step(A(w - 1) - 0.5, 0.5, [(sgn, 0, 1.0)], [W(w)])

    def chunk_sum(d, sub, flip=False):
        s = Lin()
        for j in range(CHUNK):
            i = CHUNK * d + j
            av, bv = A(i), (1.0 - B(i)) if sub else B(i)
            if flip and j == CHUNK - 1:         # signed: both sign bits flipped
                av, bv = 1.0 - A(i), B(i)
            s = s + float(1 << j) * (av + bv)
        return s
    full = float(1 << CHUNK)
    for d in range(NCH):
        for f, sub in ((gpa, False), (gps, True)):
            s = chunk_sum(d, sub)
            s1.step(s - (full - 0.5), 0.5, [(f, 2 * d, 1.0)])          # generate
            s1.step(s - (full - 1.5), 0.5, [(f, 2 * d + 1, 1.0)])      # propagate (or generate)
    for k, w in enumerate(ALU_WIDTHS):
        s = chunk_sum(SIGN_CHUNK[w], True, flip=True)
        s1.step(s - (full - 0.5), 0.5, [(gpw, 2 * k, 1.0)])
        s1.step(s - (full - 1.5), 0.5, [(gpw, 2 * k + 1, 1.0)])
    for d in range(NCH):            # dstep: 2a + ~b + 1
        s = lsum(float(1 << j) * (T(CHUNK * d + j) + 1.0 - B(CHUNK * d + j)) for j in range(CHUNK))
        s1.step(s - (full - 0.5), 0.5, [(gpd, 2 * d, 1.0)])
        s1.step(s - (full - 1.5), 0.5, [(gpd, 2 * d + 1, 1.0)])
    for w in ALU_WIDTHS:            # mstep: 2a + b when a's bit w-1 is set, else 2a (which never generates)
        for d in range(w // CHUNK):
            s = lsum(float(1 << j) * (T(CHUNK * d + j) + B(CHUNK * d + j)) for j in range(CHUNK))
            s1.step(s - (full - 0.5), 0.5, [(gpm, 2 * d, 1.0)], [O("mstep"), W(w), A(w - 1)])
            s1.step(s - (full - 1.5), 0.5, [(gpm, 2 * d + 1, 1.0)], [O("mstep"), W(w), A(w - 1)])
            s = lsum(float(1 << j) * T(CHUNK * d + j) for j in range(CHUNK))
            s1.step(s - (full - 1.5), 0.5, [(gpm, 2 * d + 1, 1.0)], [O("mstep"), W(w), 1.0 - A(w - 1)])
    # mquad: 4a + V, V = (0, L, 2L, H)[a's bits 63, 62] (L, H: b's 32-bit halves; only the first
    # 33 bits of V can be set); every case is one linear chunk sum, gated by its two top bits
    def case(k) -> list:
        return [O("mquad"), A(63) if k >> 1 else 1.0 - A(63), A(62) if k & 1 else 1.0 - A(62)]

    def V(k, i) -> Lin:
        if k == 1 and i < 32:
            return B(i)
        if k == 2 and 1 <= i <= 32:
            return B(i - 1)
        if k == 3 and i < 32:
            return B(32 + i)
        return Lin()

    def Q(i) -> Lin:                # mquad's first operand 4a, bit i
        return A(i - 2) if i >= 2 else Lin()
    for d in range(NCH):
        live = [k for k in (1, 2, 3) if any(V(k, CHUNK * d + j).coef for j in range(CHUNK))]
        for k in live:
            s = lsum(float(1 << j) * (Q(CHUNK * d + j) + V(k, CHUNK * d + j)) for j in range(CHUNK))
            s1.step(s - (full - 0.5), 0.5, [(gpq, 2 * d, 1.0)], case(k))
            s1.step(s - (full - 1.5), 0.5, [(gpq, 2 * d + 1, 1.0)], case(k))
        s = lsum(float(1 << j) * Q(CHUNK * d + j) for j in range(CHUNK))     # 4a alone: no generate
        for gates in ([case(k) for k in range(4) if k not in live] if live else [[O("mquad")]]):
            s1.step(s - (full - 1.5), 0.5, [(gpq, 2 * d + 1, 1.0)], gates)
    for d in range(4):              # mtrip: 2a + b, the low 32 bits only
        s = lsum(float(1 << j) * (T(CHUNK * d + j) + B(CHUNK * d + j)) for j in range(CHUNK))
        s1.step(s - (full - 0.5), 0.5, [(gpm, 2 * d, 1.0)], [O(*TRIP)])
        s1.step(s - (full - 1.5), 0.5, [(gpm, 2 * d + 1, 1.0)], [O(*TRIP)])
    for k in (1, 2, 3):
        for i in range(33):
            if V(k, i).coef:
                s1.step(V(k, i) - 0.5, 0.5, [(vq, i, 1.0)], case(k))
    for i in range(N):
        s1.step(B(i) - 0.5, 0.5, [(andb, i, 1.0)], [O("sub", "dstep")])
    for k in range(N):              # clz: t_k = [a >> k == 0]
        s1.step(0.5 - lsum(A(i) for i in range(k, N)), 0.5, [(clzt, k, 1.0)], [O("clz")])
    st1 = s1.build()

    def bp(i) -> Lin:               # b' = b xor sub (exact 0/1), b masked by a's top bit for mstep,
        #                             mquad's multiple vq (nb cancels b)
        return B(i) + O("sub", "dstep") - 2.0 * andb.bit(i) - nb.bit(i) + (vq.bit(i) if i < 33 else 0.0)

    # ---- stage 2 -------------------------------------------------------------------------
    s2 = _Stage(c, f"{name}_s2")
    x2 = s2.field(new("x2", "bits", N))
    dmid = s2.field(new("dmid", "onehot", 5))
    carry = s2.field(new("carry", "bits", NCH - 1))
    q = s2.field(out_field(c, f"{name}_q", enc, 1))
    pa = s2.field(new("pa", "bits", 1))
    ge = s2.field(new("ge", "bits", 1))
    aa = s2.field(new("aa", "bits", N))
    nb = s2.field(new("nb", "bits", N))
    for i in range(N):              # the adder's first operand: a, 2a for the step ops, 4a for mquad
        s2.step(A(i) - 0.5, 0.5, [(aa, i, 1.0)], [1.0 - O(*STEPS, *QUAD, *TRIP)])
        if i:
            s2.step(T(i) - 0.5, 0.5, [(aa, i, 1.0)], [O(*STEPS, *TRIP)])
        if i >= 2:
            s2.step(Q(i) - 0.5, 0.5, [(aa, i, 1.0)], [O(*QUAD)])
        s2.step(B(i) - 0.5, 0.5, [(nb, i, 1.0)], [O(*QUAD)])      # mquad: b' is vq alone
    for w in ALU_WIDTHS:            # mstep: b's bits where a's bit w-1 is 0 (subtracted from b)
        for i in range(w):
            s2.step(B(i) - A(w - 1) - 0.5, 0.5, [(nb, i, 1.0)], [O("mstep"), W(w)])
    for v in range(4):              # fine digit: shift v
        for i in range(v, N):
            s2.step(x1.bit(i - v) - 0.5, 0.5, [(x2, i, 1.0)], [dfine.hot(v)])
        if v:
            s2.step(sgn.bit(0) - 0.5, 0.5, [(x2, j, 1.0) for j in range(v)], [dfine.hot(v), O("shr_s")])
    for v in range(4):
        s2.step(match((2, 3), v) - big.bit(0) - 1.5, 0.5, [(dmid, v, 1.0)], [O(*SHIFT)])
    s2.step(big.bit(0) - O(*SHIFT) + 0.5, 0.5, [(dmid, 4, 1.0)])

    def lex(gp: Field, upto: int, cin: float, swap: tuple[int, Field, int] | None = None) -> Lin:
        """sum_{d<upto} 2^(d+1) (G_d + P_d - 1) + (2 cin - 1): > 0 iff the carry out of chunk
        upto-1 is set (never 0). swap = (chunk, field, pair) takes that chunk's G/P elsewhere."""
        t = Lin() + (2.0 * cin - 1.0)
        for d in range(upto):
            f, k = (swap[1], swap[2]) if swap and swap[0] == d else (gp, d)
            t = t + float(2 ** (d + 1)) * (f.bit(2 * k) + f.bit(2 * k + 1) - 1.0)
        return t
    for cc in range(1, NCH):
        s2.step(lex(gpa, cc, 0.0), 1.0, [(carry, cc - 1, 1.0)], [O("add")])
        s2.step(lex(gps, cc, 1.0), 1.0, [(carry, cc - 1, 1.0)], [O("sub")])
        s2.step(lex(gpd, cc, 1.0), 1.0, [(carry, cc - 1, 1.0)], [O("dstep")])
        s2.step(lex(gpm, cc, 0.0), 1.0, [(carry, cc - 1, 1.0)], [O("mstep", *TRIP)])
        s2.step(lex(gpq, cc, 0.0), 1.0, [(carry, cc - 1, 1.0)], [O(*QUAD)])
    for w in ALU_WIDTHS:            # dstep: 2a >= b at width w (a carry out of chunk w/8 - 1)
        s2.step(lex(gpd, w // CHUNK, 1.0), 1.0, [(ge, 0, 1.0)], [O("dstep"), W(w)])
    # a - b in sub mode: L = lex over all chunks; a < b iff L <= -1, a == b iff L == 1, a > b iff L >= 3
    L_u = lex(gps, NCH, 1.0)
    L_s = {w: lex(gps, NCH, 1.0, (SIGN_CHUNK[w], gpw, k)) for k, w in enumerate(ALU_WIDTHS)}
    neq = lsum(1.0 - gps.bit(2 * d + 1) + gps.bit(2 * d) for d in range(NCH))   # 0 iff a == b
    conds = {"lt": lambda L: -L, "le": lambda L: 2.0 - L, "gt": lambda L: L - 2.0, "ge": lambda L: L}
    s2.step(0.5 - neq, 0.5, [(q, 0, 1.0)], [O("setp_eq")])
    s2.step(neq - 0.5, 0.5, [(q, 0, 1.0)], [O("setp_ne")])
    for cn, fn in conds.items():
        s2.step(fn(L_u), 1.0, [(q, 0, 1.0)], [O(f"setp_{cn}_u")])
        for w in ALU_WIDTHS:
            s2.step(fn(L_s[w]), 1.0, [(q, 0, 1.0)], [O(f"setp_{cn}_s"), W(w)])
    a0, b0 = A(0), B(0)
    s2.step(a0 + b0 - 1.5, 0.5, [(q, 0, 1.0)], [O("pand")])
    s2.step(a0 + b0 - 0.5, 0.5, [(q, 0, 1.0)], [O("por")])
    s2.step(a0 + b0 - 0.5, 0.5, [(q, 0, 1.0)], [O("pxor")])
    s2.step(a0 + b0 - 1.5, 0.5, [(q, 0, -1.0)], [O("pxor")])
    s2.step(0.5 - a0, 0.5, [(q, 0, 1.0)], [O("pnot")])
    s2.step(O(*MOVES, *TRIP) - 0.5, 0.5, [(pa, 0, 1.0)])
    s2.step(p.bit(0) - 0.5, 0.5, [(pa, 0, 1.0)], [O("selp")])
    s2.step(-L_u, 1.0, [(pa, 0, 1.0)], [O("min_u")])
    s2.step(L_u, 1.0, [(pa, 0, 1.0)], [O("max_u")])
    for w in ALU_WIDTHS:
        s2.step(-L_s[w], 1.0, [(pa, 0, 1.0)], [O("min_s"), W(w)])
        s2.step(L_s[w], 1.0, [(pa, 0, 1.0)], [O("max_s"), W(w)])
    st2 = s2.build()

    # ---- stage 3 -------------------------------------------------------------------------
    s3 = _Stage(c, f"{name}_s3")
    y = s3.field(new("y", "bits", N))
    cbit = s3.field(new("cbit", "bits", NCH * (CHUNK - 1)))
    dge = s3.field(new("dge", "bits", 1))
    s3.step(ge.bit(0) - 0.5, 0.5, [(dge, 0, 1.0)], [O("dstep")])
    for i in range(1, N):           # dstep with 2a < b: r = 2a, through y
        s3.step(T(i) - 0.5, 0.5, [(y, i, 1.0)], [O("dstep"), 1.0 - ge.bit(0)])
    for v in range(4):              # mid digit: shift 4 v
        for i in range(4 * v, N):
            s3.step(x2.bit(i - 4 * v) - 0.5, 0.5, [(y, i, 1.0)], [dmid.hot(v)])
        if v:
            s3.step(sgn.bit(0) - 0.5, 0.5, [(y, j, 1.0) for j in range(4 * v)], [dmid.hot(v), O("shr_s")])
    s3.step(sgn.bit(0) - 0.5, 0.5, [(y, j, 1.0) for j in range(N)], [big.bit(0), O("shr_s")])
    for i in range(N):              # select unit: pa ? a : b
        sela = O("mov_a", "zext", *SELB,
                 *[o for o, s in (*SEXT.items(), *ZEXT.items(), ("mtrip", 32)) if i < s])
        s3.step(A(i) - 0.5, 0.5, [(y, i, 1.0)], [sela, pa.bit(0)])
        s3.step(B(i) - 0.5, 0.5, [(y, i, 1.0)], [O(*SELB), 1.0 - pa.bit(0)])
    for o, s in SEXT.items():       # sext: bits s.. are a's bit s-1 (masked to w in stage 4)
        s3.step(A(s - 1) - 0.5, 0.5, [(y, j, 1.0) for j in range(s, N)], [O(o)])
    for w in ALU_WIDTHS:            # clz: bit j of n = sum_{k<w} t_k
        for j in range(w.bit_length()):
            bit = lsum((-1.0) ** (m + 1) * clzt.bit(w - m * (1 << j)) for m in range(1, w // (1 << j) + 1))
            s3.step(bit - 0.5, 0.5, [(y, j, 1.0)], [O("clz"), W(w)])

    def chunk_carry(ch) -> Lin:     # carry into chunk ch (0/1; 0 unless add/sub or a step op)
        return O("sub", "dstep") if ch == 0 else carry.bit(ch - 1)
    for ch in range(NCH):
        for pp in range(1, CHUNK):
            lo = CHUNK * ch
            Lp = lsum(float(1 << j) * (aa.bit(lo + j) + bp(lo + j)) for j in range(pp))
            s3.step(Lp + chunk_carry(ch) - (float(1 << pp) - 0.5), 0.5,
                    [(cbit, ch * (CHUNK - 1) + pp - 1, 1.0)], [O(*ARITH, *STEPS, *QUAD, *TRIP)])
    st3 = s3.build()

    def cin_bit(i) -> Lin:          # carry into bit i (add/sub only)
        ch, pp = divmod(i, CHUNK)
        return chunk_carry(ch) if pp == 0 else cbit.bit(ch * (CHUNK - 1) + pp - 1)

    # ---- stage 4 -------------------------------------------------------------------------
    s4 = _Stage(c, f"{name}_s4")
    r = s4.field(out_field(c, f"{name}_r", enc, N))
    normal = O("shl", "clz", "dstep", *MOVES, *SELB, *TRIP)
    summed = dge.bit(0) + O("mstep", *QUAD)        # the step ops whose result is the adder's
    for i in range(N):
        s4.step(y.bit(i) - 0.5, 0.5, [(r, i, 1.0)], [normal, allow(i)])
        s4.step(y.bit(N - 1 - i) - 0.5, 0.5, [(r, i, 1.0)], [O(*SHR), allow(i)])
        S = aa.bit(i) + bp(i) + cin_bit(i)
        s4.step(S - 0.5 - O("and"), 0.5, [(r, i, 1.0)], [O(*TOPS) + summed, allow(i)])
        s4.step(S - 1.5, 0.5, [(r, i, -1.0)], [O("xor", *ARITH) + summed, allow(i)])
        s4.step(S - 2.5, 0.5, [(r, i, 1.0)], [O(*ARITH) + summed, allow(i)])
        s4.step(0.5 - A(i), 0.5, [(r, i, 1.0)], [O("not_a"), allow(i)])
        if i < 32:                  # mtrip: sum bit i into bit i + 32
            s4.step(S - 0.5, 0.5, [(r, i + 32, 1.0)], [O(*TRIP), allow(i + 32)])
            s4.step(S - 1.5, 0.5, [(r, i + 32, -1.0)], [O(*TRIP), allow(i + 32)])
            s4.step(S - 2.5, 0.5, [(r, i + 32, 1.0)], [O(*TRIP), allow(i + 32)])
    st4 = s4.build()

    def ref(v):
        rr, qq = alu_ref(int(v[op.name]), ALU_WIDTHS[int(v[width.name])], int(v[a.name]) % (1 << N),
                         int(v[b.name]) % (1 << N), int(v[p.name]) & 1)
        return {r.name: rr, q.name: qq}

    return finish(c, name, "alu", [op, width, a, b, p], [r, q], [st1, st2, st3, st4], ref,
                  {"ops": ALU_OPS, "widths": ALU_WIDTHS}, depth=4)
