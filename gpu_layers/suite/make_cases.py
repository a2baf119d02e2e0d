"""Writes cases.json for the kernel suite (deterministic: seeded per case). Run from anywhere:

    python -m gpu_layers.suite.make_cases

Every f32 value is exactly representable in float32 (built with np.float32), f64 values are Python
floats (JSON round-trips them exactly); at most 128 threads per launch and 256 elements per buffer.
"""
from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SENT32 = -7777
SENTU = 0xDEADBEEF
SENT64 = -777777777777


def f32(x) -> float:
    return float(np.float32(x))


def S(name, type_, value):
    if type_ == "f32":
        value = f32(value)
    elif type_ == "f64":
        value = float(value)
    return {"name": name, "type": type_, "value": value}


def B(name, type_, data, output=False):
    if type_ == "f32*":
        data = [v if isinstance(v, str) else f32(v) for v in data]   # "nan" / "inf" / "-inf" stay strings
    elif type_ == "f64*":
        data = [v if isinstance(v, str) else float(v) for v in data]
    else:
        data = [int(v) for v in data]
    assert 1 <= len(data) <= 256, (name, len(data))
    d = {"name": name, "type": type_, "data": data}
    if output:
        d["output"] = True
    return d


def O(name, type_, n, fill=None):
    if fill is None:
        fill = {"i32*": SENT32, "u32*": SENTU, "i64*": SENT64, "u64*": 0xFEEDFACECAFEBEEF,
                "f32*": -1.5, "f64*": -2.75}[type_]
    return B(name, type_, [fill] * n, output=True)


def case(name, grid, block, args, features, dyn=0, kernel=None, source=None, case_name=None):
    g = list(grid) + [1] * (3 - len(grid))
    b = list(block) + [1] * (3 - len(block))
    assert g[0] * g[1] * g[2] * b[0] * b[1] * b[2] <= 128, name
    return {"name": case_name or name, "source": (source or name) + ".cu", "kernel": kernel or name,
            "grid": g, "block": b, "dynamic_shared_bytes": dyn, "args": args, "features": features}


def pack_bytes(bs, nwords=None):
    bs = bytes(bs)
    n = nwords if nwords is not None else (len(bs) + 3) // 4
    bs = bs + b"\0" * (4 * n - len(bs))
    return list(struct.unpack(f"<{n}I", bs))


def pack16(vals):
    vals = list(vals) + [0] * (len(vals) % 2)
    return list(struct.unpack(f"<{len(vals) // 2}I", struct.pack(f"<{len(vals)}H", *[v & 0xFFFF for v in vals])))


def r_i32(rng, lo=-(2**31), hi=2**31 - 1):
    return rng.randint(lo, hi)


def r_u32(rng):
    return rng.getrandbits(32)


def r_u64(rng):
    return rng.getrandbits(64)


TEXT = (b"The quick brown fox jumps over the lazy dog while 42 GPUs hum; "
        b"SIMT lanes diverge, reconverge & vote. Qwen writes CUDA, nvcc emits PTX!")


def integer_arithmetic(add):
    """Integer arithmetic: hashes, RNGs, products, division, number theory."""
    rng = random.Random(1)
    text = TEXT[:60]
    add(case("rolling_hash", [3], [16], [B("text", "u32*", pack_bytes(text)), S("n", "i32", 52), S("w", "i32", 5),
                                          O("out", "u32*", 48)],
             ["bytes", "int32-mul", "wraparound", "loop", "bounds-check", "early-return", "multi-block"]))
    add(case("rolling_hash", [1], [8], [B("text", "u32*", pack_bytes(b"abcdefghij\xff\xfe\x80\x7f")),
                                         S("n", "i32", 14), S("w", "i32", 9), O("out", "u32*", 8)],
             ["bytes", "int32-mul", "wraparound", "loop", "bounds-check", "early-return"],
             case_name="rolling_hash_high_bytes"))

    rng = random.Random(2)
    segs_txt = [b"", b"a", b"foobar", b"hello world", TEXT[:40], b"\x00\xff\x80", b"CUDA", TEXT[40:90], b"xyzzy", b"!"]
    blob = b"".join(segs_txt)
    offs = [0]
    for s in segs_txt:
        offs.append(offs[-1] + len(s))
    add(case("fnv1a_segments", [2], [8],
             [B("text", "u32*", pack_bytes(blob)), B("offsets", "i32*", offs), S("nseg", "i32", len(segs_txt)),
              O("h32", "u32*", 16), O("h64", "u64*", 16)],
             ["bytes", "int32-mul", "int64", "wraparound", "data-dependent-loop", "divergence", "bounds-check",
              "multi-block", "hash"]))

    rng = random.Random(3)
    n = 32
    add(case("xorshift_streams", [2], [16],
             [B("seed32", "u32*", [r_u32(rng) | 1 for _ in range(n)]), B("seed64", "u64*", [r_u64(rng) | 1 for _ in range(n)]),
              B("steps", "i32*", [rng.randint(0, 24) for _ in range(n)]), O("out32", "u32*", n), O("out64", "u64*", n)],
             ["shift-left", "shift-logical", "bitwise", "int64", "int64-shift", "wraparound", "data-dependent-loop",
              "multi-block", "rng"]))

    rng = random.Random(4)
    ks = [0, 1, 2, 3, 7, 8, 100, 255, 256, 1000] + [rng.randint(0, 1500) for _ in range(6)]
    add(case("lcg_jump", [1], [16],
             [B("state", "u64*", [r_u64(rng) for _ in range(16)]), B("k", "u32*", ks), O("out", "u64*", 16)],
             ["int64", "wraparound", "while-loop", "data-dependent-loop", "rng"]))

    rng = random.Random(5)
    edge = [(0, 0), (-1, -1), (2**31 - 1, 2**31 - 1), (-(2**31), -(2**31)), (-(2**31), 2**31 - 1), (0x7FFFFF, 0x7FFFFF),
            (0x800000, 3), (-0x800000, 0x12345678), (123456789, -987654321), (65536, 65536), (-3, 7), (0x00FFFFFF, -1)]
    pairs = edge + [(r_i32(rng), r_i32(rng)) for _ in range(20)]
    add(case("wide_products", [2], [16],
             [B("a", "i32*", [p[0] for p in pairs]), B("b", "i32*", [p[1] for p in pairs]), O("hi_s", "i32*", 32),
              O("hi_u", "u32*", 32), O("wide_s", "i64*", 32), O("wide_u", "u64*", 32), O("m24", "i32*", 32),
              O("hi64", "u64*", 32)],
             ["mulhi", "mul-wide", "mul24", "int64", "mulhi64", "wraparound", "multi-block"]))

    rng = random.Random(6)
    pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 5), (2**31 - 1, -1), (-(2**31), 1), (-(2**31), 3), (-1, 1),
             (-1, -2), (100, 0x7FFFFFFF), (5, -(2**31)), (-(2**31), 2**31 - 1), (12345, 7)]
    while len(pairs) < 32:
        y = r_i32(rng, -5000, 5000) or 3
        pairs.append((r_i32(rng), y if rng.random() < 0.6 else r_i32(rng) | 1))
    add(case("divrem_var32", [2], [16],
             [B("a", "i32*", [p[0] for p in pairs]), B("b", "i32*", [p[1] for p in pairs]), O("q", "i32*", 32),
              O("r", "i32*", 32), O("uq", "u32*", 32), O("ur", "u32*", 32)],
             ["div-signed", "rem-signed", "div-unsigned", "rem-unsigned", "multi-block"]))

    rng = random.Random(7)
    pairs = [(7, 2), (-7, 2), (7, -2), (-(2**63), 1), (-(2**63), 2**63 - 1), (2**63 - 1, -(2**63)), (-1, -1),
             (2**40 + 3, 2**20), (-(2**50), 3), (123456789012345, -97)]
    while len(pairs) < 20:
        y = rng.randint(-(2**33), 2**33) or 11
        pairs.append((rng.randint(-(2**63), 2**63 - 1), y if rng.random() < 0.5 else rng.randint(-(2**62), 2**62) | 1))
    add(case("divrem_i64", [3], [8],
             [S("n", "i32", 20), B("a", "i64*", [p[0] for p in pairs]), B("b", "i64*", [p[1] for p in pairs]),
              O("q", "i64*", 24), O("r", "i64*", 24), O("uq", "u64*", 24), O("ur", "u64*", 24)],
             ["int64", "div-signed", "rem-signed", "div-unsigned", "rem-unsigned", "bounds-check", "multi-block"]))

    rng = random.Random(8)
    vals = [0, 1, -1, 6, 7, -7, 8, -8, 9, -9, 15, -15, 16, -17, 999, 1000, -1000, 2**31 - 1, -(2**31), -(2**31) + 1]
    vals += [r_i32(rng) for _ in range(12)]
    add(case("div_by_consts", [2], [16], [B("in", "i32*", vals), O("out", "i32*", 256)],
             ["div-const", "div-signed", "rem-signed", "div-unsigned", "rem-unsigned", "mulhi", "multi-block"]))

    rng = random.Random(9)
    vals = [0, 1, 9, 10, 100, 1234567, 4294967295, 1000000000, 999999999, 2147483648, 4000000001, 505]
    vals += [r_u32(rng) >> rng.randint(0, 28) for _ in range(12)]
    add(case("digit_reverse", [3], [10],
             [S("n", "i32", 24), B("in", "u32*", vals), O("rev", "u64*", 30), O("info", "i32*", 30)],
             ["div-const", "rem-unsigned", "int64", "do-while", "data-dependent-loop", "bounds-check", "multi-block"]))

    rng = random.Random(61)
    vals = [0, 7, 10, 99, 100, 4294967295, 1000000000, 1234567890, 3000000001, 909090909]
    vals += [r_u32(rng) >> rng.randint(0, 31) for _ in range(6)]
    add(case("local_itoa", [2], [8], [B("in", "u32*", vals), O("out", "u32*", 80)],
             ["local-array", "bytes", "halfwords", "div-const", "rem-unsigned", "do-while", "multi-block"]))

    rng = random.Random(10)
    vals = [0, 1, 2, 3, 4, 15, 16, 17, 24, 25, 26, 65535, 65536, 4294967295, 4294836225, 4294836224, 1 << 30, (1 << 30) - 1]
    vals += [r_u32(rng) >> rng.randint(0, 24) for _ in range(14)]
    add(case("isqrt_u32", [2], [16], [B("in", "u32*", vals), O("root", "u32*", 32), O("rem", "u32*", 32)],
             ["while-loop", "data-dependent-loop", "shift-logical", "divergence", "multi-block"]))

    rng = random.Random(11)
    base, exps, mods = [], [], []
    fixed = [(2, 10, 1000), (3, 0, 7), (5, 3, 1), (0, 0, 13), (7, 560, 561), (2, 4294967295, 4294967291),
             (4294967295, 4294967295, 4294967295), (123456, 654321, 1000000007 % (2**32))]
    for bse, e, m in fixed:
        base.append(bse); exps.append(e); mods.append(m)
    while len(base) < 24:
        base.append(r_u32(rng)); exps.append(r_u32(rng) >> rng.randint(0, 31)); mods.append(r_u32(rng) | 1)
    add(case("modpow_u32", [3], [8], [B("base", "u32*", base), B("exps", "u32*", exps), B("mods", "u32*", mods),
                                       O("out", "u32*", 24)],
             ["mul-wide", "rem-unsigned", "int64", "while-loop", "data-dependent-loop", "multi-block"]))

    rng = random.Random(12)
    pairs = [(3, 11), (10, 17), (6, 9), (1, 2), (0, 7), (-3, 11), (-10, 7), (240, 46), (17, 3120), (1000003, 999983),
             (12, 1), (65537, 65536)]
    while len(pairs) < 20:
        pairs.append((rng.randint(-500000, 500000), rng.randint(2, 1 << 20)))
    add(case("mod_inverse", [3], [8], [S("n", "i32", 20), B("a", "i32*", [p[0] for p in pairs]),
                                        B("m", "i32*", [p[1] for p in pairs]), O("gcd", "i32*", 24), O("inv", "i32*", 24)],
             ["div-signed", "rem-signed", "while-loop", "data-dependent-loop", "bounds-check", "multi-block"]))

    starts = [1, 2, 3, 6, 7, 9, 27, 97, 871, 6171, 77031, 837799, 2**40 + 1, 2**45 - 1, 1 << 50, 989345275647]
    add(case("syracuse_u64", [1], [16], [B("start", "u64*", starts), S("cap", "i32", 400), O("steps", "i32*", 16),
                                          O("peak", "u64*", 16)],
             ["collatz", "int64", "while-loop", "data-dependent-loop", "min-max", "divergence"]))

    rng = random.Random(13)
    # large primes (2147483647, 4294967291) would need ~30000 iterations: big values here have small factors
    vals = [0, 1, 2, 3, 4, 9, 25, 49, 97, 561, 7919, 65521, 65537, 1000003, 999983 * 3, 2147483646, 4294836225,
            4294967295, 2**31, 10403]
    vals += [rng.randint(2, 1 << 22) for _ in range(12)]
    add(case("prime_trial", [2], [16], [B("in", "u32*", vals), O("factor", "u32*", 32), O("is_prime", "i32*", 32)],
             ["rem-unsigned", "div-unsigned", "loop", "early-return", "divergence", "multi-block"]))


def bit_operations(add):
    """Bit operations: counts, fields, shifts, permutations, CRC."""
    rng = random.Random(20)
    vals = [0, 1, 2**63, 2**64 - 1, 0xFFFFFFFF, 0x100000000, 0x8000000000000001, 0x0F0F0F0F0F0F0F0F]
    vals += [r_u64(rng) >> rng.randint(0, 63) for _ in range(24)]
    add(case("bit_counts64", [2], [16], [B("in", "u64*", vals), O("counts", "i32*", 128), O("rev", "u64*", 32)],
             ["popc", "clz", "brev", "ffs", "int64", "multi-block"]))

    rng = random.Random(21)
    vals = [0, 1, 2, 3, 4, 5, 0x80000000, 0xFFFFFFFF, 0x80000001, 0x40000000, 0x40000001, 1024, 1023, 96]
    vals += [r_u32(rng) >> rng.randint(0, 31) for _ in range(18)]
    add(case("lowbit_highbit", [2], [16], [B("in", "u32*", vals), O("low", "u32*", 32), O("info", "i32*", 32),
                                            O("next_pow2", "u32*", 32)],
             ["ffs", "clz", "bfind", "bitwise", "compare", "select", "multi-block"]))

    rng = random.Random(22)
    sels = [0x3210, 0x7654, 0x0123, 0x4567, 0x1111, 0x0000, 0x8888, 0xF0E1, 0xFFFF, 0x12345678, 0xBA98, 0x5140]
    sels += [r_u32(rng) for _ in range(20)]
    add(case("byte_shuffle", [2], [16], [B("x", "u32*", [r_u32(rng) for _ in range(32)]),
                                          B("y", "u32*", [r_u32(rng) for _ in range(32)]), B("sel", "u32*", sels),
                                          O("perm", "u32*", 32), O("swapped", "u32*", 32), O("rot", "u32*", 32)],
             ["byte-perm", "multi-block"]))

    rng = random.Random(23)
    shs = [0, 1, 31, 32, 33, 63, 64, 65, 100, 0xFFFFFFFF, 16, 8] + [rng.randint(0, 70) for _ in range(20)]
    add(case("funnel_shifts", [2], [16], [B("lo", "u32*", [r_u32(rng) for _ in range(32)]),
                                           B("hi", "u32*", [r_u32(rng) for _ in range(32)]), B("sh", "u32*", shs),
                                           O("out", "u32*", 192)],
             ["funnel-shift", "rotate", "int64", "int64-shift", "select", "multi-block"]))

    rng = random.Random(24)
    pos, ln = [0, 0, 31, 1, 8, 16, 4], [1, 31, 1, 31, 8, 16, 28]
    while len(pos) < 32:
        l = rng.randint(1, 31)
        pos.append(rng.randint(0, 32 - l)); ln.append(l)
    add(case("bitfield_pack", [2], [16], [B("words", "u32*", [r_u32(rng) for _ in range(32)]), B("pos", "i32*", pos),
                                           B("len", "i32*", ln), B("vals", "u32*", [r_u32(rng) for _ in range(32)]),
                                           O("ufield", "u32*", 32), O("sfield", "i32*", 32), O("inserted", "u32*", 32)],
             ["bitfield", "shift-arith", "shift-logical", "shift-left", "bitwise", "multi-block"]))

    rng = random.Random(25)
    vals = [0, 1, 2, 3, 0xFFFFFFFF, 0x80000000, 0x55555555, 0xAAAAAAAA] + [r_u32(rng) for _ in range(24)]
    add(case("gray_parity", [2], [16], [B("in", "u32*", vals), O("gray", "u32*", 32), O("decoded", "u32*", 32),
                                         O("parity", "i32*", 32)],
             ["bitwise", "shift-logical", "popc", "loop", "data-dependent-loop", "multi-block"]))

    add(case("morton2d", [2, 2], [8, 4], [S("ox", "u32", 0x1234), S("oy", "u32", 0xFFF8), O("codes", "u32*", 128),
                                           O("back", "u32*", 128)],
             ["2d-block", "2d-grid", "special-regs", "bitwise", "shift-left", "device-function", "multi-block"]))

    segs = [b"", b"a", b"123456789", b"The quick brown fox jumps over the lazy dog", b"\x00", b"\xff\xff\xff\xff",
            b"CRC", TEXT[:30]]
    blob = b"".join(segs)
    offs = [0]
    for s in segs:
        offs.append(offs[-1] + len(s))
    add(case("crc32_bytes", [1], [8], [B("data", "u32*", pack_bytes(blob)), B("offsets", "i32*", offs),
                                        S("nseg", "i32", len(segs)), O("crc", "u32*", 8)],
             ["bytes", "hash", "nested-loops", "bitwise", "data-dependent-loop", "bounds-check"]))

    rng = random.Random(26)
    add(case("bitrev_permute", [2], [32], [S("logn", "i32", 6), B("in", "i32*", [rng.randint(-10**6, 10**6) for _ in range(64)]),
                                            O("out", "i32*", 64)],
             ["brev", "scatter", "multi-block"]))

    rng = random.Random(27)
    vals = [0, 1, -1, 2**31 - 1, -(2**31), 0x12345678, -0x12345678] + [r_i32(rng) for _ in range(25)]
    amts = [0, 31, 63, 32, 1, 17, 45] + [rng.randint(0, 200) for _ in range(25)]
    add(case("var_shifts", [2], [16], [B("in", "i32*", vals), B("amount", "i32*", amts), O("out32", "i32*", 128),
                                        O("out64", "i64*", 96)],
             ["shift-arith", "shift-logical", "shift-left", "rotate", "int64", "int64-shift", "multi-block"]))

    rng = random.Random(28)
    a = [0, -1, 5, -2147483647, 2147483647, 1000, -1001, 999] + [r_i32(rng) for _ in range(24)]
    b = [0, 1, -5, 2147483647, -2147483647, 7, -1001, -999] + [r_i32(rng) for _ in range(24)]
    c = [r_i32(rng) for _ in range(32)]
    add(case("minmax_clamp", [2], [16], [B("a", "i32*", a), B("b", "i32*", b), B("c", "i32*", c), O("out", "i32*", 256),
                                          O("out64", "i64*", 64)],
             ["min-max", "abs", "abs-diff", "select", "compare", "int64", "multi-block"]))


def control_flow(add):
    """Control flow: interpreters, searches, divergence, strings."""
    # bytecode programs: ops 0 halt,1 addi,2 muli,3 xori,4 shri,5 loop,6 setcnt,7 swap,8 addb,9 jneg
    def w(op, arg=0):
        return ((arg << 8) | op) & 0xFFFFFFFF
    prog = []
    entries = {}
    entries["loop"] = len(prog)          # acc = (acc * 3 + 7) repeated 5 times, then halt
    prog += [w(6, 5), w(2, 3), w(1, 7), w(5, len(prog) + 1), w(0)]
    entries["fib"] = len(prog)           # fibonacci-ish with swap/addb 10 times
    base = len(prog)
    prog += [w(7), w(1, 1), w(7), w(6, 10), w(7), w(8), w(5, base + 4), w(0)]
    entries["neg"] = len(prog)           # if acc < 0: acc ^= 0x5555 else acc >>= 3
    base = len(prog)
    prog += [w(9, base + 3), w(4, 3), w(0), w(3, 0x5555), w(1, -100), w(0)]
    entries["mix"] = len(prog)
    base = len(prog)
    prog += [w(6, 7), w(2, -1640531535 & 0x7FFFFF), w(3, 0x1234), w(4, 1), w(5, base + 1), w(1, -12345), w(0)]
    entries["bad"] = len(prog)           # an unknown opcode stops the machine
    prog += [w(1, 5), 0xFF, w(1, 1), w(0)]
    entries["runaway"] = len(prog)       # cnt = 0 then loop: runs until the step cap
    base = len(prog)
    prog += [w(1, 1), w(5, base), w(0)]
    rng = random.Random(30)
    names = list(entries)
    ent = [entries[names[i % len(names)]] for i in range(24)]
    inp = [rng.randint(-1000, 1000) if i % 3 else r_i32(rng) for i in range(24)]
    add(case("bytecode_vm", [3], [8], [B("prog", "i32*", [v - (1 << 32) if v >= 2**31 else v for v in prog]),
                                        B("entry", "i32*", ent), B("input", "i32*", inp), O("result", "i32*", 24),
                                        O("steps", "i32*", 24)],
             ["switch", "while-loop", "data-dependent-loop", "divergence", "interpreter", "shift-arith", "wraparound",
              "multi-block"]))

    rng = random.Random(31)
    a = sorted(rng.randint(-50, 400) for _ in range(16))
    b = sorted(rng.randint(0, 400) for _ in range(16))
    targets = [a[3] + b[5], a[10] + b[0], -5, 10000, a[15] + b[15], a[7] + b[7]] + [rng.randint(0, 800) for _ in range(10)]
    add(case("pair_search", [1], [16], [B("a", "i32*", a), S("na", "i32", 16), B("b", "i32*", b), S("nb", "i32", 16),
                                         B("target", "i32*", targets), O("found", "i32*", 16)],
             ["nested-loops", "break-continue", "data-dependent-loop", "divergence"]))

    rng = random.Random(32)
    srt = sorted(rng.randint(-1000, 1000) for _ in range(40))
    keys = [srt[0], srt[-1], srt[0] - 1, srt[-1] + 1, srt[17], srt[17] + 1, 0, -1000, 1000]
    keys += [rng.randint(-1100, 1100) for _ in range(23)]
    add(case("lower_bound_search", [2], [16], [B("sorted", "i32*", srt), S("n", "i32", 40), B("keys", "i32*", keys),
                                                O("pos", "i32*", 32), O("probes", "i32*", 32)],
             ["binary-search", "while-loop", "early-return", "divergence", "multi-block"]))

    rng = random.Random(33)
    add(case("lane_divergence", [1], [64], [B("in", "i32*", [rng.randint(-100000, 100000) for _ in range(64)]),
                                             O("out", "i32*", 64)],
             ["divergence", "nested-branches", "loop", "div-const", "rem-signed", "two-warps"]))

    rng = random.Random(34)
    add(case("grid_stride", [2], [12], [S("n", "i32", 200), B("in", "i32*", [rng.randint(-10**6, 10**6) for _ in range(200)]),
                                         O("out", "i32*", 200), O("visits", "i32*", 24)],
             ["grid-stride", "loop", "special-regs", "multi-block"]))

    strs = [b"42", b"   -17", b"+8x", b"abc", b"", b"  \t 123456789", b"-", b"007", b"12 34", b"-2147483", b" +0", b"9"]
    blob = b"".join(strs)
    offs = [0]
    for s in strs:
        offs.append(offs[-1] + len(s))
    add(case("atoi_segments", [2], [8], [B("text", "u32*", pack_bytes(blob)), B("offsets", "i32*", offs),
                                          S("nseg", "i32", len(strs)), O("value", "i32*", 16), O("used", "i32*", 16)],
             ["switch", "bytes", "string", "state-machine", "while-loop", "bounds-check", "multi-block"]))

    segs = [b"hello world", b"  multiple   spaces here ", b"", b"one", b"x-ray, zebra & yak!", b"1234 5678",
            b"A quick brown fox", b"supercalifragilistic is long"]
    blob = b"".join(segs)
    offs = [0]
    for s in segs:
        offs.append(offs[-1] + len(s))
    add(case("word_stats", [1], [8], [B("text", "u32*", pack_bytes(blob)), B("offsets", "i32*", offs),
                                       S("nseg", "i32", len(segs)), O("stats", "i32*", 24)],
             ["bytes", "string", "loop", "compare", "divergence", "bounds-check"]))

    words = [b"apple", b"apricot", b"apple", b"", b"banana", b"band", b"zeta", b"\xff\x01", b"a", b"abc", b"abd", b"ab"]
    blob = b""
    offs = []
    for s in words:
        offs.append(len(blob))
        blob += s + b"\0"
    idx = [(0, 1), (0, 2), (1, 0), (3, 3), (3, 4), (4, 5), (5, 4), (6, 7), (7, 6), (8, 9), (9, 10), (10, 11), (11, 9),
           (2, 0), (4, 4), (7, 3)]
    add(case("strcmp_pairs", [1], [16], [B("text", "u32*", pack_bytes(blob)), B("a_off", "i32*", [offs[i] for i, _ in idx]),
                                          B("b_off", "i32*", [offs[j] for _, j in idx]), O("cmp", "i32*", 16),
                                          O("prefix", "i32*", 16)],
             ["bytes", "string", "while-loop", "compare", "data-dependent-loop"]))


def memory(add):
    """Memory: shared (static and dynamic), local arrays, small types, structs."""
    rng = random.Random(40)
    add(case("shared_reverse", [3], [16], [B("in", "i32*", [rng.randint(-10**8, 10**8) for _ in range(48)]),
                                            O("rev", "i32*", 48), O("diff", "i32*", 48)],
             ["shared-static", "syncthreads", "multi-block"]))

    rng = random.Random(41)
    add(case("dyn_shared_rotate", [2], [24], [B("in", "i32*", [rng.randint(-3000, 3000) for _ in range(48)]),
                                               S("k", "i32", 29), O("out", "i32*", 48)],
             ["shared-dynamic", "syncthreads", "rem-signed", "multi-block"], dyn=2 * 24 * 4))

    rng = random.Random(42)
    vals = [rng.randint(-1000, 1000) for _ in range(64)] + [rng.randint(-5, 5) for _ in range(64)]
    add(case("bitonic_sort", [2], [64], [B("in", "i32*", vals), O("out", "i32*", 128)],
             ["sort", "shared-static", "syncthreads", "nested-loops", "divergence", "multi-block"]))

    rng = random.Random(43)
    vals = [rng.randint(-20, 20) for _ in range(40)] + [SENT32] * 8
    add(case("rank_sort", [3], [16], [S("n", "i32", 40), B("in", "i32*", vals), O("out", "i32*", 48),
                                       O("rank", "i32*", 48)],
             ["sort", "scatter", "loop", "compare", "bounds-check", "multi-block"]))

    rng = random.Random(44)
    add(case("scan_i64", [2], [32], [B("in", "i64*", [rng.randint(-(2**50), 2**50) for _ in range(64)]),
                                      O("incl", "i64*", 64), O("excl", "i64*", 64)],
             ["scan", "int64", "shared-static", "syncthreads", "multi-block"]))

    rng = random.Random(45)
    add(case("conv2d_tile", [2, 2], [8, 4], [B("img", "i32*", [rng.randint(0, 255) for _ in range(128)]), S("w", "i32", 16),
                                              S("h", "i32", 8), B("k3", "i32*", [1, 2, 1, 0, -3, 0, -1, 2, 5]),
                                              O("out", "i32*", 128)],
             ["stencil", "2d-block", "2d-grid", "shared-static", "syncthreads", "min-max", "div-const", "nested-loops",
              "multi-block"]))

    add(case("index_3d", [2, 2, 2], [4, 2, 2], [O("ids", "i32*", 128), O("transposed", "i32*", 128), O("dims", "i32*", 6)],
             ["3d-block", "3d-grid", "special-regs", "multi-block"]))

    # RPN programs
    rng = random.Random(46)
    toks, starts = [], []
    fixed = [[3, 4, -1, 5, -3], [10, 2, -2, -5, -3], [7], [1, 2, 3, 4, 5, 6, -1, -1, -1, -1, -1], [5, 9, -4, 2, -4],
             [65536, -5, -3, -5, -3], [0, 1, -2], []]
    progs = list(fixed)
    while len(progs) < 16:
        p, depth = [], 0
        for _ in range(rng.randint(3, 14)):
            if depth >= 2 and (rng.random() < 0.5 or depth >= 12):
                p.append(rng.choice([-1, -2, -3, -4])); depth -= 1
            elif depth >= 1 and rng.random() < 0.2:
                p.append(-5); depth += 1
            else:
                p.append(rng.choice([rng.randint(0, 9), rng.randint(0, 100000), rng.randint(0, 2**31 - 1)])); depth += 1
        progs.append(p)
    for p in progs:
        starts.append(len(toks))
        toks += p + [-6]
    add(case("rpn_eval", [2], [8], [B("tokens", "i32*", toks), B("start", "i32*", starts), O("result", "i32*", 16),
                                     O("depth", "i32*", 16)],
             ["local-array", "switch", "loop", "wraparound", "data-dependent-loop", "multi-block"]))

    keys = [b"Key", b"Wiki", b"Secret", b"\x01\x02\x03\x04\x05", b"qwenGPU-rc4-key!", b"\x00", b"ab", b"Plaintext"]
    kb = b"".join(k + b"\0" * (16 - len(k)) for k in keys)
    add(case("rc4_keystream", [2], [4], [B("keys", "u32*", pack_bytes(kb)), B("lens", "i32*", [len(k) for k in keys]),
                                         S("nwords", "i32", 4), O("out", "u32*", 32)],
             ["local-array", "bytes", "nested-loops", "rem-signed", "cipher", "multi-block"]))

    rng = random.Random(47)
    n = 32
    s8 = [rng.randint(-128, 127) for _ in range(n)]; s8[:3] = [-128, 127, -1]
    u8 = [rng.randint(0, 255) for _ in range(n)]; u8[:3] = [255, 0, 128]
    s16 = [rng.randint(-32768, 32767) for _ in range(n)]; s16[:3] = [-32768, 32767, -1]
    u16 = [rng.randint(0, 65535) for _ in range(n)]; u16[:3] = [65535, 0, 32768]
    add(case("small_types", [2], [16], [B("s8", "u32*", pack_bytes([v & 0xFF for v in s8])), B("u8", "u32*", pack_bytes(u8)),
                                         B("s16", "u32*", pack16(s16)), B("u16", "u32*", pack16(u16)),
                                         O("out16", "u32*", 16), O("out8", "u32*", 8), O("sums", "i32*", 64)],
             ["bytes", "halfwords", "sign-extend", "truncate", "multi-block"]))

    rng = random.Random(48)
    a = [2**64 - 1, 2**64 - 1, 0, 0, 1, 2**63] + [r_u64(rng) for _ in range(26)]
    b = [1, 0, 1, 0, 2**64 - 1, 2**63] + [r_u64(rng) for _ in range(26)]
    add(case("add128", [2], [8], [B("a", "u64*", a), B("b", "u64*", b), O("sum", "u64*", 32), O("diff", "u64*", 32),
                                   O("prod", "u64*", 32)],
             ["int64", "carry", "mulhi64", "compare", "wraparound", "multi-block"]))

    rng = random.Random(49)
    recs = []
    for i in range(12):
        rid = rng.randint(-(2**31), 2**31 - 1) if i % 3 else rng.randint(-1000, 1000)
        dx = rng.randint(-32768, 32767)
        kind = rng.randint(0, 255)
        bias = rng.randint(-128, 127)
        tag = r_u64(rng)
        raw = struct.pack("<ihBbQ", rid, dx, kind, bias, tag)
        recs += list(struct.unpack("<QQ", raw))
    add(case("struct_records", [2], [8], [B("recs", "u64*", recs), S("n", "i32", 12), O("out", "i64*", 16),
                                           O("small", "i32*", 16)],
             ["struct", "bytes", "halfwords", "sign-extend", "int64", "int64-shift", "bounds-check", "multi-block"]))


def atomics(add):
    """Atomics: integer and float, global and shared."""
    rng = random.Random(50)
    n = 40
    add(case("atomic_minmax_keys", [3], [16], [S("n", "i32", n), B("keys", "i32*", [rng.randint(0, 1000) for _ in range(48)]),
                                                B("vals", "i32*", [r_i32(rng) for _ in range(48)]),
                                                B("mins", "i32*", [2**31 - 1] * 4, True), B("maxs", "i32*", [-(2**31)] * 4, True),
                                                B("umins", "u32*", [0xFFFFFFFF] * 4, True), B("umaxs", "u32*", [0] * 4, True)],
             ["atomic-minmax", "bounds-check", "multi-block"]))

    rng = random.Random(51)
    vals = [r_u32(rng) | 0x01000010 for _ in range(64)]
    add(case("bitwise_atomics", [2], [32], [B("in", "u32*", vals), O("per_block", "u32*", 6),
                                             B("global_acc", "u32*", [0xFFFFFFFF, 0, 0x13579BDF], True)],
             ["atomic-bitwise", "atomic-shared", "shared-static", "syncthreads", "multi-block"]))

    rng = random.Random(52)
    add(case("exch_claim", [4], [8], [B("slots", "i32*", [rng.randint(-99, 99) for _ in range(32)], True),
                                      B("vals", "i32*", [rng.randint(1000, 2000) for _ in range(32)]), O("old", "i32*", 32),
                                      B("lock", "i32*", [0, 0, 0, 5], True), B("winners", "i32*", [0], True)],
             ["atomic-exch", "atomic-add", "multi-block"]))

    rng = random.Random(53)
    facs = [rng.randint(1, 2**32 - 1) | 1 for _ in range(64)]
    fv = [rng.randint(-1000, 1000) / 8.0 for _ in range(64)]
    add(case("cas_accumulate", [2], [32], [B("factors", "u32*", facs), B("vals", "f32*", fv),
                                           B("prods", "u32*", [1, 3, 5, 7], True), B("maxes", "f32*", [-1000.0, 100.0], True)],
             ["atomic-cas", "float-compare", "fmin-fmax", "device-function", "while-loop", "multi-block"]))

    add(case("ticket_atomics", [2], [20], [B("counter", "u32*", [0], True), B("seen", "u32*", [0, 0], True),
                                           B("wrap", "u32*", [3, 2], True), B("down", "i32*", [100], True),
                                           B("ticket_sum", "u32*", [0], True)],
             ["atomic-add", "atomic-bitwise", "atomic-inc-dec", "atomic-sub", "multi-block"]))

    rng = random.Random(54)
    v64 = [r_u64(rng) >> rng.randint(0, 63) for _ in range(48)]
    vf = [rng.randint(-4000, 4000) / 2.0 for _ in range(48)]
    add(case("atomic_wide", [3], [16], [B("v64", "u64*", v64), B("vf", "f32*", vf),
                                        B("acc", "u64*", [5, 0, 2**64 - 1], True), B("facc", "f32*", [0.5, -2.0], True),
                                        B("mm", "i64*", [2**63 - 1, -(2**63)], True)],
             ["atomic-add", "atomic-minmax", "atomic-float", "int64", "multi-block"]))

    rng = random.Random(55)
    text = bytes(rng.randint(0, 255) for _ in range(180)) + TEXT[:20]
    add(case("shared_histogram", [2], [32], [B("text", "u32*", pack_bytes(text)), S("n", "i32", 197),
                                              B("hist", "u32*", [0] * 16, True)],
             ["histogram", "atomic-shared", "atomic-add", "shared-static", "syncthreads", "grid-stride", "bytes",
              "multi-block"]))


def warp_level(add):
    """Warp-level: shuffles, votes, compaction, scans."""
    rng = random.Random(60)
    srcs = [0, 1, 3, 4, 7, 8, 15, 16, 31, 32, 33, -1, -2, -33, 63, 100] * 4
    rng.shuffle(srcs)
    add(case("shfl_width_bcast", [1], [64], [B("in", "i32*", [rng.randint(-10**6, 10**6) for _ in range(64)]),
                                              B("src", "i32*", srcs), O("out", "i32*", 256)],
             ["shfl", "shfl-width", "two-warps"]))

    rng = random.Random(61)
    add(case("shfl_updown_width", [2], [32], [B("in", "i32*", [rng.randint(-10**6, 10**6) for _ in range(64)]),
                                               B("delta", "i32*", [rng.choice([0, 1, 2, 5, 16, 31, 33, -1]) for _ in range(64)]),
                                               O("out", "i32*", 256)],
             ["shfl-up", "shfl-down", "shfl-width", "multi-block"]))

    rng = random.Random(62)
    fin = [rng.randint(-2**20, 2**20) / 1024.0 * (1 + rng.random()) for _ in range(64)]
    add(case("shfl_xor_allreduce", [2], [32], [B("in", "i32*", [rng.randint(-10**6, 10**6) for _ in range(64)]),
                                                B("fin", "f32*", fin), O("out", "i32*", 192), O("out64", "i64*", 64),
                                                O("fout", "f32*", 64)],
             ["shfl-xor", "shfl-width", "reduction", "int64", "float-add-sub", "min-max", "multi-block"]))

    rng = random.Random(63)
    vals = [rng.choice([rng.randint(-100, 100), 7, 0, 1]) for _ in range(48)]
    add(case("warp_vote_partial", [1], [48], [B("in", "i32*", vals), O("masks", "u32*", 144), O("flags", "i32*", 48)],
             ["ballot", "any", "all", "activemask", "partial-warp", "divergence"]))

    rng = random.Random(64)
    add(case("warp_compact", [2], [32], [B("in", "i32*", [rng.randint(-1000, 1000) for _ in range(64)]),
                                         O("out", "i32*", 64, fill=0), O("counts", "i32*", 2)],
             ["ballot", "popc", "compaction", "scatter", "multi-block"]))

    rng = random.Random(65)
    heads = [1 if rng.random() < 0.2 else 0 for _ in range(64)]
    heads[33] = 1
    add(case("segmented_scan", [2], [32], [B("in", "i32*", [rng.randint(-1000, 1000) for _ in range(64)]),
                                           B("head", "i32*", heads), O("out", "i32*", 64), O("seg_start", "i32*", 64)],
             ["scan", "ballot", "clz", "shfl-up", "multi-block"]))


def floating_point(add):
    """Single precision: rounding modes, conversions, edge cases."""
    rng = random.Random(70)
    xs = [0.0, 1.0, -1.0, 0.5, 2.0, -2.5, 1.0 / 3.0, 3.14159] + [rng.uniform(-3, 3) for _ in range(16)]
    coef = [1.0, -0.5, 1.0 / 6.0, 0.1, -1.0 / 24.0, 0.3, -0.01]
    add(case("horner_poly", [3], [8], [S("n", "i32", 22), B("x", "f32*", xs), B("coef", "f32*", coef), S("degree", "i32", 6),
                                        O("y", "f32*", 24)],
             ["fma", "loop", "bounds-check", "polynomial", "multi-block"]))

    rng = random.Random(71)
    a = [1.0, 1.0, -1.0, 3.0, 1e30, 1e-30, 16777216.0, -16777217.0, 0.1, -0.1, 7.0, 1.0] + [rng.uniform(-100, 100) for _ in range(4)]
    b = [3.0, 1e-8, 1e-8, -7.0, 1e10, 3.0, 1.0, -1.0, 0.3, 0.3, -0.2, -3.0] + [rng.uniform(-100, 100) or 1.0 for _ in range(4)]
    c = [1e-8, -1e-8, 0.5, 2.0, -1e38, 0.0, -16777216.0, 1.0, -0.03, 0.03, 1.4, 1.0] + [rng.uniform(-100, 100) for _ in range(4)]
    add(case("float_round_modes", [1], [16], [B("a", "f32*", a), B("b", "f32*", b), B("c", "f32*", c), O("out", "f32*", 192)],
             ["float-add-sub", "float-mul", "fma", "float-div", "rounding-modes"]))

    rng = random.Random(72)
    a = [1.0, -1.0, 2.0, 10.0, -7.5, 0.1, 1e20, -3e-20, 0.0, -0.0, 123.456, 1.0] + [rng.uniform(-1000, 1000) for _ in range(20)]
    b = [3.0, 3.0, -7.0, 0.1, 2.5, 0.3, 3e-10, 7e10, 5.0, 2.0, -0.001, -1.0] + [rng.uniform(-50, 50) or 2.0 for _ in range(20)]
    add(case("div_sqrt_f32", [2], [16], [B("a", "f32*", a), B("b", "f32*", b), O("out", "f32*", 256)],
             ["float-div", "sqrt", "fmin-fmax", "fabs", "float-select", "float-mul", "multi-block"]))

    rng = random.Random(73)
    vals = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 2147483520.0, 2147483648.0, -2147483648.0,
            -2147483904.0, 3e9, -3e9, 4294967040.0, 4294967296.0, 1e20, -1e20, 0.0, -0.0, 1e-3, -1e-3, 7.75, -7.75,
            8388607.5, -8388607.5, 9.2233715e18, 9.223372e18, -9.223372e18, -1e19, 100.25, 33554432.0]
    add(case("f2i_rounding", [2], [16], [B("in", "f32*", vals), O("si", "i32*", 128), O("ui", "u32*", 128),
                                          O("sl", "i64*", 64)],
             ["float-to-int", "rounding-modes", "saturation", "int64", "multi-block"]))

    rng = random.Random(74)
    ints = [0, 1, -1, 16777216, 16777217, 16777219, -16777217, 2**31 - 1, -(2**31), 2**31 - 65, 33554435, -33554435,
            0x7FFFFFC0, 123456789, -123456789, 5]
    i64s = [0, -1, 2**63 - 1, -(2**63), 2**53 + 1, -(2**53) - 1, 2**24 + 1, (2**40) * 3 + 7, -(2**62) - 12345,
            2**64 - 2**63 - 1, 2**25 + 3, 1, 100, -(2**31) - 1, 2**32 + 1, 999999999999]
    add(case("i2f_rounding", [1], [16], [B("in", "i32*", ints), B("in64", "i64*", i64s), O("out", "f32*", 192)],
             ["int-to-float", "rounding-modes", "int64"]))

    vals = [1.0, -1.0, 0.0, -0.0, 1.5, 3.0e38, 1.17549435e-38, 1.0e-40, -2.5e-42, 0.1, -123.456, 65504.0, 2.0 ** -126,
            2.0 ** 127, -7.0, 1e-10]
    add(case("float_bits", [1], [16], [B("in", "f32*", vals), O("info", "i32*", 48), O("out", "f32*", 48)],
             ["float-bits", "bitwise", "shift-logical", "select", "subnormal"]))

    add(case("mandelbrot", [2, 2], [8, 4], [S("x0", "f32", -2.0), S("y0", "f32", -1.125), S("dx", "f32", 0.15625),
                                             S("dy", "f32", 0.3125), S("max_iter", "i32", 24), O("iters", "i32*", 128),
                                             O("mag", "f32*", 128)],
             ["float-mul", "float-add-sub", "fma", "float-compare", "int-to-float", "while-loop", "data-dependent-loop",
              "2d-block", "2d-grid", "divergence", "multi-block"]))

    rng = random.Random(75)
    vals = [1.0, 2.0, 4.0, 0.25, 1e6, 3.0, 10.0, 1e-4, 123456.78, 2.0e30, 0.5, 7.0] + [rng.uniform(0.001, 5000) for _ in range(8)]
    add(case("newton_sqrt", [3], [8], [S("n", "i32", 20), B("in", "f32*", vals), O("root", "f32*", 24), O("iters", "i32*", 24),
                                        O("ulps", "i32*", 24)],
             ["float-div", "float-mul", "float-add-sub", "float-compare", "sqrt", "while-loop", "data-dependent-loop",
              "bounds-check", "multi-block"]))

    rng = random.Random(76)
    vals = [rng.uniform(-100, 100) * (10 ** rng.randint(-3, 3)) for _ in range(128)]
    add(case("float_tree_reduce", [2], [64], [B("in", "f32*", vals), O("out", "f32*", 6)],
             ["reduction", "float-add-sub", "fmin-fmax", "shared-static", "syncthreads", "multi-block"]))

    rng = random.Random(77)
    m = [0.5, -0.25, 0.0, 3.0, 0.25, 0.5, 0.125, -1.0, 0.0, 0.0, 1.0, 2.5, 0.0, 0.0, 0.0, 1.0]
    pts = []
    for i in range(16):
        pts += [rng.uniform(-10, 10), rng.uniform(-10, 10), rng.uniform(-10, 10), 1.0 if i % 4 else 0.5]
    add(case("mat4_transform", [2], [8], [B("m", "f32*", m), B("pts", "f32*", pts), O("out", "f32*", 64), S("n", "i32", 15)],
             ["fma", "float-mul", "vector-load", "vector-store", "bounds-check", "multi-block"]))

    rng = random.Random(78)
    vals = [0.0, 0.25, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 100.0, -100.0, 1e-3, -1e-3] + [rng.uniform(-5, 5) for _ in range(20)]
    add(case("activations_f32", [2], [16], [B("x", "f32*", vals), O("out", "f32*", 192)],
             ["fmin-fmax", "float-compare", "select", "float-div", "fma", "fabs", "float-mul", "multi-block"]))

    rng = random.Random(79)
    rows, cols = 20, 12
    A = [rng.uniform(-2, 2) for _ in range(rows * cols)]
    x = [rng.uniform(-2, 2) for _ in range(cols)]
    bb = [rng.uniform(-1, 1) for _ in range(24)]
    add(case("matvec_f32", [3], [8], [S("rows", "i32", rows), S("cols", "i32", cols), B("A", "f32*", A), B("x", "f32*", x),
                                       B("b", "f32*", bb), O("y", "f32*", 24)],
             ["fma", "fma-contraction", "loop", "matvec", "bounds-check", "multi-block"]))

    rng = random.Random(80)
    vals = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.4, 0.3, 1e10, -1e10, 4194304.5, -4194304.5, "inf", "-inf", 0.75,
            -7.25, 1e-3, 0.999, 1.0, -3.0] + [rng.uniform(-100, 100) for _ in range(12)]
    cls_in = list(vals)
    cls_in[3], cls_in[17], cls_in[30] = "nan", "nan", 0.0
    add(case("float_rounding_fns", [2], [16], [B("in", "f32*", vals), B("cls_in", "f32*", cls_in), O("out", "f32*", 192),
                                                O("cls", "i32*", 32)],
             ["float-round-int", "saturate", "reciprocal", "float-classify", "inf-nan", "threadfence", "multi-block"]))

    rng = random.Random(82)
    keys = [rng.choice([1, 2, 3, -5, 7, -9]) for _ in range(32)] + [42] * 32
    base = 0x123456789
    keys64 = [base + (rng.randint(0, 2) << 32) for _ in range(32)] + [rng.choice([-1, 7, 1 << 40]) for _ in range(32)]
    add(case("warp_match_uni", [1], [64], [B("keys", "i32*", keys), B("keys64", "i64*", keys64),
                                           O("any_mask", "u32*", 192), O("all_mask", "u32*", 64), O("flags", "i32*", 64)],
             ["match-any", "match-all", "uni", "syncwarp", "threadfence", "int64", "divergence", "two-warps"]))

    rng = random.Random(83)
    n = 16
    pos = [0, 31, 32, 40, 8, 0, 16, 24] + [rng.randint(0, 40) for _ in range(8)]
    ln = [0, 1, 31, 32, 33, 8, 16, 9] + [rng.randint(0, 40) for _ in range(8)]
    fs = [0.0, -0.0, 1.0, "inf", "-inf", "nan", 1e-40, -1e-45, 3e38, 1.17549435e-38, -2.5, 7.0, -1e-39, 0.1,
          -3.4028235e38, 1e-30]
    gs = [-0.0, 0.0, -1.0, 1.0, -1e-40, 1e-40, 5.0, -5.0] + [rng.uniform(-2, 2) for _ in range(8)]
    add(case("inline_ptx_ops", [1], [n], [B("a", "u32*", [r_u32(rng) for _ in range(n)]),
                                          B("b", "u32*", [r_u32(rng) for _ in range(n)]), B("pos", "u32*", pos),
                                          B("len", "u32*", ln), B("f", "f32*", fs), B("g", "f32*", gs),
                                          O("out", "u32*", 256), B("red_acc", "u32*", [5, 0, 0xFFFFFFFF, 7], True),
                                          O("after", "i32*", n)],
             ["inline-asm", "bitfield", "mul24", "mad-hi", "lop3", "cnot", "slct", "testp", "bfind", "red", "exit",
              "subnormal", "inf-nan"]))

    rng = random.Random(84)
    add(case("atomics64_shared", [2], [32], [B("in", "u64*", [r_u64(rng) >> rng.choice([0, 0, 1, 20, 40]) for _ in range(64)]),
                                             B("fin", "f32*", [rng.randint(-300, 300) / 4.0 for _ in range(64)]),
                                             O("out", "u64*", 8), O("fout", "f32*", 2),
                                             B("slots", "u64*", [r_u64(rng) for _ in range(64)], True),
                                             O("old", "u64*", 64)],
             ["atomic-shared", "atomic-add", "atomic-minmax", "atomic-cas", "atomic-exch", "atomic-float", "int64",
              "read-only-load", "shared-static", "syncthreads", "multi-block"]))

    p2 = lambda e: 2.0 ** e  # noqa: E731
    triples = [(4097, 4097, p2(-100)), (4097, 4097, -p2(-100)), (4097, 4097, 0.0), (-4097, 4097, p2(-100)),
               (1 + p2(-23), 1 - p2(-23), -1.0), (p2(-70), p2(-70), 0.0), (1e-40, 1.5, 1e-41), (p2(-149), 0.5, 0.0),
               (3e38, 3e38, -1e38), (-3e38, 3e38, 1e38), (3.4028235e38, 1.0, 3.4028235e38),
               (1.17549435e-38, 0.5, -p2(-149)), (1e-38, 3.0, 1e-39), (7.0, 0.1, 1e-3), (1.0, 3.0, 2.0),
               (16777216.0, 1.0, 1.0), (16777218.0, -1.0, 1.0), (0.1, 0.2, 0.3), (1e-20, 1e-20, 1e-40),
               (-0.0, 5.0, 0.0), (-0.0, 5.0, -0.0), (2.0, -3.0, 6.0), (1e10, 1e-10, -1.0), (-p2(-130), p2(-10), p2(-140))]
    add(case("float_edge_cases", [2], [12], [B("a", "f32*", [t[0] for t in triples]), B("b", "f32*", [t[1] for t in triples]),
                                             B("c", "f32*", [t[2] for t in triples]), O("out", "f32*", 240)],
             ["fma", "rounding-modes", "subnormal", "overflow", "signed-zero", "float-div", "sqrt", "float-add-sub",
              "float-mul", "float-to-int", "multi-block"]))

    # uses instructions the interpreter may not implement (sad, copysign, directed-rounding float
    # arithmetic); test_suite accepts UnsupportedPTX for these, or checks them when supported
    rng = random.Random(81)
    add(case("sad_copysign", [1], [16], [B("a", "i32*", [r_i32(rng) for _ in range(16)]),
                                         B("b", "i32*", [r_i32(rng) for _ in range(16)]),
                                         B("x", "f32*", [rng.uniform(-9, 9) for _ in range(16)]),
                                         B("y", "f32*", [rng.uniform(-9, 9) for _ in range(16)]),
                                         O("sad", "u32*", 32), O("cs", "f32*", 16)],
             ["sad", "copysign"]))


def double_precision(add):
    """Double precision: promotions from float code, arithmetic, directed rounding, conversions,
    atomics and reductions."""
    rng = random.Random(90)
    xs = [0.0, -0.0, 1.0, -1.0, 0.3, 0.30000001, 2.5, -7.75, 1e-3, 3.0, 1e30, -1e-30, 1.17549435e-38, 1e-40,
          3.4e38, 123456.78] + [rng.uniform(-100, 100) for _ in range(14)]
    add(case("f32_promote_f64", [2], [16], [B("x", "f32*", xs), O("out", "f32*", 192), O("wide", "f64*", 64),
                                             S("n", "i32", 30)],
             ["f64", "float-promotion", "f64-compare", "f64-fma", "sqrt", "float-div", "bounds-check", "multi-block"]))

    p2 = lambda e: 2.0 ** e  # noqa: E731
    a = [1.5, 0.1, 1.0 + p2(-52), 1e308, -1e308, 5e-324, 2.2250738585072014e-308, -0.0, 0.0, 3.0, -2.5, 1e-300,
         1.0 / 3.0, 7.0, 1e154, -4.5] + [rng.uniform(-1e3, 1e3) for _ in range(8)]
    b = [2.25, 0.2, 1.0 - p2(-53), 1e308, 1e308, 0.5, -2.2250738585072014e-308, 5e-324, -1e-300, 0.0, -2.5, 1e-300,
         3.0, -0.0, 1e154, 1e-310] + [rng.uniform(-50, 50) or 1.0 for _ in range(8)]
    c = [1.0, 0.3, -1.0, -1e308, 1e300, -5e-324, 0.0, 0.0, -0.0, 1.0, 6.25, -1e-300, -1.0, "inf", -1e308,
         2.0] + [rng.uniform(-1e3, 1e3) for _ in range(8)]
    add(case("f64_arith", [2], [16], [B("a", "f64*", a), B("b", "f64*", b), B("c", "f64*", c),
                                       O("out", "f64*", 256), S("n", "i32", 21)],
             ["f64", "f64-arith", "f64-fma", "f64-div", "sqrt", "reciprocal", "fmin-fmax", "fabs", "copysign",
              "subnormal", "signed-zero", "overflow", "bounds-check", "multi-block"]))

    a = [1.0, 1.0, -1.0, 3.0, 1e300, 1e-300, p2(53), -(p2(53) + 2), 0.1, -0.1, 7.0, 1.0, 5e-324, 1.7976931348623157e308]
    b = [3.0, 1e-17, 1e-17, -7.0, 1e10, 3.0, 1.0, -1.0, 0.3, 0.3, -0.2, -3.0, 0.5, 1.5]
    c = [1e-17, -1e-17, 0.5, 2.0, -1e308, 0.0, -p2(53), 1.0, -0.03, 0.03, 1.4, 1.0, -5e-324, -1e308]
    add(case("f64_round_modes", [1], [14], [B("a", "f64*", a), B("b", "f64*", b), B("c", "f64*", c),
                                             O("out", "f64*", 252)],
             ["f64", "f64-rounding-modes", "f64-fma", "f64-div", "sqrt", "reciprocal", "subnormal", "overflow"]))

    vals = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2147483647.5, -2147483648.5, 4294967295.5, 4294967296.0, p2(63),
            -9.3e18, p2(64), -1e300, 1e-310, 3.4028235677973366e38, 3.5e38, 1e-45, 0.1, -0.0, 123456789.987654321,
            16777217.0, -16777219.0, 1.00000005960464478, 7.9e-39, 9.007199254740993e15, -0.49999999999999994,
            1e20, 4503599627370497.0, -2.9e-45, 0.7, -3.75]
    ints = [0, 1, -1, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63), -2, 2**54 + 3, 2**62 + 2**10 + 1, 123456789,
            -987654321987, 2**31 + 7, -(2**31) - 9, 2**40 + 1, 3, 5, 2**60 - 1, 17, -(2**55) - 5, 6, 7, 8, 9, 10,
            11, 12, 13, 14, 15, 16, 2**52 + 1]
    add(case("f64_convert", [2], [16], [B("in", "f64*", vals), B("ints", "i64*", ints), O("si", "i32*", 128),
                                         O("ui", "u32*", 128), O("sl", "i64*", 128), O("ul", "u64*", 64),
                                         O("f", "f32*", 128), O("d", "f64*", 256), O("r", "f64*", 128)],
             ["f64", "f64-convert", "f64-to-int", "int-to-f64", "f64-to-f32", "f32-to-f64", "rounding-modes",
              "saturation", "float-round-int", "int64", "subnormal", "multi-block"]))

    v = [rng.randint(-4000, 4000) / 8.0 for _ in range(64)]
    add(case("f64_atomic_add", [2], [32], [B("v", "f64*", v), B("acc", "f64*", [0.5, -2.0, 0.0, 1e6, 0.0], True),
                                            O("per_block", "f64*", 4), S("scale", "f64", 0.375)],
             ["f64", "f64-param", "atomic-f64", "atomic-add", "atomic-shared", "shared-static", "syncthreads",
              "multi-block"]))

    vals = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-8, 8) for _ in range(128)]
    vals[5], vals[77] = 5e-324, -1e300
    w = [rng.uniform(-2, 2) for _ in range(8)]
    add(case("f64_reduce", [2], [64], [B("in", "f64*", vals), B("w", "f64*", w), O("out", "f64*", 134),
                                        O("dots", "f64*", 128), S("len", "i32", 8)],
             ["f64", "f64-reduction", "reduction", "shfl-xor", "f64-fma", "fmin-fmax", "shared-static",
              "syncthreads", "multi-block"]))


# bit patterns for nan_results (f32 / f64): payloads, signalling NaNs, infinities, zeros
_FNAN = 0x7FC12345
_DNAN = 0x7FF8DEADBEEF0001
NAN_ROWS = [  # (x, y) f32 bits, (a, b) f64 bits
    (0x00000000, 0x7F800000, 0x0000000000000000, 0x7FF0000000000000),          # 0 * inf
    (0x7F800000, 0xFF800000, 0x7FF0000000000000, 0x7FF0000000000000),          # inf - inf
    (0xBF800000, 0x00000000, 0xBFF0000000000000, 0x0000000000000000),          # sqrt(-1), -1 / 0
    (0x00000000, 0x00000000, 0x0000000000000000, 0x8000000000000000),          # 0 / 0
    (_FNAN, 0x3F800000, _DNAN, 0x4000000000000000),                            # a quiet NaN with payload
    (0x3F800000, 0x7F800001, 0x4008000000000000, 0x7FF0000000000001),          # signalling NaNs
    (0xFFC00000, 0x7FA00000, 0xFFF8000000000BBB, 0x7FF123456789ABCD),          # two NaNs: which wins
    (0x7FFFFFFF, 0x7F800000, 0x7FF0000000000000, 0x7FF4000000000000),
    (0x40400000, 0xFFFFFFFF, 0x7FF0000000000001, 0xFFF0000000000000),
    (0x7F800000, 0x00000000, 0x7FF0000000000000, 0x0000000000000000),          # fma(inf, 0, .)
    (0x00000001, 0x80000000, 0x8000000000000000, 0xFFF0000000000000),
    (0x40400000, 0x7FC00000, 0xFFFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF),
    (0x7F7FFFFF, 0x7F7FFFFF, 0x7FE1CCF385EBC8A0, 0x7FE1CCF385EBC8A0),          # no NaN: overflow
    (0xFF800000, 0x7F800000, 0xFFF0000000000000, 0x7FF0000000000000),
    (0x7FBFFFFF, 0xC0000000, 0x7FF7FFFFFFFFFFFF, 0x8000000000000000),
    (0x40200000, 0x3F000000, 0x4004000000000000, 0xBFF8000000000000),          # plain numbers
]


def nan_results(add):
    """NaN results in f32 and f64: invalid operations and NaN operands with payloads."""
    add(case("nan_results", [1], [16], [B("fbits", "u32*", [v for r in NAN_ROWS for v in r[:2]]),
                                         B("dbits", "u64*", [v for r in NAN_ROWS for v in r[2:]]),
                                         O("fout", "u32*", 160), O("dout", "u64*", 192), O("iout", "i64*", 64)],
             ["nan", "inf-nan", "f64", "f64-arith", "f64-fma", "f64-convert", "fmin-fmax", "sqrt", "float-div",
              "f64-to-int", "float-to-int"]))


# The steps build() runs, in order (the order of cases.json).
def independent_scheduling(add):
    """Threads of one warp waiting for each other: spin locks, a ticket lock, flag hand-offs."""
    for name, grid, block in (("spin_lock_cas", 1, 48), ("spin_lock_outside", 2, 40), ("ticket_lock", 1, 96)):
        t = "u32*" if name == "ticket_lock" else "i32*"
        add(case(name, [grid], [block], [B("lock", t, [0, 0], True), B("total", "i32*", [0, 0], True),
                                         B("seen", "i32*", [0] * 128, True), S("n", "i32", block)],
                 ["spin-lock", "atomic-cas" if "spin" in name else "atomic-add", "volatile", "while-loop"]
                 + (["multi-block"] if grid > 1 else []), source="spin_locks", kernel=name))
    add(case("flag_chain", [1], [128], [B("data", "i32*", [3, -7, 11, 5]), O("out", "i32*", 128)],
             ["flag-hand-off", "shared-static", "syncthreads", "volatile", "while-loop"],
             source="spin_locks"))


def undefined_values(add):
    """PTX that reads registers before every thread wrote them, legally (nvcc's loop phis)."""
    rng = random.Random(90)
    x = [rng.randint(-9, 9) for _ in range(40)]
    for n in (40, 5):
        sfx = "" if n == 40 else "_short"
        add(case("last_positive", [1], [32], [B("x", "i32*", x), S("n", "i32", n), O("out", "i32*", 32)],
                 ["undefined-phi", "selp", "loop"], source="undefined_phis", case_name="last_positive" + sfx))
    add(case("first_match", [1], [32], [B("x", "i32*", x), S("n", "i32", 40), S("key", "i32", -4),
                                        O("out", "i32*", 32)], ["undefined-phi", "early-exit-loop"],
             source="undefined_phis"))
    add(case("prev_value", [1], [32], [B("x", "i32*", x), S("n", "i32", 40), O("out", "i32*", 32)],
             ["undefined-phi", "int32-mul", "loop", "rem-signed"], source="undefined_phis"))
    add(case("min_index", [1], [32], [B("x", "f32*", [float(v) for v in x]), S("n", "i32", 40),
                                      O("out", "i32*", 32)], ["undefined-phi", "float-compare", "loop"],
             source="undefined_phis"))


STEPS = (integer_arithmetic, bit_operations, control_flow, memory, atomics, warp_level, floating_point,
         double_precision, nan_results, independent_scheduling, undefined_values)


def build():
    """Every case of the suite: each step appends its cases in turn."""
    cases = []
    for step in STEPS:
        step(cases.append)
    return cases


def _first_comment(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[2:].strip())
    return " ".join(lines)


def write_readme(cases):
    by_kernel = {}
    for c in cases:
        by_kernel.setdefault(c["source"], []).append(c)
    feats = {}
    for c in cases:
        for f in c["features"]:
            feats.setdefault(f, set()).add(c["kernel"])
    out = ["# qwenGPU kernel suite", "",
           f"{len(by_kernel)} small CUDA kernels, {len(cases)} launch cases (`cases.json`, the gpu-truth case "
           "format), and `reference.py`, an independent numpy/Python reference for every case.",
           "Generated by `python -m gpu_layers.suite.make_cases` (edit that file, not `cases.json` or this README).",
           "`tests/test_suite.py` runs every case on the interpreter and compares bit for bit;",
           "`scripts/gpu_check_suite.py` runs them on a real GPU and writes a truth.json.", "",
           "Rules: at most 128 threads per launch, buffers of at most 256 elements, f32 inputs exactly",
           "representable in float32 (or \"nan\"/\"inf\"/\"-inf\"; NaNs with chosen bits come in integer",
           "buffers), no races, no undefined behaviour; float kernels use `__fmul_rn`/`__fadd_rn`/`__fmaf_rn`",
           "(doubles: `__dmul_rn`/`__dadd_rn`/`__fma_rn`), or a*b+c that nvcc contracts into `fma.rn`, so that",
           "ptxas cannot fuse a plain mul/add pair on hardware. NaN bit patterns follow the rules in",
           "`gpu_layers/interp/fp64.py` (case `nan_results`).", "",
           "| kernel | cases | what it does | features |", "| --- | --- | --- | --- |"]
    for src, cs in by_kernel.items():
        fs = sorted({f for c in cs for f in c["features"]})
        out.append(f"| `{cs[0]['kernel']}` | {', '.join(c['name'] for c in cs)} | {_first_comment(HERE / src)} "
                   f"| {', '.join(fs)} |")
    out += ["", "## Features", "", "| feature | kernels |", "| --- | --- |"]
    for f in sorted(feats):
        out.append(f"| {f} | {', '.join(sorted(feats[f]))} |")
    (HERE / "README.md").write_text("\n".join(out) + "\n")


def main():
    cases = build()
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    for c in cases:
        assert (HERE / c["source"]).is_file(), c["source"]
    text = json.dumps(cases, indent=None, separators=(", ", ": "))
    # one case per line keeps diffs readable
    text = "[\n" + ",\n".join(json.dumps(c) for c in cases) + "\n]\n"
    (HERE / "cases.json").write_text(text)
    write_readme(cases)
    print(f"wrote {len(cases)} cases ({len({c['source'] for c in cases})} kernels) to {HERE / 'cases.json'}")


if __name__ == "__main__":
    main()
