"""gpu_layers.ptx.validator: unsupported constructs are refused by name, before anything runs, and
every supported form runs and computes what an independent reference says."""
import math
import random
import struct
import zlib
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from gpu_layers.errors import UnsupportedPTX
from gpu_layers.interp import Scalar, launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.ptx import parse_ptx
from gpu_layers.ptx.ir import TYPE_BITS
from gpu_layers.ptx.validator import MACHINE_ONLY, SUPPORTED, validate

UNSUPPORTED_BODY = """\
\tld.param.u64 \t%rd1, [out];
\ttex.2d.v4.f32.f32 \t{%f1, %f2, %f3, %f4}, [tex0, {%f5, %f6}];
\tdiv.approx.f32 \t%f1, %f2, %f3;
\tdiv.full.f32 \t%f1, %f2, %f3;
\trcp.approx.ftz.f64 \t%fd1, %fd2;
\tmma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 \t{%f1, %f2, %f3, %f4}, {%r1, %r2}, {%r3}, {%f1, %f2, %f3, %f4};
\tex2.approx.f32 \t%f1, %f2;
\tadd.ftz.f32 \t%f1, %f2, %f3;
\tadd.cc.u32 \t%r1, %r2, %r3;
\tcall.uni \thelper, (%r1);
\trsqrt.approx.f64 \t%fd1, %fd2;
\tmov.u32 \t%r1, %clock;
\tadd.s32 \t%r1, %r2, %r999;
\tret;
"""


def test_unsupported_constructs_are_all_listed_by_name_and_line():
    body = UNSUPPORTED_BODY
    text = kernel_ptx(body, decls="\t.reg .f64 \t%fd<4>;\n")
    text = text.replace(".visible .entry k(", ".func helper(.param .b32 x)\n{\n\tret;\n}\n.visible .entry k(")
    m = parse_ptx(text)
    with pytest.raises(UnsupportedPTX) as ei:
        validate(m, "k")
    probs = ei.value.problems
    joined = "\n".join(probs)
    lines = text.splitlines()

    def line_of(s):
        return next(i + 1 for i, l in enumerate(lines) if s in l)

    for needle, reason in [
        ("tex.2d.v4.f32.f32", "not supported"),
        ("div.approx.f32", "not bit-defined"),
        ("div.full.f32", "not bit-defined"),
        ("rcp.approx.ftz.f64", "not bit-defined"),
        ("mma.sync", "mma"),
        ("ex2.approx.f32", "not bit-defined"),
        ("add.ftz.f32", "ftz"),
        ("add.cc.u32", "carry"),
        ("call.uni", "call not supported"),
        ("rsqrt.approx.f64", "not bit-defined"),
    ]:
        ln = line_of(needle)
        hit = [p for p in probs if p.startswith(f"line {ln}:")]
        assert hit, f"{needle} not reported:\n{joined}"
        assert needle.split()[0] in hit[0] and reason in hit[0], hit[0]
    assert f"line {line_of('%clock')}:" in joined and "%clock" in joined
    assert "%r999" in joined and "not declared" in joined
    assert ".func/call not supported" in joined
    assert not any("registers of type .f64" in p for p in probs)      # f64 is supported


def test_validation_happens_before_execution():
    # the first instruction would store out of bounds; the last is unsupported: nothing runs
    body = ("\tld.param.u64 \t%rd1, [out];\n\tst.global.u32 \t[%rd1+4096], %r1;\n"
            "\tsqrt.approx.f32 \t%f1, %f2;\n\tret;\n")
    k = parse_ptx(kernel_ptx(body)).kernel()
    with pytest.raises(UnsupportedPTX) as ei:
        launch(k, 1, 1, [np.zeros(4, np.int32)])
    assert "sqrt.approx.f32" in str(ei.value)


def test_gpu_truth_kernels_validate(tmp_path):
    from conftest import require_gpu_truth

    files = sorted(require_gpu_truth().glob("*.ptx"))
    for f in files:
        validate(parse_ptx(f.read_text()))


def test_barrier_other_than_zero_is_refused():
    with pytest.raises(UnsupportedPTX, match="barrier 0"):
        validate(parse_ptx(kernel_ptx("\tbar.sync \t1;\n\tret;\n")))


def test_module_level_global_is_refused():
    text = kernel_ptx("\tmov.u64 \t%rd1, g;\n\tret;\n", module_decls=".global .align 4 .b8 g[16];\n")
    with pytest.raises(UnsupportedPTX, match="module-level .global"):
        validate(parse_ptx(text))


# --------------------------------------------------------------------------------------------
# The table and the interpreter agree: every supported form runs, and computes what it should.
#
# Each form of SUPPORTED gets one checked instance: its operands are loaded from a buffer with
# per-lane values (edge cases and random ones, chosen so that nothing is undefined: no division
# by zero, no MIN / -1, full membermasks), the instruction runs on 32 threads, its results are
# stored and compared with an independent reference written here in plain Python (integers,
# struct, numpy float32, Python floats, fractions; nothing from gpu_layers.interp). Memory forms
# also check that exactly the addressed bytes changed, in the addressed state space only. Any
# exception, ExecutionError included, is a failure. (f64 operands and results live in .f64
# registers; the f64 NaN policy the references encode is written out above round_f64.)

M32, M64 = (1 << 32) - 1, (1 << 64) - 1
SIGN32 = 0x80000000
CANON_NAN = 0x7FFFFFFF          # the NaN an NVIDIA GPU produces for every arithmetic NaN
IMAGE_WORDS = 4                 # each lane's memory region: 32 bytes
INP_SLOTS, OUT_SLOTS = 8, 16    # u64 slots per lane: inp 0-3 image, 4-7 operands; out 0-3 results,
                                # 4-7 the lane's shared region, 8-11 its local region afterwards
REG = {"p": ("%p", 10, 20), "16": ("%rs", 10, 20), "32": ("%r", 40, 30), "f": ("%f", 40, 30),
       "64": ("%rd", 40, 30), "d": ("%fd", 40, 30)}
CLASS_BITS = {"p": 1, "16": 16, "32": 32, "f": 32, "64": 64, "d": 64}

PROLOGUE = """\tld.param.u64 \t%rd60, [inp];
\tcvta.to.global.u64 \t%rd60, %rd60;
\tld.param.u64 \t%rd61, [out];
\tcvta.to.global.u64 \t%rd61, %rd61;
\tld.param.u64 \t%rd62, [mem];
\tcvta.to.global.u64 \t%rd62, %rd62;
\tmov.u32 \t%r120, %tid.x;
\tmul.wide.u32 \t%rd63, %r120, 64;
\tadd.s64 \t%rd60, %rd60, %rd63;
\tmul.wide.u32 \t%rd63, %r120, 128;
\tadd.s64 \t%rd61, %rd61, %rd63;
\tmul.wide.u32 \t%rd59, %r120, 32;
\tadd.s64 \t%rd62, %rd62, %rd59;
\tmov.u64 \t%rd57, sh;
\tadd.s64 \t%rd57, %rd57, %rd59;
\tmov.u64 \t%rd56, loc;
\tand.b32 \t%r121, %r120, 1;
\tsetp.eq.u32 \t%p31, %r121, 1;
"""
for _k in range(IMAGE_WORDS):       # the same 32-byte image in the lane's shared and local regions
    PROLOGUE += (f"\tld.global.u64 \t%rd55, [%rd60+{8 * _k}];\n\tst.shared.u64 \t[%rd57+{8 * _k}], %rd55;\n"
                 f"\tst.local.u64 \t[%rd56+{8 * _k}], %rd55;\n")
EPILOGUE = "".join(f"\tld.shared.u64 \t%rd55, [%rd57+{8 * k}];\n\tst.global.u64 \t[%rd61+{32 + 8 * k}], %rd55;\n"
                   f"\tld.local.u64 \t%rd55, [%rd56+{8 * k}];\n\tst.global.u64 \t[%rd61+{64 + 8 * k}], %rd55;\n"
                   for k in range(IMAGE_WORDS)) + "\tret;\n"
DECLS = ("\t.shared .align 16 .b8 sh[2048];\n\t.shared .align 4 .b8 shb[256];\n\t.local .align 16 .b8 loc[32];\n"
         "\t.reg .f64 \t%fd<80>;\n")      # .f64 operands live in .f64 registers, as nvcc writes them
PARAMS = (("out", "u64"), ("inp", "u64"), ("mem", "u64"), ("pv", "u64"))


def src_reg(cls, i):
    p, base, _ = REG[cls]
    return f"{p}{base + i}"


def dst_reg(cls, j):
    p, _, base = REG[cls]
    return f"{p}{base + j}"


def _load(cls, reg, slot):
    off = 8 * slot
    if cls == "p":
        return f"\tld.global.u32 \t%r100, [%rd60+{off}];\n\tsetp.ne.u32 \t{reg}, %r100, 0;\n"
    ld = {"16": "u16", "32": "u32", "f": "f32", "64": "u64", "d": "f64"}[cls]
    return f"\tld.global.{ld} \t{reg}, [%rd60+{off}];\n"


def _store(cls, reg, slot):
    off = 8 * slot
    if cls == "p":
        return f"\tselp.u32 \t%r101, 1, 0, {reg};\n\tst.global.u32 \t[%rd61+{off}], %r101;\n"
    st = {"16": "u16", "32": "u32", "f": "f32", "64": "u64", "d": "f64"}[cls]
    return f"\tst.global.{st} \t[%rd61+{off}], {reg};\n"


@dataclass
class Spec:
    """One checked instance of `form`.

    body: PTX using {s0}.. (sources, loaded from inp slots 4..) and {d0}.. (results, stored to
    out slots 0..); gen(rng, launch, lane) -> {"v": operand values, "img": 4 u64 image words};
    ref(lane dict) -> expected results (each masked to its class width), or a dict with "out" and
    "space" (the space whose region the instruction changed) and "img" (that region afterwards)."""
    form: str
    body: str
    srcs: list
    dsts: list
    gen: object
    ref: object
    launches: int = 3
    block: int = 32
    pv: object = None              # launch -> value of the u64 parameter `pv`


def _rand_image(rng):
    return [rng.getrandbits(64) for _ in range(IMAGE_WORDS)]


def run_spec(spec: Spec) -> list[str]:
    """Run `spec`; a list of mismatches (empty: the form computes what its reference says)."""
    names = {f"s{i}": src_reg(c, i) for i, c in enumerate(spec.srcs)}
    names.update({f"d{j}": dst_reg(c, j) for j, c in enumerate(spec.dsts)})
    body = PROLOGUE + "".join(_load(c, src_reg(c, i), 4 + i) for i, c in enumerate(spec.srcs))
    body += spec.body.format(**names)
    body += "".join(_store(c, dst_reg(c, j), j) for j, c in enumerate(spec.dsts)) + EPILOGUE
    text = kernel_ptx(body, params=PARAMS, decls=DECLS)
    module = parse_ptx(text)
    kernel = module.kernel()
    kernel.machine = spec.form in MACHINE_ONLY          # the machine's own instructions: machine code only
    if not any(ins.name == spec.form for ins in kernel.instructions):
        return [f"{spec.form}: the instance does not contain the form"]
    rng = random.Random(zlib.crc32(spec.form.encode()))
    problems = []
    for launch_i in range(spec.launches):
        lanes = [spec.gen(rng, launch_i, lane) for lane in range(spec.block)]
        inp = np.zeros((spec.block, INP_SLOTS), np.uint64)
        mem = np.zeros((spec.block, IMAGE_WORDS), np.uint64)
        for lane, d in enumerate(lanes):
            d.setdefault("img", _rand_image(rng))
            d["lane"] = lane
            inp[lane, :IMAGE_WORDS] = d["img"]
            mem[lane] = d["img"]
            for i, v in enumerate(d["v"]):
                inp[lane, 4 + i] = v
        out = np.zeros((spec.block, OUT_SLOTS), np.uint64)
        pv = spec.pv(launch_i) if spec.pv else 0
        res = launch(kernel, 1, spec.block,
                     [out.reshape(-1), inp.reshape(-1), mem.reshape(-1), Scalar("u64", pv)])
        got_out = res.buffers[0].reshape(spec.block, OUT_SLOTS)
        got_mem = res.buffers[2].reshape(spec.block, IMAGE_WORDS)
        for lane, d in enumerate(lanes):
            want = spec.ref(d)
            if not isinstance(want, dict):
                want = {"out": want}
            regions = {"global": got_mem[lane].tolist(), "shared": got_out[lane, 4:8].tolist(),
                       "local": got_out[lane, 8:12].tolist()}
            if want.get("exited"):          # a thread that exited early read nothing back
                del regions["shared"], regions["local"]
            got = [int(x) for x in got_out[lane, :len(want["out"])]]
            exp = [None if w is None else int(w) for w in want["out"]]
            if any(w is not None and g != w for g, w in zip(got, exp)):
                problems.append(f"{spec.form} lane {lane} inputs {[hex(v) for v in d['v']]}: "
                                f"got {[hex(g) for g in got]}, want {[None if w is None else hex(w) for w in exp]}")
            for space, words in regions.items():
                w_img = want["img"] if space == want.get("space") else d["img"]
                if words != [int(x) for x in w_img]:
                    problems.append(f"{spec.form} lane {lane}: {space} memory is "
                                    f"{[hex(x) for x in words]}, want {[hex(x) for x in w_img]}")
            if len(problems) > 5:
                return problems
    return problems


# ---- independent reference helpers ---------------------------------------------------------

def msk(w):
    return (1 << w) - 1


def sx(x, w):
    x &= msk(w)
    return x - (1 << w) if x >> (w - 1) else x


def fval(b):
    """binary32 bits -> the Python float of the same value (struct)."""
    return struct.unpack("<f", struct.pack("<I", b & M32))[0]


def fbits(v):
    """A numpy float32 (or Python float that is one) -> bits; NaN as the canonical NaN."""
    v = np.float32(v)
    return CANON_NAN if np.isnan(v) else int(v.view(np.uint32))


def is_nan(b):
    return (b & 0x7FFFFFFF) > 0x7F800000


def is_finite(b):
    return (b & 0x7F800000) != 0x7F800000


F_MAX = Fraction(fval(0x7F7FFFFF))
F_OVERFLOW = F_MAX + Fraction(2) ** 103          # from here on, round-to-nearest gives inf


def round_f32(q: Fraction, mode: str, zero_neg: bool = False) -> int:
    """The binary32 bits of the exact rational q rounded with rn/rz/rm/rp (q == 0: +0, or -0 if
    zero_neg; a nonzero q that rounds to zero keeps its sign). The candidates are the float32
    neighbours of float(q) (a correctly rounded double), compared exactly with q."""
    if q == 0:
        return SIGN32 if zero_neg else 0
    neg = q < 0
    with np.errstate(over="ignore"):
        c = np.float32(float(q)) if abs(q) < 2 ** 1000 else np.float32(np.inf if q > 0 else -np.inf)
    cands = {c}
    for direction in (np.inf, -np.inf):
        x = c
        for _ in range(2):
            with np.errstate(over="ignore"):
                x = np.nextafter(x, np.float32(direction))
            cands.add(x)
    cands = sorted({float(x) for x in cands})
    lo = max(x for x in cands if x <= q)
    hi = min(x for x in cands if x >= q)
    if lo == hi:
        r = lo
    elif mode == "rz":
        r = lo if not neg else hi
    elif mode == "rm":
        r = lo
    elif mode == "rp":
        r = hi
    else:
        if abs(q) >= F_OVERFLOW:
            r = math.copysign(math.inf, q)
        elif math.isinf(lo) or math.isinf(hi):
            r = hi if math.isinf(lo) else lo
        else:
            dl, dh = q - Fraction(lo), Fraction(hi) - q
            if dl != dh:
                r = lo if dl < dh else hi
            else:
                r = lo if fbits(lo) % 2 == 0 else hi
    if r == 0:
        return SIGN32 if neg else 0
    return int(np.float32(r).view(np.uint32))


F_EDGES = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FFFFFFF,
           0x7FC00000, 0xFFC00001, 0x7F800001, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000,
           0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3DCCCCCD, 0x3EAAAAAB, 0x40490FDB, 0x4B000000,
           0x4B7FFFFF, 0x4F000000, 0xCF000000, 0x4F800000, 0x5F000000, 0xDF000000, 0x3F000000,
           0x3FC00000, 0x40200000, 0xC0200000, 0xBF000000, 0x477FFF00, 0x437F0000, 0x43000000,
           0xC3010000, 0x3F7FFFFF, 0x3E800000, 0x00400000, 0x3F800001]


def rand_f32(rng):
    k = rng.random()
    if k < 0.4:
        return rng.choice(F_EDGES)
    if k < 0.85:
        return (rng.getrandbits(1) << 31) | (rng.randint(100, 154) << 23) | rng.getrandbits(23)
    return rng.getrandbits(32)


def rand_int(rng, w):
    M, H = msk(w), 1 << (w - 1)
    k = rng.random()
    if k < 0.4:
        return rng.choice([0, 1, 2, 3, 7, M, M - 1, H, H - 1, H + 1, 100, M - 99,
                           0x5555555555555555 & M, 0xAAAAAAAAAAAAAAAA & M])
    if k < 0.6:
        return rng.randint(0, 300)
    if k < 0.7:
        return (-rng.randint(1, 300)) & M
    return rng.getrandbits(w)


def _types(name):
    parts = name.split(".")
    return parts[0], [p for p in parts[1:] if p not in TYPE_BITS], [p for p in parts[1:] if p in TYPE_BITS]


def cls_of(t):
    if t == "pred":
        return "p"
    if t == "f32":
        return "f"
    if t == "f64":
        return "d"
    return {8: "16", 16: "16", 32: "32", 64: "64"}[TYPE_BITS[t]]


def extend(v, t, cls):
    """A t-typed result (t's width) as held in a register of class cls (wider: sign-extended for
    signed types, zero-extended otherwise)."""
    w = TYPE_BITS[t]
    v &= msk(w)
    if t[0] == "s" and CLASS_BITS[cls] > w:
        v = sx(v, w) & msk(CLASS_BITS[cls])
    return v


def val(x, t):
    """The integer a t-typed operand stands for (its low bits, signed or not)."""
    w = TYPE_BITS[t]
    return sx(x, w) if t[0] == "s" else x & msk(w)


def _lanewise(form, srcs, dsts, body, gen_vals, ref, launches=3):
    def gen(rng, launch_i, lane):
        return {"v": gen_vals(rng)}

    return Spec(form, body, srcs, dsts, gen, lambda d: ref(*d["v"]), launches)


def _int_cmp(op, a, b):
    return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b,
            "lo": a < b, "ls": a <= b, "hi": a > b, "hs": a >= b}[op]


def _f_cmp(op, x, y, t="f32"):
    a, b = (fval(x), fval(y)) if t == "f32" else (dval(x), dval(y))
    unordered = math.isnan(a) or math.isnan(b)
    if op == "num":
        return not unordered
    if op == "nan":
        return unordered
    if op.endswith("u") and op != "lo":
        return unordered or _int_cmp(op[:-1], a, b)
    return (not unordered) and _int_cmp(op, a, b)


def _bfind(x, t, shiftamt):
    w = TYPE_BITS[t]
    signed = t[0] == "s"
    sign = (x >> (w - 1)) & 1
    pos = None
    for i in range((w - 1) if signed else w, 0, -1):
        bit = (x >> (i - 1)) & 1
        if (signed and bit != sign) or (not signed and bit):
            pos = i - 1
            break
    if pos is None:
        return M32
    return (w - 1 - pos) if shiftamt else pos


def _bfe(a, b, c, t):
    w = TYPE_BITS[t]
    pos, ln = b & 0xFF, c & 0xFF
    k = max(0, min(ln, w - pos))
    field = (a >> pos) & msk(k) if pos < w else 0
    if t[0] == "s" and ln:
        if (a >> min(pos + ln - 1, w - 1)) & 1:
            field |= msk(w) ^ msk(k)
    return field


def _bfi(a, b, c, d, w):
    pos, ln = c & 0xFF, d & 0xFF
    k = max(0, min(ln, w - pos))
    m = (msk(k) << pos) & msk(w) if pos < w else 0
    return (b & ~m & msk(w)) | ((a << pos) & m)


def _prmt(a, b, c):
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    out = 0
    for i in range(4):
        sel = (c >> (4 * i)) & 0xF
        byte = src[sel & 7]
        if sel & 8:
            byte = 0xFF if byte >= 0x80 else 0x00
        out |= byte << (8 * i)
    return out


def _shf(a, b, c, d, mode):
    n = c & 31 if mode == "wrap" else min(c, 32)
    if d == "l":
        return b if n == 0 else ((b << n) | (a >> (32 - n))) & M32
    return a if n == 0 else b if n == 32 else ((a >> n) | (b << (32 - n))) & M32


def _fround_int(x, mode):
    """A finite float value rounded to an integer by rni/rzi/rmi/rpi (exact)."""
    q = Fraction(fval(x))
    return {"rni": round(q), "rzi": math.trunc(q), "rmi": math.floor(q), "rpi": math.ceil(q)}[mode]


def _f32_to_int(x, mode, t):
    lo, hi = (-(1 << (TYPE_BITS[t] - 1)), (1 << (TYPE_BITS[t] - 1)) - 1) if t[0] == "s" else (0, msk(TYPE_BITS[t]))
    if is_nan(x):       # PTX ISA cvt: NaN -> 0, or 1 << 63 for a 64-bit destination
        return 0 if TYPE_BITS[t] < 64 else 1 << 63
    if not is_finite(x):
        return hi if not x & SIGN32 else lo
    return min(max(_fround_int(x, mode), lo), hi)


def _fbin(op, x, y, mode):
    """add/sub/mul/div of binary32 bits, rounded by mode; special values from numpy."""
    a, b = np.float32(fval(x)), np.float32(fval(y))
    with np.errstate(all="ignore"):
        rn = {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b}[op]
    if mode == "rn" or not (is_finite(x) and is_finite(y)) or (op == "div" and not (y & 0x7FFFFFFF)):
        return fbits(rn)
    p, q = Fraction(fval(x)), Fraction(fval(y))
    if op == "sub":
        q, y = -q, y ^ SIGN32
        op = "add"
    if op == "add":
        e = p + q
        if p == 0 and q == 0:       # a sum of two zeros
            xs, ys = bool(x & SIGN32), bool(y & SIGN32)
            zneg = (xs and ys) or (xs != ys and mode == "rm")
        else:                       # exact cancellation
            zneg = mode == "rm"
        return round_f32(e, mode, zneg)
    e = p * q if op == "mul" else p / q
    return round_f32(e, mode, bool((x ^ y) & SIGN32))


def _ffma(x, y, z, mode):
    if not (is_finite(x) and is_finite(y) and is_finite(z)):
        with np.errstate(all="ignore"):
            return fbits(np.float64(fval(x)) * np.float64(fval(y)) + np.float64(fval(z)))
    p = Fraction(fval(x)) * Fraction(fval(y))
    q = p + Fraction(fval(z))
    if q == 0:
        if p == 0 and not z & 0x7FFFFFFF:       # a zero product plus a zero
            psign, zsign = bool((x ^ y) & SIGN32), bool(z & SIGN32)
            zneg = (psign and zsign) or (psign != zsign and mode == "rm")
        else:                                   # exact cancellation
            zneg = mode == "rm"
        return round_f32(q, mode, zneg)
    return round_f32(q, mode)


def _fminmax(op, x, y):
    if is_nan(x) and is_nan(y):
        return CANON_NAN
    if is_nan(x):
        return y
    if is_nan(y):
        return x
    a, b = fval(x), fval(y)
    if a == b:      # equal values: only +-0 differ; -0 is the smaller
        neg = bool(x & SIGN32) or bool(y & SIGN32) if op == "min" else bool(x & SIGN32) and bool(y & SIGN32)
        return (x if bool(x & SIGN32) == neg else y)
    return x if (a < b) == (op == "min") else y


def _ftz(b):
    return b & SIGN32 if (b & 0x7F800000) == 0 else b


def _testp(mode, x):
    e, m = (x >> 23) & 0xFF, x & 0x7FFFFF
    nan, inf = e == 255 and m != 0, e == 255 and m == 0
    return {"finite": not nan and not inf, "infinite": inf, "number": not nan, "notanumber": nan,
            # PTX ISA: "positive and negative zero are considered normal numbers"
            "normal": 0 < e < 255 or (e == 0 and m == 0), "subnormal": e == 0 and m != 0}[mode]


# ---- binary64 references (independent: struct, Python floats, fractions) -------------------
#
# The f64 NaN policy the interpreter documents (gpu_layers/interp/fp64.py, from the PTX ISA, the
# CUDA programming guide and envytools' hardware-tested DADD/DMUL/DFMA/DMNMX/F2F model), written
# out here as the expected behaviour:
#   * an invalid operation (inf - inf, 0 * inf, 0 / 0, inf / inf, sqrt of a negative) makes
#     0xFFF8000000000000;
#   * a NaN operand comes out with its sign and payload and the quiet bit (bit 51) set; when
#     several are NaN: add/sub/mul/div take b's, then a's (sub does not negate a NaN b); fma a*b+c
#     takes b's, then c's, then a's; sqrt and rcp their operand's;
#   * min/max: the other operand when one is NaN, b's NaN (quieted) when both are; -0 < +0;
#   * abs/neg: a NaN passes with its sign, quieted; copysign is a bit operation;
#   * cvt f32 <-> f64: a NaN keeps its sign and payload (shifted) and gets the quiet bit;
#     f64 NaN -> integer of width w: 1 << (w - 1) (PTX ISA cvt); cvt.rni..f64.f64: quieted;
#     cvt.sat.f64.f64: NaN -> +0.

D_SIGN = 1 << 63
D_INF = 0x7FF0000000000000
D_QUIET = 1 << 51
D_FRAC = (1 << 52) - 1
D_GEN_NAN = 0xFFF8000000000000
D_MAX = 0x7FEFFFFFFFFFFFFF
D_ONE = 0x3FF0000000000000
TWO = Fraction(2)


def dval(b):
    """binary64 bits -> the Python float (struct; NaN payloads are not read through this)."""
    return struct.unpack("<d", struct.pack("<Q", b & M64))[0]


def dbits(v):
    """A Python float that is not NaN -> its binary64 bits."""
    assert v == v
    return struct.unpack("<Q", struct.pack("<d", v))[0]


def d_is_nan(b):
    return (b & ~D_SIGN) > D_INF


def d_is_inf(b):
    return (b & ~D_SIGN) == D_INF


def d_is_finite(b):
    return (b & D_INF) != D_INF


def d_is_zero(b):
    return (b & ~D_SIGN) == 0


def d_neg(b):
    return bool(b & D_SIGN)


def round_f64(q: Fraction, mode: str, zero_neg: bool = False) -> int:
    """The binary64 bits of the exact rational q rounded with rn/rz/rm/rp: q == 0 gives +0, or -0
    if zero_neg; a nonzero q keeps its sign (also when it rounds to zero). The quantum is
    2^(e - 52) for 2^e <= |q| < 2^(e + 1), never below 2^-1074 (subnormals); an overflowing
    result is inf or the largest finite value, by mode."""
    if q == 0:
        return D_SIGN if zero_neg else 0
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if TWO ** e > a:
        e -= 1
    quantum = TWO ** max(e - 52, -1074)
    scaled = a / quantum
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem:
        if mode == "rn":
            n += rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1)
        elif mode == "rp":
            n += not neg
        elif mode == "rm":
            n += neg
        else:
            assert mode == "rz", mode
    mag = n * quantum
    if mag >= TWO ** 1024:
        to_inf = mode == "rn" or mode == ("rm" if neg else "rp")
        bits = D_INF if to_inf else D_MAX
    else:
        bits = dbits(float(mag))          # exactly representable: float() is exact
    return bits | (D_SIGN if neg else 0)


def _dq(b):
    return Fraction(dval(b))


def _zero_sum_neg(xneg, yneg, mode):
    """The sign of an exact zero sum x + y (IEEE 754): kept if both agree, else -0 only in rm."""
    return (xneg and yneg) or (xneg != yneg and mode == "rm")


def _d_add(x, y, mode):
    if d_is_nan(y):
        return y | D_QUIET
    if d_is_nan(x):
        return x | D_QUIET
    if not (d_is_finite(x) and d_is_finite(y)):
        if d_is_inf(x) and d_is_inf(y) and d_neg(x) != d_neg(y):
            return D_GEN_NAN
        return x if d_is_inf(x) else y
    if mode == "rn":
        return dbits(dval(x) + dval(y))
    return round_f64(_dq(x) + _dq(y), mode, _zero_sum_neg(d_neg(x), d_neg(y), mode))


def _d_sub(x, y, mode):
    if d_is_nan(y):
        return y | D_QUIET          # not negated
    return _d_add(x, y ^ D_SIGN, mode)


def _d_mul(x, y, mode):
    if d_is_nan(y):
        return y | D_QUIET
    if d_is_nan(x):
        return x | D_QUIET
    sign = (x ^ y) & D_SIGN
    if not (d_is_finite(x) and d_is_finite(y)):
        return D_GEN_NAN if d_is_zero(x) or d_is_zero(y) else sign | D_INF
    if mode == "rn":
        return dbits(dval(x) * dval(y))
    return round_f64(_dq(x) * _dq(y), mode, bool(sign))


def _d_div(x, y, mode):
    if d_is_nan(y):
        return y | D_QUIET
    if d_is_nan(x):
        return x | D_QUIET
    sign = (x ^ y) & D_SIGN
    if d_is_inf(x):
        return D_GEN_NAN if d_is_inf(y) else sign | D_INF
    if d_is_inf(y):
        return sign
    if d_is_zero(y):
        return D_GEN_NAN if d_is_zero(x) else sign | D_INF
    if mode == "rn":
        return dbits(dval(x) / dval(y))
    return round_f64(_dq(x) / _dq(y), mode, bool(sign))


def _d_fma(x, y, z, mode):
    for v in (y, z, x):
        if d_is_nan(v):
            return v | D_QUIET
    psign = (x ^ y) & D_SIGN
    if d_is_inf(x) or d_is_inf(y):
        if d_is_zero(x) or d_is_zero(y):
            return D_GEN_NAN
        if d_is_inf(z) and (z & D_SIGN) != psign:
            return D_GEN_NAN
        return psign | D_INF
    if d_is_inf(z):
        return z
    q = _dq(x) * _dq(y) + _dq(z)        # exact, rounded once (all modes, rn included)
    return round_f64(q, mode, _zero_sum_neg(bool(psign), d_neg(z), mode))


def _d_sqrt(x, mode):
    if d_is_nan(x):
        return x | D_QUIET
    if d_is_zero(x):
        return x
    if d_neg(x):
        return D_GEN_NAN
    if d_is_inf(x):
        return x
    v = dval(x)
    r = math.sqrt(v)                    # correctly rounded (rn)
    if mode == "rn":
        return dbits(r)
    q = Fraction(v)
    lo = r                              # the largest float whose square is <= x
    while Fraction(lo) ** 2 > q:
        lo = math.nextafter(lo, 0.0)
    while Fraction(math.nextafter(lo, math.inf)) ** 2 <= q:
        lo = math.nextafter(lo, math.inf)
    exact = Fraction(lo) ** 2 == q
    return dbits(lo if exact or mode in ("rz", "rm") else math.nextafter(lo, math.inf))


def _d_minmax(op, x, y):
    if d_is_nan(x) and d_is_nan(y):
        return y | D_QUIET
    if d_is_nan(x):
        return y
    if d_is_nan(y):
        return x
    a, b = dval(x), dval(y)
    if a == b:          # only +-0 differ: -0 is the smaller
        want_neg = (d_neg(x) or d_neg(y)) if op == "min" else (d_neg(x) and d_neg(y))
        return x if d_neg(x) == want_neg else y
    return x if (a < b) == (op == "min") else y


def _d_testp(mode, x):
    e, m = (x >> 52) & 0x7FF, x & D_FRAC
    nan, inf = e == 0x7FF and m != 0, e == 0x7FF and m == 0
    return {"finite": e != 0x7FF, "infinite": inf, "number": not nan, "notanumber": nan,
            # PTX ISA: "positive and negative zero are considered normal numbers"
            "normal": 0 < e < 0x7FF or (e == 0 and m == 0), "subnormal": e == 0 and m != 0}[mode]


def _dround_int(x, mode):
    """A finite binary64 value rounded to an integer by rni/rzi/rmi/rpi (exact)."""
    q = _dq(x)
    return {"rni": round(q), "rzi": math.trunc(q), "rmi": math.floor(q), "rpi": math.ceil(q)}[mode]


def _d_to_int(x, mode, t):
    w = TYPE_BITS[t]
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if t[0] == "s" else (0, msk(w))
    if d_is_nan(x):
        return 1 << (w - 1)
    if d_is_inf(x):
        return lo if d_neg(x) else hi
    return min(max(_dround_int(x, mode), lo), hi)


def _f32_to_f64(x):
    if is_nan(x):
        return ((x >> 31) << 63) | D_INF | D_QUIET | ((x & 0x7FFFFF) << 29)
    return dbits(fval(x))           # exact (struct widens binary32 to binary64)


def _f64_to_f32(x, mode):
    s = (x >> 63) << 31
    if d_is_nan(x):
        return s | 0x7FC00000 | ((x & D_FRAC) >> 29)
    if d_is_inf(x):
        return s | 0x7F800000
    return round_f32(_dq(x), mode, d_neg(x))


def _f64_edges():
    d = dbits
    return [0, D_SIGN, D_ONE, D_ONE | D_SIGN, D_INF, D_INF | D_SIGN,
            0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000ABC, 0xFFFC0000DEADBEEF,   # quiet NaNs
            0x7FF0000000000001, 0xFFF4000000000123, 0x7FF7FFFFFFFFFFFF,                       # signalling
            1, D_SIGN | 1, 0x000FFFFFFFFFFFFF, 0x0008000000000000, 0x0010000000000000,
            D_SIGN | 0x0010000000000000, D_MAX, D_MAX | D_SIGN, 0x7FE0000000000000, 0x7FEFFFFFFFFFFFFE,
            d(0.5), d(1.5), d(2.5), d(-2.5), d(-0.5), d(0.1), d(1 / 3), d(math.pi), d(1 + 2 ** -52),
            d(1 - 2 ** -53), d(2.0 ** 52), d(2.0 ** 52 - 0.5), d(2.0 ** 53), d(2.0 ** 53 + 2),
            d(2.0 ** 31), d(-2.0 ** 31 - 1), d(4294967295.5), d(2.0 ** 63), d(-2.0 ** 63), d(2.0 ** 64),
            d(9223372036854774784.0), d(-9223372036854775808.5 - 1024),
            d(3.4028234663852886e38), d(2.0 ** 128 - 2.0 ** 103), d(2.0 ** 128), d(2.0 ** -126),
            d(2.0 ** -149), d(2.0 ** -150), d(3 * 2.0 ** -150), d(1 + 2 ** -24), d(1 + 3 * 2 ** -24)]


D_EDGES = _f64_edges()


def rand_f64(rng):
    k = rng.random()
    if k < 0.35:
        return rng.choice(D_EDGES)
    if k < 0.85:
        r = rng.random()
        e = rng.randint(1, 80) if r < 0.12 else rng.randint(1960, 2046) if r < 0.24 else rng.randint(963, 1083)
        return (rng.getrandbits(1) << 63) | (e << 52) | rng.getrandbits(52)
    return rng.getrandbits(64)


# ---- builders, one per handler family (Form.kind) ------------------------------------------

def _gen_for(t, role="x"):
    if t == "pred":
        return lambda rng: rng.getrandbits(1)
    if t == "f32":
        return rand_f32
    if t == "f64":
        return rand_f64
    w = TYPE_BITS[t]
    if role == "shift":
        return lambda rng: rng.choice([0, 1, w - 1, w, w + 1, 2 * w, 31, 32, 33, 63, 64, M32, SIGN32,
                                       rng.randint(0, w)])
    if role == "bitpos":
        return lambda rng: rng.choice([0, 1, w - 1, w, w + 3, 255, 0x1200 | rng.randint(0, w),
                                       rng.randint(0, w + 8), rng.randint(0, w)])
    return lambda rng: rand_int(rng, w)


def build_int(name, form):
    op, mods, types = _types(name)
    t = types[0]
    w = TYPE_BITS[t]
    M = msk(w)
    c = cls_of(t)
    g = _gen_for(t)
    k = form.kind

    def two(ref):
        return _lanewise(name, [c, c], [c], "\t%s \t{d0}, {s0}, {s1};\n" % name, lambda r: [g(r), g(r)], ref)

    if k == "iadd":
        return two(lambda a, b: [(a + b) & M])
    if k == "isub":
        return two(lambda a, b: [(a - b) & M])
    if k in ("imin", "imax"):
        pick = min if k == "imin" else max
        return two(lambda a, b: [pick(val(a, t), val(b, t)) & M])
    if k in ("idiv", "irem"):
        def gen(r):
            a, b = g(r), g(r)
            if val(b, t) == 0 or (t[0] == "s" and val(a, t) == -(1 << (w - 1)) and val(b, t) == -1):
                b = 3
            return [a, b]

        def ref(a, b):
            x, y = val(a, t), val(b, t)
            q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
            return [(q if k == "idiv" else x - q * y) & M]
        return _lanewise(name, [c, c], [c], "\t%s \t{d0}, {s0}, {s1};\n" % name, gen, ref)
    if k in ("imul", "imad"):
        mode = mods[0]
        wide = mode == "wide"
        dc = {16: "32", 32: "64"}[w] if wide else c
        srcs = [c, c] + ([dc] if k == "imad" else [])
        gens = [g, g] + ([_gen_for({"32": "u32", "64": "u64"}.get(dc, t))] if k == "imad" else [])

        def ref(a, b, z=0):
            p = val(a, t) * val(b, t)
            r = (p & M) if mode == "lo" else ((p >> w) & M) if mode == "hi" else p & msk(2 * w)
            return [(r + z) & (msk(2 * w) if wide else M)]
        ops = "{d0}, {s0}, {s1}" + (", {s2}" if k == "imad" else "")
        return _lanewise(name, srcs, [dc], f"\t{name} \t{ops};\n", lambda r: [f(r) for f in gens], ref)
    if k in ("imul24", "imad24"):
        def ref(a, b, z=0):
            a24, b24 = (sx(a, 24), sx(b, 24)) if t[0] == "s" else (a & 0xFFFFFF, b & 0xFFFFFF)
            p = a24 * b24
            return [(((p >> 16) if mods[0] == "hi" else p) + z) & M32]
        n = 2 if k == "imul24" else 3
        ops = "{d0}, {s0}, {s1}" + (", {s2}" if n == 3 else "")
        return _lanewise(name, [c] * n, [c], f"\t{name} \t{ops};\n", lambda r: [g(r) for _ in range(n)], ref)
    if k == "sad":
        return _lanewise(name, [c] * 3, [c], "\t%s \t{d0}, {s0}, {s1}, {s2};\n" % name,
                         lambda r: [g(r), g(r), g(r)], lambda a, b, z: [(z + abs(val(a, t) - val(b, t))) & M])
    if k == "ineg":
        return _lanewise(name, [c], [c], "\t%s \t{d0}, {s0};\n" % name, lambda r: [g(r)],
                         lambda a: [(-val(a, t)) & M])
    if k == "iabs":
        def gen(r):
            a = g(r)
            return [a if val(a, t) != -(1 << (w - 1)) else 5]      # |MIN| is not representable
        return _lanewise(name, [c], [c], "\t%s \t{d0}, {s0};\n" % name, gen, lambda a: [abs(val(a, t)) & M])
    if k == "isat":
        lo, hi = -(1 << 31), (1 << 31) - 1
        sign = 1 if op == "add" else -1
        return two(lambda a, b: [min(max(sx(a, 32) + sign * sx(b, 32), lo), hi) & M32])
    raise AssertionError(k)


def build_bits(name, form):
    op, mods, types = _types(name)
    t = types[0]
    w = TYPE_BITS[t]
    M = msk(w)
    c = cls_of(t)
    g = _gen_for(t)
    k = form.kind
    one = "\t%s \t{d0}, {s0};\n" % name
    if k == "logic":
        f = {"and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b}[op]
        return _lanewise(name, [c, c], [c], "\t%s \t{d0}, {s0}, {s1};\n" % name, lambda r: [g(r), g(r)],
                         lambda a, b: [f(a, b)])
    if k == "not":
        return _lanewise(name, [c], [c], one, lambda r: [g(r)], lambda a: [(~a) & (1 if t == "pred" else M)])
    if k == "cnot":
        return _lanewise(name, [c], [c], one, lambda r: [g(r)], lambda a: [1 if a == 0 else 0])
    if k in ("shl", "shr"):
        gs = _gen_for("u32", "shift")

        def ref(a, n):
            if k == "shl":
                return [(a << n) & M if n < w else 0]
            if t[0] == "s":
                return [(sx(a, w) >> min(n, w)) & M]
            return [a >> n if n < w else 0]
        return _lanewise(name, [c, "32"], [c], "\t%s \t{d0}, {s0}, {s1};\n" % name, lambda r: [g(r), gs(r)], ref)
    if k == "popc":
        return _lanewise(name, [c], ["32"], one, lambda r: [g(r)], lambda a: [bin(a).count("1")])
    if k == "clz":
        return _lanewise(name, [c], ["32"], one, lambda r: [g(r)],
                         lambda a: [len(f"{a:0{w}b}") - len(f"{a:0{w}b}".lstrip("0"))])
    if k == "mstep":                 # machine code only: 2a + (a's top bit ? b : 0)
        return _lanewise(name, [c, c], [c], "\t%s \t{d0}, {s0}, {s1};\n" % name, lambda r: [g(r), g(r)],
                         lambda a, b: [(2 * a + (b if a >> (w - 1) else 0)) & M])
    if k == "dstep":                 # machine code only: t = 2a; t >= b ? t - b : t
        return _lanewise(name, [c, c], [c], "\t%s \t{d0}, {s0}, {s1};\n" % name, lambda r: [g(r), g(r)],
                         lambda a, b: [(2 * a) % (M + 1) - b if (2 * a) % (M + 1) >= b else (2 * a) % (M + 1)])
    if k == "mquad":                 # machine code only: 4a + (0, L, 2L, H)[a >> 62]
        return _lanewise(name, [c, c], [c], "\t%s \t{d0}, {s0}, {s1};\n" % name, lambda r: [g(r), g(r)],
                         lambda a, b: [(4 * a + (0, b & 0xFFFFFFFF, 2 * (b & 0xFFFFFFFF), b >> 32)[a >> 62]) & M])
    if k == "mtrip":                 # machine code only: ((2a + b) mod 2^32) << 32 | (a mod 2^32)
        return _lanewise(name, [c, c], [c], "\t%s \t{d0}, {s0}, {s1};\n" % name, lambda r: [g(r), g(r)],
                         lambda a, b: [((2 * a + b) & 0xFFFFFFFF) << 32 | (a & 0xFFFFFFFF)])
    if k == "brev":
        return _lanewise(name, [c], [c], one, lambda r: [g(r)], lambda a: [int(f"{a:0{w}b}"[::-1], 2)])
    if k == "bfind":
        return _lanewise(name, [c], ["32"], one, lambda r: [g(r)], lambda a: [_bfind(a, t, "shiftamt" in mods)])
    if k == "bfe":
        gp = _gen_for("u32", "bitpos")
        return _lanewise(name, [c, "32", "32"], [c], "\t%s \t{d0}, {s0}, {s1}, {s2};\n" % name,
                         lambda r: [g(r), gp(r), gp(r)], lambda a, b, z: [_bfe(a, b, z, t)])
    if k == "bfi":
        gp = _gen_for("u32", "bitpos")
        return _lanewise(name, [c, c, "32", "32"], [c], "\t%s \t{d0}, {s0}, {s1}, {s2}, {s3};\n" % name,
                         lambda r: [g(r), g(r), gp(r), gp(r)], lambda a, b, p, n: [_bfi(a, b, p, n, w)])
    if k == "prmt":
        return _lanewise(name, ["32"] * 3, ["32"], "\t%s \t{d0}, {s0}, {s1}, {s2};\n" % name,
                         lambda r: [g(r), g(r), r.getrandbits(32)], lambda a, b, z: [_prmt(a, b, z)])
    if k == "lop3":
        # two tables: 0xCA is "a ? b : c" bit by bit, 0x96 is a ^ b ^ c
        body = "\t%s \t{d0}, {s0}, {s1}, {s2}, 0xCA;\n\t%s \t{d1}, {s0}, {s1}, {s2}, 0x96;\n" % (name, name)
        return _lanewise(name, ["32"] * 3, ["32", "32"], body, lambda r: [g(r), g(r), g(r)],
                         lambda a, b, z: [(a & b) | (~a & z & M32), a ^ b ^ z])
    if k == "shf":
        d, mode = mods
        gs = _gen_for("u32", "shift")
        return _lanewise(name, ["32"] * 3, ["32"], "\t%s \t{d0}, {s0}, {s1}, {s2};\n" % name,
                         lambda r: [g(r), g(r), gs(r)], lambda a, b, n: [_shf(a, b, n, d, mode)])
    raise AssertionError(k)


def build_select(name, form):
    op, mods, types = _types(name)
    k = form.kind
    t = types[0]
    c = cls_of(t)
    g = _gen_for(t)
    if k == "setp":
        cmp = mods[0]
        boolop = mods[1] if len(mods) > 1 else None

        def test(a, b):
            return _f_cmp(cmp, a, b, t) if t in ("f32", "f64") else _int_cmp(cmp, val(a, t), val(b, t))

        def gen(r):
            a, b = g(r), g(r)
            if r.random() < 0.25:
                b = a
            elif t == "f64" and r.random() < 0.15:      # +0 == -0; a NaN against itself
                a, b = r.choice([(0, D_SIGN), (D_SIGN, 0), (0x7FF8000000000000, 0x7FF8000000000000)])
            return [a, b, r.getrandbits(1)]
        if boolop is None:
            return _lanewise(name, [c, c], ["p"], "\t%s \t{d0}, {s0}, {s1};\n" % name, lambda r: gen(r)[:2],
                             lambda a, b: [int(test(a, b))])
        f = {"and": lambda x, y: x & y, "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y}[boolop]
        return _lanewise(name, [c, c, "p"], ["p", "p"], "\t%s \t{d0}|{d1}, {s0}, {s1}, {s2};\n" % name, gen,
                         lambda a, b, z: [f(int(test(a, b)), z), f(1 - int(test(a, b)), z)])
    if k == "selp":
        return _lanewise(name, [c, c, "p"], [c], "\t%s \t{d0}, {s0}, {s1}, {s2};\n" % name,
                         lambda r: [g(r), g(r), r.getrandbits(1)], lambda a, b, p: [a if p else b])
    if k == "slct":
        ct = types[1]
        gc = _gen_for(ct)

        def ref(a, b, z):
            ok = fval(z) >= 0.0 if ct == "f32" else sx(z, 32) >= 0     # NaN >= 0 is false
            return [a if ok else b]
        return _lanewise(name, [c, c, cls_of(ct)], [c], "\t%s \t{d0}, {s0}, {s1}, {s2};\n" % name,
                         lambda r: [g(r), g(r), gc(r)], ref)
    if k == "mov":
        body = "\t%s \t{d0}, {s0};\n" % name
        dsts = [c]
        ref = (lambda a: [a])
        if t in ("b32", "b64"):     # also unpack into halves and pack them back
            h = "16" if t == "b32" else "32"
            body += "\t%s \t{{{d1}, {d2}}}, {s0};\n\t%s \t{d3}, {{{d2}, {d1}}};\n" % (name, name)
            dsts = [c, h, h, c]
            hw = CLASS_BITS[h]

            def ref(a):
                lo, hi = a & msk(hw), a >> hw
                return [a, lo, hi, (lo << hw) | hi]
        return _lanewise(name, [c], dsts, body, lambda r: [g(r)], ref)
    raise AssertionError(k)


def build_float(name, form):
    op, mods, types = _types(name)
    k = form.kind
    mode = next((m for m in mods if m in ("rn", "rz", "rm", "rp")), "rn")
    g = rand_f32
    two = "\t%s \t{d0}, {s0}, {s1};\n" % name
    one = "\t%s \t{d0}, {s0};\n" % name
    if k == "fbin":
        return _lanewise(name, ["f", "f"], ["f"], two, lambda r: [g(r), g(r)], lambda a, b: [_fbin(op, a, b, mode)])
    if k == "fminmax":
        def gen(r):
            a, b = g(r), g(r)
            if r.random() < 0.2:
                a, b = r.choice([(0, SIGN32), (SIGN32, 0), (a, a)])
            return [a, b]
        return _lanewise(name, ["f", "f"], ["f"], two, gen, lambda a, b: [_fminmax(op, a, b)])
    if k == "ffma":
        def gen(r):
            a, b, z = g(r), g(r), g(r)
            if r.random() < 0.4 and is_finite(a) and is_finite(b):      # near cancellation
                with np.errstate(all="ignore"):
                    z = fbits(-(np.float32(fval(a)) * np.float32(fval(b)))) ^ r.getrandbits(2)
            return [a, b, z]
        return _lanewise(name, ["f"] * 3, ["f"], "\t%s \t{d0}, {s0}, {s1}, {s2};\n" % name, gen,
                         lambda a, b, z: [_ffma(a, b, z, mode)])
    if k == "funary":
        def ref(a):
            x = np.float32(fval(a))
            with np.errstate(all="ignore"):
                return [fbits(np.sqrt(x) if op == "sqrt" else np.float32(1.0) / x)]
        return _lanewise(name, ["f"], ["f"], one, lambda r: [g(r)], ref)
    if k == "fbits":      # abs/neg touch the sign bit only (NaNs included)
        return _lanewise(name, ["f"], ["f"], one, lambda r: [g(r)],
                         lambda a: [a & 0x7FFFFFFF if op == "abs" else a ^ SIGN32])
    if k == "copysign":
        return _lanewise(name, ["f", "f"], ["f"], two, lambda r: [g(r), g(r)],
                         lambda a, b: [(b & 0x7FFFFFFF) | (a & SIGN32)])
    if k == "testp":
        return _lanewise(name, ["f"], ["p"], one, lambda r: [g(r)], lambda a: [int(_testp(mods[0], a))])
    raise AssertionError(k)


def build_cvt(name, form):
    op, mods, (dt, st) = _types(name)
    rnd = next((m for m in mods if m.startswith("r")), None)
    sat = "sat" in mods
    dc, sc = cls_of(dt), cls_of(st)
    body = "\t%s \t{d0}, {s0};\n" % name
    if st != "f32" and dt != "f32":
        g = _gen_for({8: "u16", 16: "u16", 32: "u32", 64: "u64"}[TYPE_BITS[st]])

        def ref(a):
            v = val(a, st)
            if sat:
                w = TYPE_BITS[dt]
                lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if dt[0] == "s" else (0, msk(w))
                v = min(max(v, lo), hi)
            return [extend(v, dt, dc)]
        return _lanewise(name, [sc], [dc], body, lambda r: [g(r)], ref)
    if dt == "f32" and st != "f32":
        g = _gen_for({8: "u16", 16: "u16", 32: "u32", 64: "u64"}[TYPE_BITS[st]])

        def gen(r):
            x = g(r)
            if r.random() < 0.3:        # values with more than 24 significant bits, and ties
                x = (r.getrandbits(TYPE_BITS[st]) | 1) if r.random() < 0.5 else (0x1000001 << r.randint(0, 30))
            return [x & msk(CLASS_BITS[sc])]
        return _lanewise(name, [sc], [dc], body, gen, lambda a: [round_f32(Fraction(val(a, st)), rnd)])

    def gen_f(r):
        x = rand_f32(r)
        if r.random() < 0.4:          # halves and values near the integer ranges' ends
            x = fbits(np.float32(r.choice([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 127.5, -128.5, 255.5, 32767.5,
                                           65535.0, 2147483520.0, -2147483648.0, 4294967040.0])))
        return [x]
    if dt != "f32":
        return _lanewise(name, ["f"], [dc], body, gen_f, lambda a: [extend(_f32_to_int(a, rnd, dt) & msk(TYPE_BITS[dt]), dt, dc)])
    if sat:       # cvt.sat.f32.f32: clamp to [0, 1], NaN -> +0 (-0.0 left out: not pinned down here)
        def gen_s(r):
            x = gen_f(r)[0]
            return [x if x != SIGN32 else 0x3F000000]

        def ref_s(a):
            if is_nan(a):
                return [0]
            return [fbits(min(max(np.float32(fval(a)), np.float32(0.0)), np.float32(1.0)))]
        return _lanewise(name, ["f"], ["f"], body, gen_s, ref_s)

    def ref_r(a):          # round to an integral value; NaN canonical, inf kept, zero keeps its sign
        if is_nan(a):
            return [CANON_NAN]
        if not is_finite(a):
            return [a]
        v = _fround_int(a, rnd)
        return [a & SIGN32 if v == 0 else fbits(np.float32(v))]
    return _lanewise(name, ["f"], ["f"], body, gen_f, ref_r)



def _d_near(r, a, op):
    """An operand that makes a ties / cancels / nearly cancels with the finite a under op."""
    e = (a >> 52) & 0x7FF
    k = r.random()
    if op in ("add", "sub") and k < 0.4 and e > 60:       # half an ulp of a (a tie), or about it
        frac = r.choice([0, 1, D_FRAC, r.getrandbits(52)])
        return (r.getrandbits(1) << 63) | ((e - 53 - r.randint(0, 1)) << 52) | frac
    if k < 0.7:                                           # x - x, x + (-x), and 1 ulp away
        b = r.choice([a, a ^ D_SIGN])
        return (b + r.choice([-1, 0, 1])) & M64 if e else b
    return rand_f64(r)


def build_f64(name, form):
    op, mods, types = _types(name)
    k = form.kind
    mode = next((m for m in mods if m in ("rn", "rz", "rm", "rp")), "rn")
    g = rand_f64
    two = "\t%s \t{d0}, {s0}, {s1};\n" % name
    one = "\t%s \t{d0}, {s0};\n" % name
    if k == "dbin":
        f = {"add": _d_add, "sub": _d_sub, "mul": _d_mul, "div": _d_div}[op]

        def gen(r):
            a = g(r)
            b = _d_near(r, a, op) if d_is_finite(a) and r.random() < 0.35 else g(r)
            return [a, b]
        return _lanewise(name, ["d", "d"], ["d"], two, gen, lambda a, b: [f(a, b, mode)])
    if k == "dfma":
        def gen(r):
            a, b, z = g(r), g(r), g(r)
            if r.random() < 0.4 and d_is_finite(a) and d_is_finite(b):     # near cancellation
                p = dval(a) * dval(b)
                if math.isfinite(p):
                    z = (dbits(-p) + r.choice([-2, -1, 0, 0, 1, 2])) & M64
            return [a, b, z]
        return _lanewise(name, ["d"] * 3, ["d"], "\t%s \t{d0}, {s0}, {s1}, {s2};\n" % name, gen,
                         lambda a, b, z: [_d_fma(a, b, z, mode)])
    if k == "dunary":
        def gen(r):
            a = g(r)
            u = r.random()
            if op == "sqrt" and u < 0.6:
                a &= ~D_SIGN
                if u < 0.2:                         # a perfect square (of a 26-bit significand)
                    m = (1 << 25) | r.getrandbits(25)
                    a = dbits(float(m * m) * 2.0 ** (2 * r.randint(-300, 250)))
            if op == "rcp" and u < 0.2:             # exact reciprocals, subnormal results, overflow
                a = r.choice([dbits(2.0 ** r.randint(-1074, 1023)), 0x7FE0000000000000 | r.getrandbits(52),
                              r.getrandbits(50), D_SIGN | 3])
            return [a]
        f = _d_sqrt if op == "sqrt" else (lambda x, m: _d_div(D_ONE, x, m))
        return _lanewise(name, ["d"], ["d"], one, gen, lambda a: [f(a, mode)])
    if k == "dminmax":
        def gen(r):
            a, b = g(r), g(r)
            if r.random() < 0.25:
                a, b = r.choice([(0, D_SIGN), (D_SIGN, 0), (a, a), (0x7FF0000000000001, 0xFFF8000000000ABC)])
            return [a, b]
        return _lanewise(name, ["d", "d"], ["d"], two, gen, lambda a, b: [_d_minmax(op, a, b)])
    if k == "dbits":
        def ref(a):
            if d_is_nan(a):
                return [a | D_QUIET]
            return [a & ~D_SIGN if op == "abs" else a ^ D_SIGN]
        return _lanewise(name, ["d"], ["d"], one, lambda r: [g(r)], ref)
    if k == "dcopysign":
        return _lanewise(name, ["d", "d"], ["d"], two, lambda r: [g(r), g(r)],
                         lambda a, b: [(b & ~D_SIGN) | (a & D_SIGN)])
    if k == "dtestp":
        return _lanewise(name, ["d"], ["p"], one, lambda r: [g(r)], lambda a: [int(_d_testp(mods[0], a))])
    raise AssertionError(k)


_D_INT_EDGES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, 127.5, -128.5, 128.0, -129.0, 255.5,
                256.0, 32767.5, -32768.5, 65535.5, 65536.0, 2147483647.5, -2147483648.5, 2147483648.0,
                4294967295.5, 4294967296.0, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 9223372036854774784.0,
                18446744073709549568.0, -9223372036854777856.0, 1e300, -1e300, 5e-324, -5e-324, -0.0,
                4503599627370495.5, -4503599627370495.5]


def build_dcvt(name, form):
    op, mods, (dt, st) = _types(name)
    rnd = next((m for m in mods if m.startswith("r")), None)
    dc, sc = cls_of(dt), cls_of(st)
    body = "\t%s \t{d0}, {s0};\n" % name
    if st == "f32":                                     # cvt.f64.f32: exact
        return _lanewise(name, ["f"], ["d"], body, lambda r: [rand_f32(r)], lambda a: [_f32_to_f64(a)])
    if dt == "f32":                                     # cvt.{rn,rz,rm,rp}.f32.f64
        def gen(r):
            x = rand_f64(r)
            if r.random() < 0.5:        # in binary32's range, ties and near ties in the low 29 bits
                e = r.randint(1023 - 152, 1023 + 128)
                x = (r.getrandbits(1) << 63) | (e << 52) | (r.getrandbits(23) << 29) | \
                    r.choice([0, 1 << 28, (1 << 28) + 1, (1 << 28) - 1, (1 << 29) - 1, r.getrandbits(29)])
            return [x]
        return _lanewise(name, ["d"], ["f"], body, gen, lambda a: [_f64_to_f32(a, rnd)])
    if dt == "f64" and st != "f64":                     # integer -> f64
        w = TYPE_BITS[st]
        g = _gen_for({8: "u16", 16: "u16", 32: "u32", 64: "u64"}[w])

        def gen(r):
            x = g(r)
            if w == 64 and r.random() < 0.5:    # more than 53 significant bits, ties
                x = r.choice([r.getrandbits(64) | 1, ((1 << 53) + 1) << r.randint(0, 10),
                              ((((1 << 53) + 1) << r.randint(1, 10)) + r.choice([1, -1])),
                              ((1 << 53) + 3) << r.randint(0, 10)]) & M64
            return [x & msk(CLASS_BITS[sc])]
        return _lanewise(name, [sc], ["d"], body, gen, lambda a: [round_f64(Fraction(val(a, st)), rnd)])

    def gen_d(r):
        x = rand_f64(r)
        k = r.random()
        if k < 0.4:
            x = dbits(r.choice(_D_INT_EDGES))
        elif k < 0.55:                  # a few significant bits after the binary point
            x = dbits(r.randint(-(1 << 40), 1 << 40) / 2.0 ** r.randint(0, 12))
        return [x]
    if dt != "f64":                                     # f64 -> integer (saturating)
        return _lanewise(name, ["d"], [dc], body, gen_d,
                         lambda a: [extend(_d_to_int(a, rnd, dt) & msk(TYPE_BITS[dt]), dt, dc)])
    if rnd:                                             # f64 -> integral f64
        def ref_r(a):
            if d_is_nan(a):
                return [a | D_QUIET]
            if d_is_inf(a):
                return [a]
            v = _dround_int(a, rnd)
            return [a & D_SIGN if v == 0 else dbits(float(v))]
        return _lanewise(name, ["d"], ["d"], body, gen_d, ref_r)

    # cvt.sat.f64.f64: clamp to [0, 1], NaN -> +0 (-0.0 left out, as for f32: not pinned down here)
    def gen_s(r):
        x = gen_d(r)[0]
        if r.random() < 0.3:
            x = dbits(r.random() * 1.5)
        return [x if x != D_SIGN else dbits(0.5)]

    def ref_s(a):
        if d_is_nan(a):
            return [0]
        v = dval(a)
        return [0 if v <= 0 else D_ONE if v >= 1 else a]
    return _lanewise(name, ["d"], ["d"], body, gen_s, ref_s)


def _space_of(mods):
    return next((m for m in mods if m in ("global", "shared", "local", "param")), "")


def _addr_setup(space):
    """%rd58 = the address of the lane's 32-byte region in `space` (generic: global on even
    lanes, the shared window on odd ones)."""
    if space == "global":
        return "\tmov.b64 \t%rd58, %rd62;\n"
    if space == "shared":
        return "\tmov.b64 \t%rd58, %rd57;\n"
    if space == "local":
        return "\tmov.b64 \t%rd58, %rd56;\n"
    return ("\tcvta.global.u64 \t%rd54, %rd62;\n\tcvta.shared.u64 \t%rd53, %rd57;\n"
            "\tselp.b64 \t%rd58, %rd53, %rd54, %p31;\n")


def _region(space, lane):
    return space if space else ("shared" if lane % 2 else "global")


def _img_bytes(img):
    return bytearray(b"".join(int(w).to_bytes(8, "little") for w in img))


def _img_words(b):
    return [int.from_bytes(b[8 * k:8 * k + 8], "little") for k in range(IMAGE_WORDS)]


OFF = 16        # the instance accesses the lane's region at +16 (aligned for every vector size)


def build_ldst(name, form):
    op, mods, types = _types(name)
    t = types[0]
    space = _space_of(mods)
    n = 4 if "v4" in mods else 2 if "v2" in mods else 1
    size = TYPE_BITS[t] // 8
    c = cls_of(t)
    if space == "param":          # ld.param.t d, [pv]: the low bytes of the u64 parameter
        pvs = [0xF1E2D3C4B5A69788, 0x0123456789ABCDEF, 0x80000000FFFF7F80]
        return Spec(name, "\t%s \t{d0}, [pv];\n" % name, [], [c],
                    lambda rng, li, lane: {"v": [], "launch": li},
                    lambda d: [extend(pvs[d["launch"]] & msk(8 * size), t, c)], pv=lambda li: pvs[li])
    regs = ", ".join("{%s%d}" % ("d" if op == "ld" else "s", i) for i in range(n))
    vec = regs if n == 1 else "{{" + regs + "}}"
    if op == "ld":
        body = _addr_setup(space) + f"\t{name} \t{vec}, [%rd58+{OFF}];\n"

        def ref(d):
            b = _img_bytes(d["img"])
            return [extend(int.from_bytes(b[OFF + i * size:OFF + (i + 1) * size], "little"), t, c) for i in range(n)]
        return Spec(name, body, [], [c] * n, lambda rng, li, lane: {"v": []}, ref, launches=1)
    g = _gen_for(t) if c != "16" else _gen_for("u16")
    body = _addr_setup(space) + f"\t{name} \t[%rd58+{OFF}], {vec};\n"

    def ref_st(d):
        b = _img_bytes(d["img"])
        for i, v in enumerate(d["v"]):
            b[OFF + i * size:OFF + (i + 1) * size] = (v & msk(8 * size)).to_bytes(size, "little")
        return {"out": [], "space": _region(space, d["lane"]), "img": _img_words(b)}
    return Spec(name, body, [c] * n, [], lambda rng, li, lane: {"v": [g(rng) for _ in range(n)]}, ref_st,
                launches=1)


def _atom_op(op, t, old, b, z):
    w = TYPE_BITS[t]
    M = msk(w)
    if op == "add":
        if t == "f32":      # PTX: atom.add.f32 flushes subnormal inputs and results to +-0
            with np.errstate(all="ignore"):
                return _ftz(fbits(np.float32(fval(_ftz(old))) + np.float32(fval(_ftz(b)))))
        if t == "f64":      # atom.add.f64: add.rn.f64 (subnormals kept, NaNs as _d_add)
            return _d_add(old, b, "rn")
        return (old + b) & M
    if op in ("min", "max"):
        pick = min if op == "min" else max
        return pick(val(old, t), val(b, t)) & M if t[0] == "s" else pick(old, b)
    if op == "inc":
        return 0 if old >= b else old + 1
    if op == "dec":
        return b if old == 0 or old > b else old - 1
    if op == "cas":
        return z if old == b else old
    return {"and": old & b, "or": old | b, "xor": old ^ b, "exch": b}[op]


def build_atom(name, form):
    parts = name.split(".")
    op = next(p for p in parts if p in ("add", "min", "max", "and", "or", "xor", "exch", "cas", "inc", "dec"))
    t = parts[-1]
    space = _space_of(parts)
    size = TYPE_BITS[t] // 8
    c = cls_of(t)
    g = _gen_for(t)
    red = form.kind == "red"

    def gen(rng, li, lane):
        img = _rand_image(rng)
        if rng.random() < 0.2:
            img[OFF // 8] &= ~msk(8 * size)      # old value 0 (inc/dec wrap cases)
        if t == "f32" and rng.random() < 0.5:
            img[OFF // 8] = (img[OFF // 8] & ~M32) | rand_f32(rng)
        if t == "f64" and rng.random() < 0.7:
            img[OFF // 8] = rand_f64(rng)
        old = int.from_bytes(_img_bytes(img)[OFF:OFF + size], "little")
        b = g(rng)
        k = rng.random()
        if op in ("cas", "inc", "dec", "min", "max") and k < 0.5:
            b = [old, (old + 1) & msk(8 * size), (old - 1) & msk(8 * size), 0][rng.randint(0, 3)]
        return {"v": [b, g(rng)], "img": img}

    def ref(d):
        b = _img_bytes(d["img"])
        old = int.from_bytes(b[OFF:OFF + size], "little")
        new = _atom_op(op, t, old, d["v"][0], d["v"][1])
        b[OFF:OFF + size] = new.to_bytes(size, "little")
        return {"out": [] if red else [old], "space": _region(space, d["lane"]), "img": _img_words(b)}
    if red:
        body = _addr_setup(space) + "\t%s \t[%%rd58+%d], {s0};\n" % (name, OFF)
        return Spec(name, body, [c, c], [], gen, ref, launches=2)
    tail = ", {s1}" if op == "cas" else ""
    body = _addr_setup(space) + "\t%s \t{d0}, [%%rd58+%d], {s0}%s;\n" % (name, OFF, tail)
    return Spec(name, body, [c, c], [c], gen, ref, launches=2)


def build_cvta(name, form):
    parts = name.split(".")
    to = "to" in parts
    space = parts[-2]
    # the lane's region as a `space` address and as a generic one
    src = {"global": "\tld.param.u64 \t%rd40, [mem];\n\tadd.s64 \t%rd40, %rd40, %rd59;\n",
           "shared": "\tmov.b64 \t%rd40, %rd57;\n", "local": "\tmov.b64 \t%rd40, %rd56;\n"}[space]
    if space == "global":
        src = ("\tld.param.u64 \t%rd40, [mem];\n\tadd.s64 \t%rd40, %rd40, %rd59;\n"
               if to else "\tmov.b64 \t%rd40, %rd62;\n")
    if to:
        if space != "global":
            src += f"\tcvta.{space}.u64 \t%rd40, %rd40;\n"      # a generic address of the region
        body = src + f"\t{name} \t%rd30, %rd40;\n\tld.{space}.u64 \t%rd31, [%rd30+8];\n"
    else:
        body = src + f"\t{name} \t%rd30, %rd40;\n\tld.u64 \t%rd31, [%rd30+8];\n"
    body += "\tst.global.u64 \t[%rd61], %rd31;\n"
    return Spec(name, body, [], [], lambda rng, li, lane: {"v": []}, lambda d: [d["img"][1]])


def _shfl_ref(mode, lane, b, c, vals):
    """PTX ISA pseudo-code of shfl.sync: (value read, predicate)."""
    bval, cval, seg = b & 31, c & 31, (c >> 8) & 31
    max_lane = (lane & seg) | (cval & ~seg)
    min_lane = lane & seg
    if mode == "up":
        j, ok = lane - bval, lane - bval >= max_lane
    elif mode == "down":
        j, ok = lane + bval, lane + bval <= max_lane
    elif mode == "bfly":
        j, ok = lane ^ bval, (lane ^ bval) <= max_lane
    else:
        j = min_lane | (bval & ~seg & 31)
        ok = j <= max_lane
    return (vals[j] if ok else vals[lane]), int(ok)


def build_warp(name, form):
    parts = name.split(".")
    k = form.kind
    if k == "shfl":     # two instances: immediate b and c over the whole warp; b per lane, width 8
        mode = parts[2]
        b_imm, c_imm = {"up": (1, 0), "down": (2, 0x1F), "bfly": (5, 0x1F), "idx": (7, 0x1F)}[mode]
        c_seg = 0x1800 if mode == "up" else 0x181F
        body = (f"\t{name} \t{{d0}}|{{d2}}, {{s0}}, {b_imm}, {c_imm}, -1;\n"
                f"\t{name} \t{{d1}}|{{d3}}, {{s0}}, {{s1}}, {c_seg}, -1;\n")

        def gen(rng, li, lane):
            return {"v": [rng.getrandbits(32), rng.getrandbits(6)]}

        def ref(lanes, lane):
            vals = [x["v"][0] for x in lanes]
            v0, p0 = _shfl_ref(mode, lane, b_imm, c_imm, vals)
            v1, p1 = _shfl_ref(mode, lane, lanes[lane]["v"][1], c_seg, vals)
            return [v0, v1, p0, p1]
        return _warp_spec(Spec(name, body, ["32", "32"], ["32", "32", "p", "p"], gen, None), ref)
    if k == "vote":
        mode = parts[2]

        def gen(rng, li, lane):
            return {"v": [[1, rng.getrandbits(1), 0][li]]}
        spec = Spec(name, "\t%s \t{d0}, {s0}, -1;\n" % name, ["p"], ["32" if mode == "ballot" else "p"], gen, None)

        def ref(lanes, lane):
            ps = [x["v"][0] for x in lanes]
            return [{"ballot": sum(p << i for i, p in enumerate(ps)), "all": int(all(ps)),
                     "any": int(any(ps)), "uni": int(len(set(ps)) == 1)}[mode]]
        return _warp_spec(spec, ref)
    if k == "match":
        t = parts[-1]
        c = cls_of(t)

        def gen(rng, li, lane):
            return {"v": [7 if li == 0 else rng.choice([0, 1, 2, 1 << 40 if t == "b64" else 3])]}
        if parts[1] == "any":
            spec = Spec(name, "\t%s \t{d0}, {s0}, -1;\n" % name, [c], ["32"], gen, None)
            return _warp_spec(spec, lambda lanes, lane: [
                sum(1 << j for j, x in enumerate(lanes) if x["v"][0] == lanes[lane]["v"][0])])
        spec = Spec(name, "\t%s \t{d0}|{d1}, {s0}, -1;\n" % name, [c], ["32", "p"], gen, None)
        return _warp_spec(spec, lambda lanes, lane: (
            [M32, 1] if len({x["v"][0] for x in lanes}) == 1 else [0, 0]))
    if k == "activemask":       # in divergent code: the threads on this path
        body = "\tmov.u32 \t{d0}, 0xDEAD;\n\t@{s0} bra \tL_skip;\n\t%s \t{d0};\nL_skip:\n" % name
        spec = Spec(name, body, ["p"], ["32"], lambda rng, li, lane: {"v": [rng.getrandbits(1)]}, None)
        return _warp_spec(spec, lambda lanes, lane: [
            0xDEAD if lanes[lane]["v"][0] else sum(1 << j for j, x in enumerate(lanes) if not x["v"][0])])
    if k == "warpsync":
        spec = Spec(name, "\t%s \t-1;\n\tmov.u32 \t{d0}, 1;\n" % name, [], ["32"], lambda rng, li, lane: {"v": []},
                    lambda d: [1])
        return spec
    raise AssertionError(k)


def _warp_spec(spec, ref):
    """A spec whose reference needs every lane of the launch: gen records them all."""
    launches = {}
    base = spec.gen

    def gen(rng, li, lane):
        d = base(rng, li, lane)
        lanes = launches.setdefault(li, [])
        if lane == 0:
            lanes.clear()
        lanes.append(d)
        d["_all"] = lanes
        return d
    spec.gen = gen
    spec.ref = lambda d: ref(d["_all"], d["lane"])
    return spec


def build_control(name, form):
    k = form.kind
    if k == "bar":        # 64 threads, two warps: what one warp stored, the other reads after it
        body = ("\tmov.u64 \t%rd41, shb;\n\tmul.wide.u32 \t%rd42, %r120, 4;\n\tadd.s64 \t%rd42, %rd41, %rd42;\n"
                "\tst.shared.u32 \t[%rd42], %r120;\n"
                f"\t{name} \t0;\n"
                "\tsub.s32 \t%r41, 63, %r120;\n\tmul.wide.u32 \t%rd43, %r41, 4;\n\tadd.s64 \t%rd43, %rd41, %rd43;\n"
                "\tld.shared.u32 \t{d0}, [%rd43];\n")
        spec = Spec(name, body, [], ["32"], lambda rng, li, lane: {"v": []}, lambda d: [63 - d["lane"]], launches=1)
        spec.block = 64
        return spec
    if k == "nop":
        return Spec(name, "\tmov.u32 \t{d0}, 1;\n\t%s;\n\tadd.s32 \t{d0}, {d0}, 1;\n" % name, [], ["32"],
                    lambda rng, li, lane: {"v": []}, lambda d: [2], launches=1)
    if k == "bra":
        body = ("\t@{s0} bra \tL_a;\n\tmov.u32 \t{d0}, 1;\n\tbra.uni \tL_b;\nL_a:\n\tmov.u32 \t{d0}, 2;\nL_b:\n"
                if name == "bra" else
                "\tmov.u32 \t{d0}, 1;\n\tbra.uni \tL_b;\n\tmov.u32 \t{d0}, 2;\nL_b:\n")
        return Spec(name, body, ["p"], ["32"], lambda rng, li, lane: {"v": [rng.getrandbits(1)]},
                    lambda d: [2 if (name == "bra" and d["v"][0]) else 1])
    if k == "exit":       # threads that leave early store nothing (out stays 0) and their
        body = "\tmov.u32 \t{d0}, 1;\n\t@{s0} %s;\n" % name          # regions keep the image
        return Spec(name, body, ["p"], ["32"], lambda rng, li, lane: {"v": [rng.getrandbits(1)]},
                    lambda d: {"out": [0 if d["v"][0] else 1], "exited": bool(d["v"][0])})
    raise AssertionError(k)


BUILDERS = {}
for _kinds, _b in [(("iadd", "isub", "imin", "imax", "idiv", "irem", "imul", "imad", "imul24", "imad24", "sad",
                     "ineg", "iabs", "isat"), build_int),
                   (("logic", "not", "cnot", "shl", "shr", "popc", "clz", "mstep", "dstep", "mquad", "mtrip",
                     "brev", "bfind", "bfe", "bfi", "prmt",
                     "lop3", "shf"), build_bits),
                   (("setp", "selp", "slct", "mov"), build_select),
                   (("fbin", "fminmax", "ffma", "funary", "fbits", "copysign", "testp"), build_float),
                   (("dbin", "dfma", "dunary", "dminmax", "dbits", "dcopysign", "dtestp"), build_f64),
                   (("cvt",), build_cvt), (("dcvt",), build_dcvt), (("cvta",), build_cvta), (("ld", "st"), build_ldst),
                   (("atom", "red"), build_atom), (("shfl", "vote", "match", "activemask", "warpsync"), build_warp),
                   (("bar", "nop", "bra", "exit"), build_control)]:
    for _k in _kinds:
        BUILDERS[_k] = _b


def test_every_supported_form_has_a_checked_instance():
    kinds = {f.kind for f in SUPPORTED.values()}
    assert kinds <= set(BUILDERS), f"no checked instance for form kinds {sorted(kinds - set(BUILDERS))}"
    assert len(SUPPORTED) > 1000


@pytest.mark.parametrize("kind", sorted({f.kind for f in SUPPORTED.values()}))
def test_every_supported_form_runs_and_computes_its_reference(kind):
    failures = []
    for name, form in sorted(SUPPORTED.items()):
        if form.kind != kind:
            continue
        try:
            failures += run_spec(BUILDERS[kind](name, form))
        except Exception as e:   # noqa: BLE001 - any exception (ExecutionError too) is a failure
            failures.append(f"{name}: {type(e).__name__}: {e}")
    assert failures == [], "\n".join(failures[:20])


def test_binary64_reference_helpers_check_themselves():
    """round_f64 (the f64 builders' reference) agrees with Python's correctly rounded floats in rn
    and brackets the exact value in rz/rm/rp; the directed sqrt reference likewise."""
    rng = random.Random(64)
    finite = [b for b in D_EDGES if d_is_finite(b)]

    def pick():
        b = rng.choice(finite) if rng.random() < 0.3 else rand_f64(rng)
        return b if d_is_finite(b) else pick()
    for _ in range(600):
        x, y = pick(), pick()
        a, b = dval(x), dval(y)
        exact = [(Fraction(a) + Fraction(b), a + b), (Fraction(a) * Fraction(b), a * b)]
        if b:
            exact.append((Fraction(a) / Fraction(b), a / b))
        for q, want in exact:
            if math.isfinite(want) and q:
                assert round_f64(q, "rn") == dbits(want), (hex(x), hex(y))
            if q == 0:
                continue
            for mode in ("rz", "rm", "rp"):
                r = dval(round_f64(q, mode))
                up = mode == "rp" or (mode == "rz" and q < 0)
                if math.isinf(r):
                    assert up == (q > 0) and abs(q) > Fraction(dval(D_MAX)), (mode, hex(x), hex(y))
                    continue
                nxt = math.nextafter(r, -math.inf if up else math.inf)
                if up:
                    assert Fraction(r) >= q and (math.isinf(nxt) or Fraction(nxt) < q), (mode, hex(x), hex(y))
                else:
                    assert Fraction(r) <= q and (math.isinf(nxt) or Fraction(nxt) > q), (mode, hex(x), hex(y))
        v = abs(a)
        if v:
            lo, hi = dval(_d_sqrt(dbits(v), "rz")), dval(_d_sqrt(dbits(v), "rp"))
            assert Fraction(lo) ** 2 <= Fraction(v) <= Fraction(hi) ** 2
            assert hi == lo if Fraction(lo) ** 2 == Fraction(v) else hi == math.nextafter(lo, math.inf)
    # ties to even, subnormal quanta, overflow by mode, signed zeros
    assert round_f64(1 + Fraction(1, 2 ** 53), "rn") == D_ONE
    assert round_f64(1 + Fraction(3, 2 ** 53), "rn") == D_ONE + 2
    assert round_f64(Fraction(1, 2 ** 1075), "rn") == 0 and round_f64(-Fraction(3, 2 ** 1076), "rn") == D_SIGN | 1
    assert round_f64(-Fraction(1, 2 ** 1080), "rm") == D_SIGN | 1 and round_f64(Fraction(1, 2 ** 1080), "rz") == 0
    assert round_f64(TWO ** 1024, "rz") == D_MAX and round_f64(-TWO ** 1024, "rp") == D_MAX | D_SIGN
    assert round_f64(-TWO ** 1024, "rm") == D_INF | D_SIGN and round_f64(TWO ** 1024 - TWO ** 970, "rn") == D_INF
    assert round_f64(TWO ** 1024 - TWO ** 970 - 1, "rn") == D_MAX
    assert _d_sub(D_ONE, D_ONE, "rm") == D_SIGN and _d_sub(D_ONE, D_ONE, "rz") == 0


def test_fusion_candidates_are_warned_about():
    from gpu_layers.ptx.validator import fusion_warnings

    body = ("\tmul.f32 \t%f1, %f2, %f3;\n\tadd.f32 \t%f4, %f1, %f5;\n"
            "\tmul.rn.f32 \t%f6, %f2, %f3;\n\tadd.f32 \t%f7, %f6, %f5;\n\tret;\n")
    text = kernel_ptx(body)
    warns = fusion_warnings(parse_ptx(text).kernel())
    assert len(warns) == 1 and "fma" in warns[0]
    line = next(i + 1 for i, l in enumerate(text.splitlines()) if "add.f32 \t%f4" in l)
    assert warns[0].startswith(f"line {line}:")


def test_problems_are_scoped_to_the_kernel_and_sorted():
    text = """.version 9.5
.target sm_75
.address_size 64
.global .align 1 .b8 $str[4] = {37, 100, 10};
.func  (.param .b32 func_retval0) helper(
\t.param .b32 helper_param_0
)
{
\t.reg .b32 \t%r<3>;
\tret;
}
.visible .entry clean(
\t.param .u64 clean_param_0
)
{
\tret;
}
.visible .entry dirty(
\t.param .u64 dirty_param_0
)
{
\t.reg .b64 \t%rd<3>;
\t.reg .f64 \t%fd<3>;
\trcp.approx.ftz.f64 \t%fd1, %fd2;
\tmov.u64 \t%rd1, $str;
\tret;
}
"""
    m = parse_ptx(text)
    validate(m, "clean")          # the unused .func and string do not matter
    with pytest.raises(UnsupportedPTX) as ei:
        validate(m, "dirty")
    probs = ei.value.problems
    lines = [int(p.split(":")[0][5:]) for p in probs]
    assert lines == sorted(lines)
    assert any("$str" in p for p in probs) and any("rcp.approx.ftz.f64" in p for p in probs)
    with pytest.raises(UnsupportedPTX, match="no .entry"):
        validate(parse_ptx(text.split(".visible")[0]))


def test_the_machines_own_instructions_are_not_ptx():
    """mstep / dstep / mquad / mtrip exist in machine code only (Kernel.machine): in a user's PTX they are
    refused by name, like any instruction a GPU does not have."""
    body = ("\tmov.u64 \t%rd1, 3;\n\tmstep.b64 \t%rd2, %rd1, %rd1;\n\tdstep.b32 \t%r1, %r2, %r3;\n"
            "\tmquad.b64 \t%rd3, %rd1, %rd2;\n\tmtrip.b64 \t%rd4, %rd1, %rd1;\n\tret;\n")
    module = parse_ptx(kernel_ptx(body))
    with pytest.raises(UnsupportedPTX) as e:
        validate(module)
    msg = str(e.value)
    assert "`mstep.b64` is not supported (it is qwenGPU's machine instruction, not PTX)" in msg
    assert "`dstep.b32` is not supported" in msg and "`mquad.b64` is not supported" in msg
    assert "`mtrip.b64` is not supported" in msg
    module.kernel().machine = True
    validate(module)
