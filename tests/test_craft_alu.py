"""The one-lane integer ALU block (gpu_layers.craft.blocks.alu):

  1. its Python reference `alu_ref` agrees with the reference interpreter (the definition: it
     matches a real GPU) on one-instruction PTX kernels, for every op and width (and every source
     register width of the conversions), on edge values (0, 1, -1, MIN, MAX, shift amounts 0,
     w-1, w, 31, 32, 63, 64, huge) and random ones;
  2. the compiled block, for the tiny host's shapes and for Qwen3.5-2B's, driven through stock
     transformers (one prefill = chunked path, token-by-token decode with the cache = recurrent
     path, fp32), decodes to exactly alu_ref's (r, q) on random inputs of every op and width,
     every output dim inside the 0.25 re-digitization margin;
  3. its cost: depth 4 (4 layers compiled alone), the neuron count reported here.
"""
import numpy as np
import pytest

from gpu_layers.craft.assemble import compile_circuit
from gpu_layers.craft.blocks.alu import ALU_OPS, ALU_WIDTHS, OFF_RANGE_UNSPECIFIED, alu_ref
from gpu_layers.craft.testing import (TINY, alu_circuit, alu_operand_pairs, alu_rows, encode_rows, run_alu,
                                      run_paths)
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG
from gpu_layers.interp import launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.ptx import parse_ptx

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REAL_2B = {k: REAL_2B_TEXT_CONFIG[k] for k in TINY}
M64 = (1 << 64) - 1
SHIFTS = ("shl", "shr_u", "shr_s")


# ---- 1. alu_ref against the reference interpreter ---------------------------------------------

REG = {16: ("%rs", "u16"), 32: ("%r", "u32"), 64: ("%rd", "u64")}
PRED = {"pand": "and.pred", "por": "or.pred", "pxor": "xor.pred"}


def _reg(w, n):
    return f"{REG[w][0]}{n}"


def _to_width(w, dst, src64):
    return f"\tmov.b64 \t{dst}, {src64};\n" if w == 64 else f"\tcvt.{REG[w][1]}.u64 \t{dst}, {src64};\n"


def ptx_body(op, w, src_w=None):
    """One instruction of `op` at width w between loads of a, b, p (u64 slots) and stores of r, q.
    src_w: the source register width of a conversion."""
    sw = src_w or w
    A, Bw, D = _reg(sw, 10), _reg(w, 11), _reg(w, 12)
    body = ("\tld.param.u64 \t%rd1, [out];\n\tcvta.to.global.u64 \t%rd1, %rd1;\n"
            "\tld.param.u64 \t%rd2, [inp];\n\tcvta.to.global.u64 \t%rd2, %rd2;\n"
            "\tmov.u32 \t%r1, %tid.x;\n\tmov.u32 \t%r2, %ctaid.x;\n\tmov.u32 \t%r3, %ntid.x;\n"
            "\tmul.lo.u32 \t%r2, %r2, %r3;\n\tadd.u32 \t%r1, %r1, %r2;\n"
            "\tmul.wide.u32 \t%rd3, %r1, 24;\n\tadd.s64 \t%rd2, %rd2, %rd3;\n"
            "\tmul.wide.u32 \t%rd3, %r1, 16;\n\tadd.s64 \t%rd1, %rd1, %rd3;\n"
            "\tld.global.u64 \t%rd20, [%rd2];\n\tld.global.u64 \t%rd21, [%rd2+8];\n"
            "\tld.global.u64 \t%rd22, [%rd2+16];\n\tsetp.ne.u64 \t%p1, %rd22, 0;\n")
    body += _to_width(sw, A, "%rd20") + _to_width(w, Bw, "%rd21")
    body += "\tmov.u64 \t%rd30, 0;\n\tmov.u64 \t%rd31, 0;\n"          # r, q
    t = REG[w][1][1:]
    if op.startswith("setp_"):
        cmp = op[5:]
        ty = "u" if cmp in ("eq", "ne") else cmp[-1]
        body += f"\tsetp.{cmp[:2]}.{ty}{t} \t%p2, {A}, {Bw};\n\tselp.u64 \t%rd31, 1, 0, %p2;\n"
        return body
    if op in ("pand", "por", "pxor", "pnot"):
        body += ("\tand.b64 \t%rd23, %rd20, 1;\n\tsetp.ne.u64 \t%p3, %rd23, 0;\n"
                 "\tand.b64 \t%rd24, %rd21, 1;\n\tsetp.ne.u64 \t%p4, %rd24, 0;\n")
        body += "\tnot.pred \t%p2, %p3;\n" if op == "pnot" else f"\t{PRED[op]} \t%p2, %p3, %p4;\n"
        return body + "\tselp.u64 \t%rd31, 1, 0, %p2;\n"
    ins = {"mov_a": f"mov.b{t} \t{D}, {A}", "add": f"add.s{t} \t{D}, {A}, {Bw}",
           "sub": f"sub.u{t} \t{D}, {A}, {Bw}", "and": f"and.b{t} \t{D}, {A}, {Bw}",
           "or": f"or.b{t} \t{D}, {A}, {Bw}", "xor": f"xor.b{t} \t{D}, {A}, {Bw}",
           "not_a": f"not.b{t} \t{D}, {A}", "shl": f"shl.b{t} \t{D}, {A}, %r40",
           "shr_u": f"shr.u{t} \t{D}, {A}, %r40", "shr_s": f"shr.s{t} \t{D}, {A}, %r40",
           "min_u": f"min.u{t} \t{D}, {A}, {Bw}", "min_s": f"min.s{t} \t{D}, {A}, {Bw}",
           "max_u": f"max.u{t} \t{D}, {A}, {Bw}", "max_s": f"max.s{t} \t{D}, {A}, {Bw}",
           "selp": f"selp.b{t} \t{D}, {A}, {Bw}, %p1",
           "clz": f"clz.b{t} \t%r41, {A};\n\tcvt.u{t}.u32 \t{D}, %r41" if w == 64 else f"clz.b{t} \t{D}, {A}",
           "mstep": f"mstep.b{t} \t{D}, {A}, {Bw}", "dstep": f"dstep.b{t} \t{D}, {A}, {Bw}",
           "mquad": f"mquad.b{t} \t{D}, {A}, {Bw}", "mtrip": f"mtrip.b{t} \t{D}, {A}, {Bw}"}
    if op in SHIFTS:
        body += "\tcvt.u32.u64 \t%r40, %rd21;\n"                 # the amount: b as a .u32
    if op == "zext":
        body += f"\tcvt.u{t}.u{sw} \t{D}, {A};\n" if sw != w else f"\tmov.b{t} \t{D}, {A};\n"
    elif op[:4] in ("sext", "zext"):
        s, k = int(op[4:]), ("s" if op[0] == "s" else "u")
        body += f"\tcvt.{k}{t}.{k}{s} \t{D}, {A};\n" if s != w else f"\tmov.b{t} \t{D}, {A};\n"
    else:
        body += f"\t{ins[op]};\n"
    body += "\tmov.b64 \t%rd30, %rd12;\n" if w == 64 else f"\tcvt.u64.{REG[w][1]} \t%rd30, {D};\n"
    return body


def run_interp(op, w, rows, src_w=None):
    """[(r, q)] of the interpreter for rows of (a, b, p); a, b truncated to the register widths."""
    body = ptx_body(op, w, src_w) + "\tst.global.u64 \t[%rd1], %rd30;\n\tst.global.u64 \t[%rd1+8], %rd31;\n\tret;\n"
    kernel = parse_ptx(kernel_ptx(body, params=(("out", "u64"), ("inp", "u64")))).kernel()
    kernel.machine = op in ("mstep", "dstep", "mquad", "mtrip")         # the machine's own instructions: machine code only
    block = 128
    n = -(-len(rows) // block) * block
    inp = np.zeros((n, 3), np.uint64)
    inp[:len(rows)] = np.array(rows, dtype=np.uint64)
    res = launch(kernel, n // block, block, [np.zeros(2 * n, np.uint64), inp.reshape(-1)])
    out = res.buffers[0].reshape(n, 2)
    return [(int(r), int(q)) for r, q in out[:len(rows)]]


def test_alu_ops_table():
    assert len(ALU_OPS) == len(set(ALU_OPS)) == 41
    assert ALU_OPS[:3] == ("mov_a", "add", "sub") and ALU_WIDTHS == (16, 32, 64)


def test_reference_agrees_with_the_interpreter():
    """alu_ref(op, w, a, b, p) == what one PTX instruction computes on the reference interpreter,
    for every op, width and (conversions) source register width; the ALU's operands are the
    source registers zero-extended to 64 bits."""
    rng = np.random.default_rng(7)
    checked = 0
    for op in ALU_OPS:
        for w in ALU_WIDTHS:
            if op == "clz" and w == 16:                     # PTX has clz.b32 and clz.b64 only
                continue
            if op in ("mquad", "mtrip") and w != 64:        # the machine's 64-bit steps only
                continue
            srcs = [None]
            if op == "zext":
                srcs = list(ALU_WIDTHS)
            elif op[:4] in ("sext", "zext"):
                srcs = [s for s in ALU_WIDTHS if s >= int(op[4:])]
            for sw in srcs:
                pairs = alu_operand_pairs(rng, op, w, 64)
                rows = [(x, y, int(rng.integers(0, 2))) for x, y in pairs]
                got = run_interp(op, w, rows, sw)
                for (x, y, p), (gr, gq) in zip(rows, got):
                    xa = x & ((1 << (sw or w)) - 1)            # the source register's bits
                    yb = y if op in SHIFTS else y & ((1 << w) - 1)
                    r, q = alu_ref(op, w, xa, yb, p)
                    if op.startswith("setp_") or op in ("pand", "por", "pxor", "pnot"):
                        assert (r, q) == (0, gq), (op, w, hex(x), hex(y), p, q, gq)
                    else:
                        assert (r, q) == (gr, 0), (op, w, sw, hex(x), hex(y), p, hex(r), hex(gr))
                    checked += 1
    assert checked > 12_000


# ---- 2. the compiled block through stock transformers ------------------------------------------

@pytest.fixture(scope="module")
def tiny_alu():
    c, blk = alu_circuit()
    return compile_circuit(c, TINY), blk


def test_cost_and_depth(tiny_alu):
    comp, blk = tiny_alu
    c2, blk2 = alu_circuit()
    comp2 = compile_circuit(c2, REAL_2B)
    assert blk.cost.depth == 4 and comp.num_layers == 4 and comp2.num_layers == 4
    assert blk.cost.neurons == blk2.cost.neurons < 4800
    assert blk.cost.value_dims == 0
    per_stage = [st.neurons for st in blk.stages]
    assert max(per_stage) * 4 < REAL_2B["intermediate_size"]      # 4 lanes share each layer
    print(f"ALU cost: {blk.cost.neurons} neurons, stages {per_stage}, depth {blk.cost.depth}")
    print(comp.report())
    print(comp2.report())


def _assert_exact(res, label):
    for path, (wrong, margin) in res.items():
        assert wrong == 0, f"{label} {path}: {wrong} wrong rows"
        assert margin == 0, f"{label} {path}: {margin} outputs outside the margin"


def _prefix(n, T=64):
    return (n // T, n // T * T)


def test_exact_on_tiny_shapes(tiny_alu):
    """Every edge pair of every op and width, plus 64 random rows each (14,760 rows), in one
    prefill; 2,048 of them token by token."""
    comp, blk = tiny_alu
    vals, r, q = alu_rows(np.random.default_rng(1), 64)
    _assert_exact(run_alu(comp, blk, vals, r, q, {"prefill": _prefix(len(r)), "decode": (32, 2048)}),
                  "tiny")


def test_exact_on_qwen35_2b_shapes():
    c, blk = alu_circuit()
    comp = compile_circuit(c, REAL_2B)
    vals, r, q = alu_rows(np.random.default_rng(2), 16)
    _assert_exact(run_alu(comp, blk, vals, r, q, {"prefill": (32, 2048), "decode": (16, 512)}), "2B")


def test_exact_with_dual_and_memory_read_operands():
    """a as a dual field, b as a rail3 memory read (the register file's encoding), r and q dual."""
    c, blk = alu_circuit("dual", "rail3", "dual")
    comp = compile_circuit(c, TINY)
    vals, r, q = alu_rows(np.random.default_rng(3), 4)
    _assert_exact(run_alu(comp, blk, vals, r, q, {"prefill": (32, 2048)}), "dual/rail3")


def test_operands_outside_the_precondition_stay_on_code(tiny_alu):
    """A lane that is not issued feeds its register slot to the ALU, and past 32 registers a slot
    may hold a 64-bit value under a 32-bit op (f64_reduce's shr.s32 did: docs/machine.md §35).
    Any 64-bit a and b, every op and width: every field of the ALU decodes strictly (one field
    off its code moves the norm of the whole row), and r, q are alu_ref's except for the ops
    named OFF_RANGE_UNSPECIFIED."""
    comp, blk = tiny_alu
    rng = np.random.default_rng(5)
    cols = {"op": [], "width": [], "a": [], "b": [], "p": []}
    for k in range(len(ALU_OPS)):
        for wi, w in enumerate(ALU_WIDTHS):
            for _ in range(32):
                cols["op"].append(k)
                cols["width"].append(wi)
                for n in "ab":          # the sign bit at w set or clear, the bits above random
                    x = int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(0, 2))
                    cols[n].append(x ^ (x & (1 << (w - 1))) if rng.random() < 0.3 else x)
                cols["p"].append(int(rng.integers(0, 2)))
    vals = {n: np.array(v, dtype=np.uint64).view(np.int64) if n in "ab" else np.array(v)
            for n, v in cols.items()}
    X = encode_rows(comp, vals)
    n = len(X) // 64 * 64
    flat = run_paths(comp, X[:n].reshape(n // 64, 64, -1), paths=("prefill",))["prefill"]
    flat = flat.reshape(n, -1)
    for name in comp.layout.fields:
        if name.startswith(blk.name + "_"):
            _, ok = comp.decode(name, flat)
            assert ok.all(), f"{name} off its code in {int((~ok).sum())} rows"
    rv, _ = comp.decode(blk.outputs[0].name, flat)
    qv, _ = comp.decode(blk.outputs[1].name, flat)
    checked = 0
    for k in range(n):
        op, w = ALU_OPS[vals["op"][k]], ALU_WIDTHS[vals["width"][k]]
        if op not in OFF_RANGE_UNSPECIFIED:
            want = alu_ref(op, w, int(vals["a"][k]) & M64, int(vals["b"][k]) & M64, int(vals["p"][k]))
            assert (int(rv[k]) & M64, int(qv[k])) == want, (op, w, k)
            checked += 1
    assert checked > 2_000


# The long sweep (1,000 random rows per op and width, 125,376 rows with the edges, in prefill and
# 8,192 token by token: about 4 minutes) is scripts/check_alu_sweep.py.


def test_block_ref_is_alu_ref(tiny_alu):
    """Block.ref (what circuits built from the ALU are checked against) is alu_ref on field values."""
    comp, blk = tiny_alu
    rng = np.random.default_rng(4)
    vals, r, q = alu_rows(rng, 1)
    rf, qf = blk.outputs
    for k in range(len(r)):
        got = blk.ref({n: int(v[k]) for n, v in vals.items()})
        assert got == {rf.name: int(r[k]) & M64, qf.name: int(q[k])}
