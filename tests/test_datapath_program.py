"""The datapath program (gpu_layers/machine/datapath_program.py) against the reference interpreter:
at every step of every lowerable case, the ALU's definition (alu_ref) on the decoded operands gives
exactly what the interpreter wrote, and the guard decides exactly which issued lanes execute."""
from dataclasses import replace

import numpy as np
import pytest

from gpu_layers.cases import load_cases
from gpu_layers.craft.blocks.alu import alu_ref
from gpu_layers.errors import QwenGPUError, UnsupportedPTX
from gpu_layers.interp import Scalar, module_for
from gpu_layers.interp.memory import GLOBAL_BASE, GLOBAL_STRIDE
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import allocate, lower
from gpu_layers.machine.datapath_program import (
    SRC_CTAID, SRC_IMM, SRC_NONE, SRC_TID, DatapathError, check_program, datapath_problems,
    datapath_program, register_slots,
)
from gpu_layers.machine.regfile import RegfileError, program_of
from gpu_layers.ptx.parser import parse_ptx
from gpu_layers.suite import load_suite
from tests.conftest import require_gpu_truth

# the cases whose launches the datapath refuses: 2-D / 3-D blocks or grids (SRC_TID / SRC_CTAID
# are the linear thread and block indices)
MULTI_DIM = {"morton2d", "conv2d_tile", "index_3d", "transpose_shared", "matmul_i32", "grid2d_index",
             "matmul_f32", "mandelbrot"}


def _args(case):
    return [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in case.args]


def _all_cases():
    return list(load_suite()) + list(load_cases(require_gpu_truth() / "cases.json"))


def test_every_lowerable_case_computes_what_the_interpreter_writes():
    # the whole check runs in ~30 s on one core: every case, not a subset
    checked, refused, crowded, unsupported = [], set(), set(), []
    ops_seen = set()
    for case in _all_cases():
        try:
            ak, _ = allocate(lower(module_for(case.ptx()).kernel(case.kernel)))
        except UnsupportedPTX:
            continue
        try:
            st = check_program(ak, case.grid, case.block, _args(case), case.dynamic_shared_bytes,
                               step_budget=50_000_000)
        except DatapathError as e:
            msg = str(e)
            assert msg.startswith("line ") and ("linear index" in msg or "slots 0..31" in msg), msg
            if "linear index" in msg:
                refused.add(case.name)
            else:       # more than 32 registers: only kernels that call the float subroutine
                assert ak.calls, case.name
                crowded.add(case.name)
            continue
        assert st.ok, (case.name, st.mismatches[:5])
        assert st.alu_steps > 0 and st.lanes > 0 and st.guard_steps >= st.alu_steps
        ops_seen |= {k.split(".")[0] for k in st.by_op}
        unsupported += datapath_problems(ak, register_slots(ak), case.grid, case.block, _args(case))
        checked.append(case.name)
    # crowded: kernels calling a float routine whose pools peak apart get a joint allocation
    # (regalloc: registers of different widths share slots); its slots are what this check runs
    # on (a slot shared across widths keeps another register's value in lanes a write skips), and
    # only f64_reduce still needs more than 32 (shfl_xor_allreduce fits since the routine's leading
    # zero counts are one ALU step instead of a binary search with its temporaries)
    assert refused == MULTI_DIM and crowded == {"f64_reduce"}, crowded
    assert len(checked) >= 112
    # every register-writing form of the suite is one the ALU computes (local_sort's packing
    # `mov.b64 %rd, {%r, %r}` now lowers to shifts and an or)
    assert unsupported == []
    assert {"add", "sub", "and", "or", "xor", "not_a", "shl", "shr_u", "shr_s", "min_s", "min_u",
            "max_s", "max_u", "selp", "mov_a", "zext", "sext8", "sext16", "sext32", "setp_eq",
            "setp_ne", "setp_lt_s", "setp_lt_u", "setp_ge_u", "setp_gt_s", "pand", "por", "pxor",
            "pnot"} <= ops_seen


def _case(name):
    return next(c for c in _all_cases() if c.name == name)


def test_the_check_fails_on_a_wrong_program():
    case = _case("divmod_s32")
    ak, _ = allocate(lower(module_for(case.ptx()).kernel(case.kernel)))
    ops = datapath_program(ak, register_slots(ak), case.grid, case.block, _args(case))

    def check(bad):
        return check_program(ak, case.grid, case.block, _args(case), ops=bad, limit=3)
    assert check(ops).ok
    picks = {   # which op to corrupt, and how: each must make the check fail at that PC alone
        "add": (lambda o: o.op == "add" and o.b != SRC_IMM, lambda o: dict(op="sub")),
        "setp": (lambda o: o.op == "setp_lt_s", lambda o: dict(op="setp_lt_u")),
        "imm": (lambda o: o.b == SRC_IMM and o.op in ("add", "and", "shl"), lambda o: dict(imm=o.imm ^ 1)),
        "selp": (lambda o: o.op == "selp", lambda o: dict(op="mov_a", b=SRC_NONE, p=None)),
        "guard": (lambda o: o.guard is not None, lambda o: dict(gneg=not o.gneg)),
        "width": (lambda o: o.op == "dstep" and o.width == 64, lambda o: dict(width=32)),
    }
    for key, (want, change) in picks.items():
        failed = False
        for pc in [pc for pc, o in enumerate(ops) if want(o)][:4]:
            bad = list(ops)
            bad[pc] = replace(ops[pc], **change(ops[pc]))
            st = check(bad)
            assert all(f"pc {pc} " in m for m in st.mismatches), (key, st.mismatches)
            failed |= not st.ok
        assert failed, key


# --------------------------------------------------------------------------- decoded fields

BODY = """\tld.param.u64 \t%rd1, [a];
\tld.param.u64 \t%rd2, [out];
\tld.param.u32 \t%r9, [n];
\tcvta.to.global.u64 \t%rd2, %rd2;
\tmov.u32 \t%r1, %tid.x;
\tmov.u32 \t%r2, %ntid.x;
\tmov.u32 \t%r3, %tid.y;
\tmov.u32 \t%r4, %ctaid.x;
\tmov.u32 \t%r11, %nctaid.x;
\tadd.s32 \t%r5, %r1, -1;
\tsetp.lt.s32 \t%p1, %r5, %r9;
\tshr.s32 \t%r6, %r5, 1;
\tshr.b32 \t%r12, %r5, %r1;
\tmin.s32 \t%r13, %r5, %r6;
\tmax.u32 \t%r13, %r13, %r12;
\tsetp.gt.u16 \t%p2, %rs1, -2;
\tmov.u16 \t%rs1, 65534;
\tcvt.s64.s32 \t%rd3, %r5;
\tselp.b32 \t%r7, %r1, 7, %p1;
\tselp.b32 \t%r8, 3, -3, %p1;
\tmov.u64 \t%rd4, -5;
\tor.pred \t%p3, %p1, %p2;
\tcvt.u64.u32 \t%rd7, %r1;
\tshl.b64 \t%rd5, %rd7, 2;
\tadd.s64 \t%rd6, %rd2, %rd5;
\t@!%p1 st.global.u32 \t[%rd6], %r7;
\tadd.u32 \t%r7, %r4, %r8;
\tadd.u32 \t%r7, %r7, %r13;
\tadd.u32 \t%r7, %r7, %r11;
\tadd.u32 \t%r7, %r7, %r3;
\tadd.u32 \t%r7, %r7, %r2;
\tselp.u32 \t%r10, 1, 0, %p3;
\tadd.u32 \t%r7, %r7, %r10;
\t@%p1 st.global.u32 \t[%rd6], %r7;
\tret;
"""
PARAMS = (("a", "u64"), ("out", "u64"), ("n", "u32"))


def _kernel(body=BODY, params=PARAMS):
    return allocate(lower(parse_ptx(kernel_ptx(body, params=params)).kernel()))[0]


def _launch_args(n=5):
    return [np.arange(8, dtype=np.int32), np.zeros(8, np.int32), Scalar("u32", n)]


def _f(o):
    return (o.op, o.kind, o.width)


def _by_text(kernel, ops, start):
    """The ops of the instructions whose text (without the guard) starts with `start`."""
    hits = [o for ins, o in zip(kernel.instructions, ops)
            if (str(ins).split(" ", 1)[1] if ins.guard else str(ins)).startswith(start)]
    assert hits, start
    return hits


def test_decoded_fields_of_a_small_kernel():
    k = _kernel()
    slots = register_slots(k)
    ops = datapath_program(k, slots, (2, 1, 1), (8, 1, 1), _launch_args())
    assert len(ops) == len(k.instructions)
    pa, pout, pn = _by_text(k, ops, "ld.param")
    # parameters: buffers at the interpreter's addresses (k-th buffer), the scalar's value
    assert (pa.op, pa.a, pa.imm, pa.width) == ("mov_a", SRC_IMM, GLOBAL_BASE, 64)
    assert (pout.imm, pn.imm, pn.width) == (GLOBAL_BASE + GLOBAL_STRIDE, 5, 32)
    assert _by_text(k, ops, "cvta")[0].op == "mov_a"
    tid, ntid, tidy, ctaid, nctaid = [o for ins, o in zip(k.instructions, ops) if "%tid" in str(ins)
                                      or "%ntid" in str(ins) or "%ctaid" in str(ins) or "%nctaid" in str(ins)]
    assert (tid.a, ctaid.a) == (SRC_TID, SRC_CTAID)
    assert [(o.a, o.imm) for o in (ntid, tidy, nctaid)] == [(SRC_IMM, 8), (SRC_IMM, 0), (SRC_IMM, 2)]
    add = _by_text(k, ops, "add.s32")[0]
    assert (add.op, add.width, add.b, add.imm) == ("add", 32, SRC_IMM, 0xFFFFFFFF)
    assert _by_text(k, ops, "setp.lt.s32")[0].op == "setp_lt_s"
    assert [o.op for o in _by_text(k, ops, "shr.")] == ["shr_s", "shr_u"]
    assert _by_text(k, ops, "min.s32")[0].op == "min_s" and _by_text(k, ops, "max.u32")[0].op == "max_u"
    g = _by_text(k, ops, "setp.gt.u16")[0]
    assert (g.op, g.width, g.b, g.imm) == ("setp_gt_u", 16, SRC_IMM, 0xFFFE)
    assert _f(_by_text(k, ops, "cvt.s64.s32")[0]) == ("sext32", "alu", 64)
    sel = _by_text(k, ops, "selp.b32")
    assert sel[0].op == "selp" and sel[0].p == slots[str(k.instructions[ops.index(sel[0])].operands[3])]
    assert (sel[0].b, sel[0].imm) == (SRC_IMM, 7)
    # nvcc's selp of two immediates: the lowering moved the first into a register
    assert sel[1].a < 32 and (sel[1].b, sel[1].imm) == (SRC_IMM, 2**32 - 3)
    assert _by_text(k, ops, "mov.u64")[0].imm == 2**64 - 5
    assert _f(_by_text(k, ops, "or.pred")[0]) == ("por", "alu", 16)
    st1, st2 = _by_text(k, ops, "st.global")
    assert (st1.op, st1.kind, st1.gneg, st2.gneg) == (None, "store", True, False)
    assert st1.guard == st2.guard == slots[k.instructions[ops.index(st2)].guard.reg]
    ret = ops[-1]
    assert (ret.op, ret.kind, ret.a, ret.b, ret.guard, ret.width) == (None, "control", SRC_NONE, SRC_NONE, None, 64)
    # and the proof on this kernel
    st = check_program(k, (2, 1, 1), (8, 1, 1), _launch_args())
    assert st.ok and st.lanes > 0, st.mismatches


def test_register_slots_are_the_register_files():
    case = _case("compare_select")
    ak, _ = allocate(lower(module_for(case.ptx()).kernel(case.kernel)))
    assert register_slots(ak) == program_of(ak).slots
    shfl = _case("warp_reduce")            # two destinations: the register file v1 refuses it
    sk, _ = allocate(lower(module_for(shfl.ptx()).kernel(shfl.kernel)))
    with pytest.raises(RegfileError):
        program_of(sk)
    ops = datapath_program(sk, register_slots(sk), shfl.grid, shfl.block, _args(shfl))
    assert {o.kind for o in ops if o.op is None} >= {"warp", "load", "store", "control"}


CVT_VALUES = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
              0x1_0000_0080, 2**63 - 1, 2**63, 2**64 - 1, 0x1234_5678_9ABC_DEF0]
INT_TYPES = ("s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64")
REG_OF = {16: "%rs", 32: "%r", 64: "%rd"}


def test_every_integer_cvt_is_one_alu_move():
    # every cvt between integer types, from and into registers of each width PTX accepts, on
    # values at every sign and width boundary (the proof is the interpreter's write, lane by lane)
    head = """\tld.param.u64 \t%rd1, [a];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r1, %tid.x;
\tmul.wide.u32 \t%rd2, %r1, 8;
\tadd.s64 \t%rd3, %rd1, %rd2;
\tld.global.u64 \t%rd10, [%rd3];
\tcvt.u32.u64 \t%r10, %rd10;
\tcvt.u16.u64 \t%rs10, %rd10;
"""
    lines = []
    for dt in INT_TYPES:
        for st in INT_TYPES:
            for rs in (16, 32, 64):
                for rd in (16, 32, 64):
                    line = f"\tcvt.{dt}.{st} \t{REG_OF[rd]}11, {REG_OF[rs]}10;\n"
                    try:
                        lower(parse_ptx(kernel_ptx(line + "\tret;\n", params=(("a", "u64"),))).kernel())
                    except QwenGPUError:
                        continue
                    lines.append(line)
    assert len(lines) >= 64
    k = _kernel(head + "".join(lines) + "\tret;\n", params=(("a", "u64"),))
    vals = np.array(CVT_VALUES, dtype=np.uint64)
    ops = datapath_program(k, register_slots(k), 1, 16, [vals])
    cvts = [o for ins, o in zip(k.instructions, ops) if ins.opcode == "cvt"]
    assert len(cvts) >= len(lines) + 2 and all(o.kind == "alu" for o in cvts)
    st = check_program(k, 1, 16, [vals])
    assert st.ok, st.mismatches
    assert st.lanes >= 16 * len(lines) and st.poison == 0
    assert {o.op for o in cvts} >= {"mov_a", "zext", "zext8", "zext16", "zext32", "sext8", "sext16", "sext32"}


# ------------------------------------------------------------------------------------ errors

def test_multi_dimensional_indices_are_refused_by_name():
    k = _kernel()
    with pytest.raises(DatapathError, match=r"line \d+: `mov.u32 %mr\d+, %tid.x`: %tid.x in a block of \(4, 2, 1\)"):
        datapath_program(k, register_slots(k), 1, (4, 2), _launch_args())
    with pytest.raises(DatapathError, match=r"line \d+: `mov.u32 %mr\d+, %tid.y`: %tid.y in a block of \(1, 8, 1\)"):
        datapath_program(k, register_slots(k), 1, (1, 8), _launch_args())     # %tid.x is 0 there
    with pytest.raises(DatapathError, match=r"%ctaid.x in a grid of \(2, 2, 1\)"):
        datapath_program(k, register_slots(k), (2, 2), 8, _launch_args())
    ops = datapath_program(k, register_slots(k), (1, 3), 8, _launch_args())      # ctaid.x is 0
    assert any(o.a == SRC_IMM and o.imm == 0 and o.op == "mov_a" for o in ops)
    assert not any(SRC_CTAID in (o.a, o.b) for o in ops)
    assert isinstance(DatapathError("x"), QwenGPUError) and isinstance(DatapathError("x"), ValueError)


def test_laneid_is_the_thread_index_in_one_warp_only():
    body = "\tmov.u32 \t%r1, %laneid;\n\tadd.u32 \t%r2, %r1, 1;\n\tret;\n"
    k = _kernel(body, params=(("a", "u64"),))
    ops = datapath_program(k, register_slots(k), 1, 16, [np.zeros(1, np.int32)])
    assert ops[0].a == SRC_TID
    assert check_program(k, 1, 16, [np.zeros(1, np.int32)]).ok
    with pytest.raises(DatapathError, match="%laneid in a block of"):
        datapath_program(k, register_slots(k), 1, 64, [np.zeros(1, np.int32)])


def test_registers_outside_the_32_slots_and_unlowered_code_are_refused():
    raw = parse_ptx(kernel_ptx("\tmov.u32 \t%r100, %tid.x;\n\tret;\n")).kernel()
    with pytest.raises(DatapathError, match=r"line \d+: `mov.u32 %r100, %tid.x`: register %r100 is in slot \d+"):
        datapath_program(raw, {n: 32 + i for i, n in enumerate(register_slots(raw))}, 1, 8,
                         [np.zeros(1, np.int32)])
    with pytest.raises(DatapathError, match="register %r100 has no register-file slot"):
        datapath_program(raw, {}, 1, 8, [np.zeros(1, np.int32)])
    mul = parse_ptx(kernel_ptx("\tmov.u32 \t%r1, %tid.x;\n\tmul.lo.s32 \t%r2, %r1, %r1;\n\tret;\n")).kernel()
    slots = {n: i % 32 for i, n in enumerate(register_slots(mul))}
    with pytest.raises(DatapathError, match="`mul.lo.s32` is not machine code"):
        datapath_program(mul, slots, 1, 8, [np.zeros(1, np.int32)])


def test_forms_the_alu_does_not_compute_are_named():
    body = """\tmov.u32 \t%r1, %tid.x;
\tsetp.lt.s32 \t%p2, %r1, 4;
\tsetp.lt.and.s32 \t%p1, %r1, 9, %p2;
\tcvt.sat.u8.s32 \t%rs1, %r1;
\t@%p1 bra \t$L1;
$L1:
\tret;
"""
    k = _kernel(body, params=(("a", "u64"),))
    args = [np.zeros(1, np.int32)]
    ops = datapath_program(k, register_slots(k), 1, 8, args)
    assert [o.kind for o in ops] == ["alu", "alu", "alu_unsupported", "alu_unsupported", "control", "control"]
    assert ops[4].guard is not None and ops[2].op is None and ops[2].width == 64
    probs = datapath_problems(k, register_slots(k), 1, 8, args)
    assert len(probs) == 2
    assert "setp.lt.and.s32" in probs[0] and "combines with a predicate" in probs[0]
    assert "cvt.sat" in probs[1]
    st = check_program(k, 1, 8, args)
    assert st.ok and st.unsupported_steps == 2


def test_alu_ref_agrees_with_the_folded_constants():
    # a launch constant next to a literal: folded by the ALU's own definition
    body = "\tadd.u32 \t%r1, %ntid.x, 5;\n\tsetp.lt.u32 \t%p1, %ntid.x, 9;\n\tselp.u32 \t%r2, %r1, 1, %p1;\n\tret;\n"
    k = _kernel(body, params=(("a", "u64"),))
    ops = datapath_program(k, register_slots(k), 1, 8, [np.zeros(1, np.int32)])
    assert (ops[0].op, ops[0].a, ops[0].imm) == ("mov_a", SRC_IMM, 13)
    assert (ops[1].op, ops[1].a, ops[1].b, ops[1].imm) == ("por", SRC_IMM, SRC_IMM, alu_ref("setp_lt_u", 32, 8, 9, 0)[1])
    assert check_program(k, 1, 8, [np.zeros(1, np.int32)]).ok
