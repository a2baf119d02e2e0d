"""Register allocation: the kernel on a few machine registers per width computes what the original
computes, bit for bit, poison included, on every suite and gpu-truth case."""
import re
from contextlib import contextmanager

import numpy as np
import pytest

from gpu_layers.errors import UninitializedRead, UnsupportedPTX
from gpu_layers.interp import launch, module_for
from gpu_layers.interp.machine import program_for
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import allocate, lower
from gpu_layers.machine.liveness import liveness
from gpu_layers.machine.lower import UNDEF, _is_machine_form
from gpu_layers.machine.regalloc import POOLS, shared_slots
from gpu_layers.ptx.ir import TYPE_BITS
from gpu_layers.ptx.parser import parse_ptx
from gpu_layers.ptx.validator import SPECIAL_REGS
from tests.test_lowering import OUT, _all_cases, _run


def _same(a, b):
    return all((x is None and y is None) or x.tobytes() == y.tobytes() for x, y in zip(a.buffers, b.buffers))


def _check_shape(ak, al):
    """Only pool registers are declared, as many as the allocation counts; specials untouched. A
    joint allocation (more than 32 by pool) numbers each register by its slot < 32: registers of
    one number never interfere, and the register file reads the numbers back as its slots."""
    decl = {d.type: d.names for d in ak.regs}
    assert set(decl) == {POOLS[w][0] for w in al.counts}
    for w, n in al.counts.items():
        t, prefix = POOLS[w]
        if al.joint:
            idx = [int(x[len(prefix):]) for x in decl[t]]
            assert len(idx) == n and idx == sorted(set(idx)) and max(idx) < 32
        else:
            assert decl[t] == [f"{prefix}{i}" for i in range(n)]
    if al.joint:
        assert al.total > 32 and shared_slots(ak) == {r: int(r[3:]) for d in ak.regs for r in d.names}
    assert not any(r in SPECIAL_REGS for r in al.mapping)


def test_allocated_kernels_match_the_originals_bit_for_bit():
    over, lowered, joint = [], 0, []
    for case in _all_cases():
        kernel = module_for(case.ptx()).kernel(case.kernel)
        ref = _run(kernel, case)
        # the original PTX too (floats included): f32 / f64 registers on .b32 / .b64 machine
        # registers decode and compute the same bits
        ak, al = allocate(kernel)
        _check_shape(ak, al)
        assert _same(ref, _run(ak, case)), case.name
        try:
            mk = lower(kernel)
        except UnsupportedPTX:
            continue
        ak, al = allocate(mk)
        _check_shape(ak, al)
        assert all(_is_machine_form(ins) for ins in ak.instructions), case.name
        assert _same(ref, _run(ak, case)), case.name
        lowered += 1
        # optimal for the interference graph (the largest clique), and at the liveness bound
        # except where a vote's predicate dies at the vote (regalloc.py: cross-lane operands)
        # and in kernels that call the float subroutine (what is live across one call holds
        # registers through the whole routine, which no single point's live set shows)
        if al.joint:
            joint.append(case.name)
            continue
        # grid_stride's 32-bit registers interfere in a graph that is not chordal (its original
        # PTX too, regalloc's docstring): one over the floor
        extra = {32: 1} if case.name == "grid_stride" else {}
        assert al.counts == {w: n + extra.get(w, 0) for w, n in al.floor.items()}, \
            (case.name, al.counts, al.floor)
        for w, s in al.slack.items():
            assert s >= 0
            if s and not mk.calls and case.name not in ("grid_stride",):
                over.append((case.name, w, s))
    assert lowered >= 100
    assert all(w == 1 and s == 1 for _, w, s in over) and len(over) <= 2, over
    assert 5 <= len(joint) <= 10, joint          # float kernels whose pools peak apart


# --------------------------------------------------------------------------------- poison


@contextmanager
def _strict(*kernels):
    """Every read of an undefined value raises (no poison propagation), so the first read of
    poison shows where and when it happens."""
    progs = [program_for(k) for k in kernels]
    saved = [(d, d.pmode) for p in progs for d in p.code]
    try:
        for d, _ in saved:
            d.pmode = "strict"
        yield
    finally:
        for d, m in saved:
            d.pmode = m


def _first_poison(kernel, case):
    try:
        res = _run(kernel, case)
    except UninitializedRead as e:
        msg = str(e)
        return (re.match(r"line (\d+):", msg).group(1), re.search(r"thread \(\d+,\d+,\d+\)", msg).group(0),
                "never written" in msg)
    return res


def test_poison_is_read_where_and_when_it_was():
    """Each case whose machine code reads a register before writing it on some path (nvcc's
    undefined phis, the lowering's never-written %mq_undef): run strictly, the allocated kernel
    meets its first undefined value at the same line, in the same thread, as never written."""
    seen = []
    for case in _all_cases():
        kernel = module_for(case.ptx()).kernel(case.kernel)
        try:
            mk = lower(kernel)
        except UnsupportedPTX:
            continue
        if not liveness(mk).entry:
            continue
        ak, _ = allocate(mk)
        with _strict(mk, ak):
            a, b = _first_poison(mk, case), _first_poison(ak, case)
        if isinstance(a, tuple):
            assert a == b, case.name
            seen.append((case.name, a[2]))
        else:
            assert not isinstance(b, tuple) and _same(a, b), case.name
    names = {n for n, _ in seen}
    # not vacuous: the nvcc shapes and a lowered division really read never-written registers
    assert {"last_positive", "prev_value", "divmod_s32"} <= names, names
    assert all(never for _, never in seen)


def _k(body):
    return parse_ptx(kernel_ptx(OUT + body + "\tret;\n", params=(("out", "u64"),))).kernel()


# %r1 is written on one path only: lanes < 16 read it undefined. %r3 is written and dead before
# the branch, while %r1 is (possibly undefined) live: they must not share a machine register,
# or lanes < 16 would read %r3's 7 where the original reads poison.
BEFORE_WRITTEN = """\tmov.u32 \t%r3, 7;
\tst.global.u32 \t[%rd9+128], %r3;
\tsetp.lt.u32 \t%p1, %r100, 16;
\t@%p1 bra \tL_join;
\tadd.u32 \t%r1, %r100, 40;
L_join:
"""


def test_a_register_read_before_written_on_one_path_stays_undefined():
    observed = _k(BEFORE_WRITTEN + "\tst.global.u32 \t[%rd9], %r1;\n")
    ak, al = allocate(observed)
    assert "%r1" in liveness(observed).entry and al.mapping["%r1"] != al.mapping["%r3"]
    for k in (observed, ak):
        with pytest.raises(UninitializedRead, match=r"thread \(0,0,0\)"):
            launch(k, 1, 32, [np.zeros(64, np.int32)])
    # not observed: selp takes the defined operand in the lanes where %r1 is undefined
    hidden = _k(BEFORE_WRITTEN + "\tselp.b32 \t%r2, %r100, %r1, %p1;\n\tst.global.u32 \t[%rd9], %r2;\n")
    ak, al = allocate(hidden)
    want = list(range(16)) + [t + 40 for t in range(16, 32)] + [7] * 32
    for lanes in (1, 4, 32):
        for k in (hidden, ak):
            assert launch(k, 1, 32, [np.zeros(64, np.int32)], lanes=lanes).buffers[0].tolist() == want


def test_division_by_zero_stays_undefined_after_allocation():
    body = "\tsub.u32 \t%r2, %r100, 3;\n\tdiv.s32 \t%r3, 100, %r2;\n\trem.u32 \t%r4, 7, %r2;\n"
    unused = lower(_k(body + "\tst.global.u32 \t[%rd9], 1;\n"))
    used = lower(_k(body + "\tst.global.u32 \t[%rd9], %r3;\n"))
    ak, al = allocate(unused)
    assert launch(ak, 1, 32, [np.zeros(32, np.int32)]).buffers[0].tolist() == [1] * 32
    ak, al = allocate(used)
    with pytest.raises(UninitializedRead, match=r"thread \(3,0,0\)"):
        launch(ak, 1, 32, [np.zeros(32, np.int32)])
    # %mq_undef's machine register is written nowhere before its last read
    m = al.mapping[UNDEF]
    last = max(i for i, ins in enumerate(ak.instructions) if m in {str(o) for o in ins.operands[1:]})
    assert not any(str(ins.operands[0]) == m for ins in ak.instructions[:last + 1] if ins.operands)


# ------------------------------------------------------------------------------ guarded writes


def test_a_guarded_write_keeps_the_old_value_live():
    # %r5 = 3 stays live across %r6 (written, then dead) because the guarded write does not
    # replace it in lanes >= 10: sharing %r6's register would give those lanes tid + 100
    body = """\tmov.u32 \t%r5, 3;
\tadd.u32 \t%r6, %r100, 100;
\tst.global.u32 \t[%rd9], %r6;
\tsetp.lt.u32 \t%p1, %r100, 10;
\t@%p1 mov.u32 \t%r5, 9;
\tst.global.u32 \t[%rd9+128], %r5;
"""
    k = _k(body)
    ak, al = allocate(k)
    assert al.mapping["%r5"] != al.mapping["%r6"]
    want = [t + 100 for t in range(32)] + [9] * 10 + [3] * 22
    for lanes in (1, 4, 32):
        for kk in (k, ak):
            assert launch(kk, 1, 32, [np.zeros(64, np.int32)], lanes=lanes).buffers[0].tolist() == want
    # a guarded lowered multiply: its temporaries and the guard's old values stay apart
    g = lower(_k("\tmov.u32 \t%r3, 77;\n\tsetp.lt.u32 \t%p1, %r100, 10;\n"
                 "\t@%p1 mul.lo.s32 \t%r3, %r100, %r100;\n\tst.global.u32 \t[%rd9], %r3;\n"))
    ak, al = allocate(g)
    assert launch(ak, 1, 32, [np.zeros(32, np.int32)]).buffers[0].tolist() == \
        [t * t for t in range(10)] + [77] * 22


# ---------------------------------------------------------------------------- counts and pools


def test_counts_are_per_width_and_dead_registers_reuse_machine_registers():
    body = """\tmov.u32 \t%r1, 1;
\tmov.u32 \t%r2, 2;
\tadd.s32 \t%r3, %r1, %r2;
\tmov.u32 \t%r4, 4;
\tadd.s32 \t%r5, %r3, %r4;
\tsetp.lt.u32 \t%p1, %r100, 3;
\t@%p1 mov.u32 \t%r5, 9;
\tcvt.u16.u32 \t%rs1, %r5;
\tcvt.u32.u16 \t%r6, %rs1;
\tmov.b32 \t%f1, %r6;
\tst.global.f32 \t[%rd9], %f1;
"""
    k = _k(body)
    ak, al = allocate(k)
    # 32-bit: %r100 with %r1 and %r2 at most (the f32 %f1 shares the pool); 64-bit: %rd1 and
    # %rd2 before the address add
    assert al.counts == {1: 1, 16: 1, 32: 3, 64: 2} == al.bound
    assert al.total == 7 and al.bits == 1 + 16 + 3 * 32 + 2 * 64
    assert al.mapping["%f1"].startswith("%mr") and al.mapping["%rs1"] == "%mh0"
    assert {ak.reg_types()[m] for m in al.mapping.values()} == {"pred", "b16", "b32", "b64"}
    assert all(TYPE_BITS[ak.reg_types()[m]] == TYPE_BITS[k.reg_types()[r]] for r, m in al.mapping.items())
    want = [9, 9, 9] + [7] * 29
    res = launch(ak, 1, 32, [np.zeros(32, np.float32)])
    assert res.buffers[0].view(np.int32).tolist() == want


def test_an_unpacking_move_never_overwrites_its_source_early():
    # mov.b64 {a, b}, x writes a in every lane before it reads x for b: with 64-bit element
    # registers (zero-extended halves) a and x share a pool, and x (dead after) must not be a's
    body = """\tmov.u32 \t%r1, %tid.x;
\tcvt.u64.u32 \t%rd3, %r1;
\tshl.b64 \t%rd4, %rd3, 32;
\tor.b64 \t%rd4, %rd4, 5;
\tmov.b64 \t{%rd5, %rd6}, %rd4;
\tadd.u64 \t%rd7, %rd5, %rd6;
\tcvt.u32.u64 \t%r4, %rd7;
\tst.global.u32 \t[%rd9], %r4;
"""
    k = _k(body)
    ak, al = allocate(k)
    assert al.mapping["%rd4"] not in (al.mapping["%rd5"], al.mapping["%rd6"])
    want = [t + 5 for t in range(32)]
    for kk in (k, ak):
        assert launch(kk, 1, 32, [np.zeros(32, np.int32)]).buffers[0].tolist() == want


def test_allocation_leaves_the_input_kernel_alone():
    k = _k("\tadd.u32 \t%r1, %r100, 1;\n\tst.global.u32 \t[%rd9], %r1;\n")
    before = [str(i) for i in k.instructions]
    ak, _ = allocate(k)
    assert [str(i) for i in k.instructions] == before != [str(i) for i in ak.instructions]


def test_program_cache_keeps_what_is_in_use():
    """A decoded program in use survives however many other kernels are decoded meanwhile (the
    strict-poison check above switches a decoded program's mode; a cache that dropped everything
    when full made it order-dependent)."""
    text = kernel_ptx(OUT + "\tret;\n", params=(("out", "u64"),))
    k0 = parse_ptx(text).kernel()
    p0 = program_for(k0)
    for _ in range(300):
        program_for(parse_ptx(text).kernel())
        assert program_for(k0) is p0


def test_copies_share_a_register_and_the_self_moves_go():
    # %r2 copies %r1, which dies there: both get one machine register and the copy (a step and
    # its value's <d> tokens) is dropped; the label on it names the next instruction, a branch
    # to it still lands there
    body = """\tmov.u32 \t%r1, %tid.x;
\tsetp.lt.u32 \t%p1, %r1, 16;
\t@%p1 bra \tL_copy;
\tadd.u32 \t%r1, %r1, 100;
L_copy:
\tmov.u32 \t%r2, %r1;
\tadd.u32 \t%r3, %r2, 1;
\tst.global.u32 \t[%rd9], %r3;
"""
    k = _k(body)
    ak, al = allocate(k)
    assert al.mapping["%r1"] == al.mapping["%r2"]
    assert not any(i.opcode == "mov" and i.operands[0] == i.operands[1] for i in ak.instructions)
    assert len(ak.instructions) == len(k.instructions) - 1
    assert ak.instructions[ak.labels["L_copy"]].opcode == "add"
    want = [t + 1 + (100 if t >= 16 else 0) for t in range(32)]
    for kk in (k, ak):
        assert launch(kk, 1, 32, [np.zeros(32, np.int32)]).buffers[0].tolist() == want


def test_dropping_self_moves_renumbers_what_names_an_instruction():
    from dataclasses import replace

    from gpu_layers.machine.regalloc import drop_self_moves
    from gpu_layers.ptx.ir import Reg

    k = _k("\tmov.u32 \t%r1, %tid.x;\nL_a:\n\tmov.u32 \t%r1, %r1;\n\tadd.u32 \t%r1, %r1, 1;\n"
           "\tmov.u32 \t%r1, %r1;\n\tst.global.u32 \t[%rd9], %r1;\n")
    n = len(k.instructions)
    moves = [i for i, ins in enumerate(k.instructions) if ins.opcode == "mov" and ins.operands[0] == Reg("%r1")
             and ins.operands[1] == Reg("%r1")]
    assert len(moves) == 2
    held = replace(k, calls=[(moves[0] - 1, moves[1] + 1, moves[0])], holds=frozenset({moves[1]}),
                   checks={n - 1: "a check"})
    d = drop_self_moves(held)
    assert len(d.instructions) == n - 1                 # the held move stays (its index means a turn)
    assert d.labels["L_a"] == moves[0] and d.instructions[moves[0]].opcode == "add"
    assert d.calls == [(moves[0] - 1, moves[1], moves[0])] and d.holds == frozenset({moves[1] - 1})
    assert d.checks == {n - 2: "a check"}
