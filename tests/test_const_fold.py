"""Constant folding before the lowering (gpu_layers.machine.const_fold): every foldable form of
numbers computes what the interpreter computes (wrap-around, PTX's clamped shift amounts, the
sign fill of shr.s), becomes a `mov` of its number, and nothing else is folded (a register
written twice, a guarded write, an operand that is not a number)."""
import numpy as np

from gpu_layers.interp import launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import lower
from gpu_layers.machine.const_fold import fold_constants
from gpu_layers.ptx.parser import parse_ptx

FORMS = [  # (instruction writing %rX from constants, width)
    "add.s32 {d}, %r1, -7", "sub.u32 {d}, %r1, 9", "mul.lo.s32 {d}, %r1, %r2", "mad.lo.u32 {d}, %r1, %r2, %r3",
    "shl.b32 {d}, %r2, 31", "shl.b32 {d}, %r2, 40", "shr.u32 {d}, %r3, 3", "shr.s32 {d}, %r3, 3",
    "shr.s32 {d}, %r3, 99", "and.b32 {d}, %r1, %r3", "or.b32 {d}, %r1, 0xF0", "xor.b32 {d}, %r3, -1",
    "mov.u32 {d}, %r2", "mul.lo.u64 {d64}, %rd1, %rd2", "shl.b64 {d64}, %rd1, 63", "shr.s64 {d64}, %rd2, 70",
    "add.s64 {d64}, %rd1, %rd2", "sub.s16 {d16}, %rs1, 30000",
]
HEAD = """\tld.param.u64 \t%rd9, [out];
\tcvta.to.global.u64 \t%rd9, %rd9;
\tmov.u32 \t%r1, 100000;
\tmov.u32 \t%r2, 77777;
\tmov.u32 \t%r3, -1234567;
\tmov.u64 \t%rd1, 0x123456789;
\tmov.u64 \t%rd2, -0x7654321987;
\tmov.u16 \t%rs1, -20000;
"""


def _kernel(body):
    return parse_ptx(kernel_ptx(HEAD + body + "\tret;\n")).kernel()


def test_every_form_folds_to_the_interpreters_number():
    body, off = "", 0
    for k, form in enumerate(FORMS):
        d, d64, d16 = f"%r{20 + k}", f"%rd{20 + k}", f"%rs{10 + k}"
        body += "\t" + form.format(d=d, d64=d64, d16=d16) + ";\n"
        if "{d64}" in form:
            body += f"\tst.global.u64 \t[%rd9+{off}], {d64};\n"
            off += 8
        elif "{d16}" in form:
            body += f"\tst.global.u16 \t[%rd9+{off}], {d16};\n"
            off += 8
        else:
            body += f"\tst.global.u32 \t[%rd9+{off}], {d};\n"
            off += 8
    k = _kernel(body)
    f = fold_constants(k)
    folded = [i for i, (a, b) in enumerate(zip(k.instructions, f.instructions)) if a is not b]
    assert len(folded) == len(FORMS)               # (a copy of a constant too: a mov of its number)
    assert all(f.instructions[i].opcode == "mov" for i in folded)
    want = launch(k, 1, 1, [np.zeros(len(FORMS) * 2, np.uint32)]).buffers[0]
    got = launch(f, 1, 1, [np.zeros(len(FORMS) * 2, np.uint32)]).buffers[0]
    assert want.tobytes() == got.tobytes()
    low = launch(lower(k, one_warp=True), 1, 1, [np.zeros(len(FORMS) * 2, np.uint32)]).buffers[0]
    assert low.tobytes() == want.tobytes()


def test_what_is_not_a_number_stays():
    body = """\tmov.u32 \t%r10, %tid.x;
\tmul.lo.u32 \t%r11, %r10, %r1;
\tadd.u32 \t%r12, %r1, 1;
\tadd.u32 \t%r12, %r12, 1;
\tsetp.eq.u32 \t%p1, %r10, 0;
\t@%p1 add.u32 \t%r13, %r1, 2;
\tadd.sat.s32 \t%r14, %r1, %r2;
\tmul.hi.u32 \t%r15, %r1, %r2;
"""
    k = _kernel(body)
    f = fold_constants(k)
    first = next(i for i, ins in enumerate(k.instructions) if ins.line > 0 and "%r10, %tid.x" in str(ins))
    assert all(a is b for a, b in zip(k.instructions[first:], f.instructions[first:]))


def test_a_multiply_by_a_launch_constant_becomes_shifts():
    """2-D launch: the row width gridDim.x * blockDim.x is a product of immediates, so py * w
    needs no multiply steps."""
    from gpu_layers.machine.flatten import flatten_launch, launch_constants

    body = """\tmov.u32 \t%r4, %nctaid.x;
\tmov.u32 \t%r5, %ntid.x;
\tmul.lo.s32 \t%r6, %r4, %r5;
\tmov.u32 \t%r7, %tid.y;
\tmul.lo.s32 \t%r8, %r7, %r6;
\tmov.u32 \t%r9, %tid.x;
\tmov.u32 \t%r10, %ctaid.x;
\tmad.lo.s32 \t%r9, %r10, %r5, %r9;
\tadd.s32 \t%r8, %r8, %r9;
\tmul.wide.s32 \t%rd3, %r8, 4;
\tadd.s64 \t%rd4, %rd9, %rd3;
\tst.global.u32 \t[%rd4], %r8;
"""
    k = _kernel(body)
    flat, grid, block = flatten_launch(k, (2, 1, 1), (8, 4, 1))
    flat = launch_constants(flat, grid, block)
    mk = lower(flat, one_warp=True)
    assert not any(i.opcode in ("mquad", "mstep") for i in mk.instructions)
    want = launch(k, (2, 1, 1), (8, 4, 1), [np.zeros(64, np.uint32)]).buffers[0]
    got = launch(mk, grid, block, [np.zeros(64, np.uint32)]).buffers[0]
    assert want.tobytes() == got.tobytes() and sorted(want) == list(range(64))
