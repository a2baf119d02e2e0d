"""Soft-float lowering (gpu_layers/machine/softfloat.py): every f32 form it lowers, and every f64
form it expands inline (min/max, setp, conversions, rounding to integral values), computes the
reference interpreter's bits (special values x special values, then random, cancelling and
near-subnormal operands; scripts/check_softfloat.py runs many more), poison stays poison, and the
shared subroutine is emitted once however many sites call it."""
import numpy as np
import pytest

from gpu_layers.errors import UninitializedRead
from gpu_layers.interp import launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import allocate, lower
from gpu_layers.machine.core import launch_tokens, machine_kernel
from gpu_layers.machine.cvt_routines import routine_form
from gpu_layers.machine.datapath_program import datapath_problems, register_slots
from gpu_layers.machine.float_forms import (FORMS, FORMS64, INLINE64, ROUTINE64, compare, is64, kernel_for,
                                            operands, operands64)
from gpu_layers.machine.liveness import liveness
from gpu_layers.ptx.parser import parse_ptx


@pytest.fixture(scope="module")
def ops():
    return operands(800, np.random.default_rng(7))


@pytest.fixture(scope="module")
def ops64():
    return operands64(1200, np.random.default_rng(7))      # 1024 pairs of special values first


def _matches(form, ops, cvt_routines=False):
    want, got, steps = compare(form, *ops, cvt_routines=cvt_routines)
    wrong = np.nonzero(want != got)[0]
    n = ops[0].size
    assert wrong.size == 0, [(hex(ops[0][i % n]), hex(ops[1][i % n]), hex(ops[2][i % n]), hex(want[i]),
                              hex(got[i])) for i in wrong[:5]]
    assert steps > 1            # it really ran machine code of its own


@pytest.mark.parametrize("form", FORMS)
def test_form_matches_the_interpreter_bit_for_bit(form, ops):
    _matches(form, ops)


@pytest.mark.parametrize("form", INLINE64)
def test_inline_f64_form_matches_the_interpreter_bit_for_bit(form, ops64):
    _matches(form, ops64)


@pytest.mark.parametrize("form", ROUTINE64)
def test_f64_routine_form_matches_the_interpreter_bit_for_bit(form, ops64):
    _matches(form, ops64)


@pytest.mark.parametrize("form", [f for f in FORMS + FORMS64 if routine_form(f)])
def test_conversion_through_a_routine_matches_the_interpreter_bit_for_bit(form, ops, ops64):
    """gpu_layers.machine.cvt_routines: the mode in a register instead of fixed at the site."""
    _matches(form, ops64 if is64(form) else ops, cvt_routines=True)


def test_conversion_routines_are_emitted_once_with_the_mode_in_a_register():
    body = "\tmul.rn.f32 \t%f10, %f9, 0fBF3851EC;\n"          # -0.72 tid: every mode differs
    body += "".join(f"\tcvt.{m}.s32.f32 \t%r{i + 1}, %f10;\n" for i, m in enumerate(("rni", "rzi", "rmi", "rpi")))
    body += "\tadd.u32 \t%r5, %r1, %r2;\n\tadd.u32 \t%r6, %r3, %r4;\n\tadd.u32 \t%r7, %r5, %r6;\n"
    body += "\tst.global.u32 \t[%rd9], %r7;\n\tret;\n"
    k = parse_ptx(kernel_ptx(OUT + body)).kernel()
    inline, routine = lower(k), lower(k, cvt_routines=True)
    assert len(routine.instructions) < len(inline.instructions) - 60
    assert len(routine.calls) == 5 and len({e for _, e, _ in routine.calls}) == 2     # (and the mul's)
    for kernel in (inline, routine):
        a = launch(k, 1, 32, [np.zeros(32, np.uint32)])
        b = launch(kernel, 1, 32, [np.zeros(32, np.uint32)])
        assert a.buffers[0].tobytes() == b.buffers[0].tobytes()


OUT = """\tld.param.u64 \t%rd1, [out];
\tmov.u32 \t%r100, %tid.x;
\tmul.wide.u32 \t%rd2, %r100, 4;
\tadd.s64 \t%rd9, %rd1, %rd2;
\tcvt.rn.f32.u32 \t%f9, %r100;
"""


def _kernel(body):
    return parse_ptx(kernel_ptx(OUT + body + "\tret;\n")).kernel()


def test_an_undefined_operand_gives_an_undefined_result_even_beside_a_nan():
    # the original's result is undefined whenever an operand is (the "prop" rule); the routine's
    # select chain would pick the canonical NaN for a NaN operand: the taint keeps it undefined
    body = ("\tmov.f32 \t%f1, 0f7FC00000;\n\tsetp.lt.u32 \t%p1, %r100, 2;\n\t@%p1 mov.f32 \t%f2, 0f3F800000;\n"
            "\tfma.rn.f32 \t%f3, %f1, %f2, %f1;\n\tmov.b32 \t%r1, %f3;\n\tst.global.u32 \t[%rd9], %r1;\n")
    body = body.replace("\tcvt.rn.f32.u32 \t%f9, %r100;\n", "")
    k = _kernel(body)
    out = np.zeros(8, np.uint32)
    with pytest.raises(UninitializedRead, match=r"thread \(2,0,0\)"):
        launch(k, 1, 8, [out])
    with pytest.raises(UninitializedRead, match=r"thread \(2,0,0\)"):
        launch(lower(k), 1, 8, [out])


def test_an_undefined_f64_operand_gives_an_undefined_result_even_beside_a_nan():
    # setp.nan with a NaN a is true whatever b is (or.pred with a true operand is defined): the
    # taint keeps the result undefined where b is, as the original's is
    body = ("\tmov.f64 \t%fd1, 0dFFF4000000000001;\n\tsetp.lt.u32 \t%p1, %r100, 2;\n"
            "\t@%p1 mov.f64 \t%fd2, 0d3FF0000000000000;\n\tsetp.nan.f64 \t%p2, %fd1, %fd2;\n"
            "\tselp.u32 \t%r1, 1, 0, %p2;\n\tst.global.u32 \t[%rd9], %r1;\n")
    k = parse_ptx(kernel_ptx(OUT + body + "\tret;\n", decls="\t.reg .f64 \t%fd<4>;\n")).kernel()
    out = np.zeros(8, np.uint32)
    with pytest.raises(UninitializedRead, match=r"thread \(2,0,0\)"):
        launch(k, 1, 8, [out])
    with pytest.raises(UninitializedRead, match=r"thread \(2,0,0\)"):
        launch(lower(k), 1, 8, [out])
    assert launch(lower(k), 1, 2, [out]).buffers[0][:2].tolist() == [1, 1]


def test_the_routine_is_emitted_once_and_sites_return_where_they_called():
    body = "".join(f"\tfma.rn.f32 \t%f{i + 1}, %f{i}, 0f3FC00000, 0f3F800000;\n" for i in range(9, 14))
    body += "\tadd.f32 \t%f20, %f14, %f9;\n\tmul.rz.f32 \t%f21, %f20, %f10;\n\tsub.rm.f32 \t%f22, %f21, %f11;\n"
    body += "\tmov.b32 \t%r1, %f22;\n\tst.global.u32 \t[%rd9], %r1;\n"
    k = _kernel(body)
    mk = lower(k)
    # the entries (operands defined): fast fma and add rounding to nearest, fast mul (rz) and
    # add (rm) rounding by the mode register; the general fma and add are what they fall back to
    assert len(mk.calls) == 8 and len({e for _, e, _ in mk.calls}) == 4
    one = lower(_kernel("\tfma.rn.f32 \t%f10, %f9, 0f3FC00000, 0f3F800000;\n"
                        "\tadd.f32 \t%f20, %f10, %f9;\n\tmul.rz.f32 \t%f21, %f20, %f10;\n"
                        "\tsub.rm.f32 \t%f22, %f21, %f10;\n\tmov.b32 \t%r1, %f22;\n"
                        "\tst.global.u32 \t[%rd9], %r1;\n"))
    assert len(one.calls) == 4 and len({e for _, e, _ in one.calls}) == 4
    assert len(mk.instructions) - len(one.instructions) < 4 * 16      # code grows per site only
    a = launch(k, 1, 16, [np.zeros(16, np.uint32)])
    b = launch(mk, 1, 16, [np.zeros(16, np.uint32)])
    assert a.buffers[0].tobytes() == b.buffers[0].tobytes()
    # liveness sees a call as one instruction: nothing live across one call is live in the routine
    lv = liveness(mk)
    routine = set(range(min(e for _, e, _ in mk.calls), len(mk.instructions)))
    across = set().union(*(lv.live_out[c] - lv.defs[c] for c, _, _ in mk.calls))
    assert across and not any(across & lv.live_in[j] for j in routine)
    ak, al = allocate(mk)
    assert sum(al.counts.values()) <= 32
    c = launch(ak, 1, 16, [np.zeros(16, np.uint32)])
    assert c.buffers[0].tobytes() == a.buffers[0].tobytes()


def test_division_and_roots_are_entries_of_the_same_routine():
    # a quotient and a root are rounded by the routine's common part, like a product: one
    # routine (rcp is 1 / a: the DIV entry), each site returning to itself; the sites call the
    # fast add, mul and div entries (rounding to nearest; div.rz's by the mode register) and sqrt
    body = ("\tadd.f32 \t%f10, %f9, 0f3FC00000;\n\tmul.f32 \t%f11, %f10, %f10;\n"
            "\tdiv.rn.f32 \t%f12, %f11, %f9;\n\tsqrt.rn.f32 \t%f13, %f12;\n\trcp.rn.f32 \t%f14, %f13;\n"
            "\tdiv.rz.f32 \t%f15, %f14, %f10;\n\tmov.b32 \t%r1, %f15;\n\tst.global.u32 \t[%rd9], %r1;\n")
    k = _kernel(body)
    mk = lower(k)
    assert len(mk.calls) == 6 and len({e for _, e, _ in mk.calls}) == 5
    a = launch(k, 1, 16, [np.zeros(16, np.uint32)])
    b = launch(mk, 1, 16, [np.zeros(16, np.uint32)])
    assert a.buffers[0].tobytes() == b.buffers[0].tobytes()
    assert len(set(a.buffers[0].tolist())) > 8          # not a constant: every thread differs
    ak, al = allocate(mk)
    assert sum(al.counts.values()) <= 32
    assert launch(ak, 1, 16, [np.zeros(16, np.uint32)]).buffers[0].tobytes() == a.buffers[0].tobytes()


def test_a_kernel_with_f32_and_f64_arithmetic_has_one_routine_per_format():
    body = ("\tcvt.f64.f32 \t%fd1, %f9;\n\tmul.rn.f64 \t%fd2, %fd1, 0d3FF8000000000000;\n"
            "\tsqrt.rz.f64 \t%fd3, %fd2;\n\tcvt.rn.f32.f64 \t%f10, %fd3;\n\tdiv.rn.f32 \t%f11, %f10, %f9;\n"
            "\tfma.rm.f64 \t%fd4, %fd3, %fd2, %fd1;\n\tcvt.rz.f32.f64 \t%f12, %fd4;\n"
            "\tadd.f32 \t%f13, %f11, %f12;\n\tmov.b32 \t%r1, %f13;\n\tst.global.u32 \t[%rd9], %r1;\n")
    k = parse_ptx(kernel_ptx(OUT + body + "\tret;\n", decls="\t.reg .f64 \t%fd<8>;\n")).kernel()
    mk = lower(k)
    # entries (operands defined): f64 the fast mul and fma ones and sqrt; f32 the fast div and add
    assert len(mk.calls) == 5 and len({e for _, e, _ in mk.calls}) == 5
    a = launch(k, 1, 16, [np.zeros(16, np.uint32)])
    b = launch(mk, 1, 16, [np.zeros(16, np.uint32)])
    assert a.buffers[0].tobytes() == b.buffers[0].tobytes()
    assert len(set(a.buffers[0].tolist())) > 8
    ak, _ = allocate(mk)
    assert launch(ak, 1, 16, [np.zeros(16, np.uint32)]).buffers[0].tobytes() == a.buffers[0].tobytes()


ATOMICS = """\tld.param.u64 \t%rd1, [out];
\tld.param.u64 \t%rd3, [vals];
\tmov.u32 \t%r100, %tid.x;
\tsetp.eq.u32 \t%p2, %r100, 0;
\t@%p2 st.shared.u32 \t[sh], 0;
\tbar.sync \t0;
\tmul.wide.u32 \t%rd2, %r100, 8;
\tadd.s64 \t%rd4, %rd3, %rd2;
\tld.global.f32 \t%f1, [%rd4];
\tld.global.f64 \t%fd1, [%rd4];
\tand.b32 \t%r1, %r100, 1;
\tsetp.eq.u32 \t%p1, %r1, 0;
\t@%p1 atom.global.add.f32 \t%f2, [%rd1], %f1;
\t@!%p1 red.global.add.f32 \t[%rd1+4], %f1;
\tatom.global.add.f64 \t%fd2, [%rd1+8], %fd1;
\tred.shared.add.f32 \t[sh], 0f00000001;
\tbar.sync \t0;
\tld.shared.f32 \t%f3, [sh];
\tadd.s64 \t%rd5, %rd1, %rd2;
\tst.global.f64 \t[%rd5+16], %fd2;
\t@%p1 st.global.f32 \t[%rd5+20], %f2;
\tst.global.f32 \t[%rd1+12], %f3;
"""


def test_float_atomics_add_one_at_a_time_and_return_the_old_values():
    # a compare-and-swap loop around the ADD entry: the sums and every returned old value equal
    # the interpreter's (which adds in ascending lane order, as this machine's loop does within
    # a warp); f32 flushes subnormals (the shared counter's 1-ulp subnormal adds stay 0), f64 not
    text = kernel_ptx(ATOMICS + "\tret;\n", params=[("out", "u64"), ("vals", "u64")],
                      decls="\t.reg .f64 \t%fd<8>;\n\t.shared .align 4 .b8 sh[4];\n")
    k = parse_ptx(text).kernel()
    rng = np.random.default_rng(3)
    vals = rng.normal(0, 1e3, 32).astype(np.float64)
    vals.view(np.uint32)[::4] = rng.integers(0, 1 << 23, 16)          # f32 subnormals in a
    vals[5] = 5e-320                                                   # an f64 subnormal

    def run(kern):
        res = launch(kern, 1, 32, [np.zeros(2 + 2 * 32 + 2, np.uint64), vals.copy()])
        return res.buffers[0]
    want = run(k)
    mk = lower(k)
    # the fast ADD entries for the global words (f32, f64: their old values are defined) and
    # the general f32 one for the shared counter
    assert len({e for _, e, _ in mk.calls}) == 3
    assert run(mk).tobytes() == want.tobytes()
    assert want.view(np.uint32)[3] == 0                                # flushed, in both
    ak, _ = allocate(mk)
    assert run(ak).tobytes() == want.tobytes()


@pytest.mark.parametrize("form", FORMS + FORMS64)
def test_every_lowered_form_is_alu_computable(form):
    # the ALU computes each step of the expansion from operands of the instruction's width (a
    # 64-bit register read by a 32-bit compare would be truncated by the interpreter, not the ALU)
    ak, _ = allocate(lower(parse_ptx(kernel_for(form)).kernel()))
    dt = np.uint64 if is64(form) else np.uint32
    args = [np.zeros(64, dt) for _ in range(4)]
    assert datapath_problems(ak, register_slots(ak), 1, 64, args) == []


def test_conversion_routines_return_from_their_return_branches():
    """Kernel.returns names the routines' return branches (liveness follows them to the sites)."""
    body = "\tmul.rn.f32 \t%f10, %f9, 0fBF3851EC;\n\tcvt.rni.s32.f32 \t%r1, %f10;\n"
    body += "\tcvt.rzi.s32.f32 \t%r2, %f10;\n\tadd.u32 \t%r3, %r1, %r2;\n\tst.global.u32 \t[%rd9], %r3;\n\tret;\n"
    mk = lower(parse_ptx(kernel_ptx(OUT + body)).kernel(), cvt_routines=True)
    assert mk.returns and all(mk.instructions[i].opcode == "bra" for i in mk.returns)
    allocate(mk)                                 # liveness through the returns


def _contended_kernel(F, space, m):
    """Lane l adds vals[l] to word l % m of `space` and stores the old value it got; the words go
    to out[32 ..] at the end (a shared array is zeroed first)."""
    w, t = (64, "f64") if F == "f64" else (32, "f32")
    r = "%fd" if w == 64 else "%f"
    sz = w // 8
    body = f"""\tld.param.u64 \t%rd1, [out];
\tld.param.u64 \t%rd3, [vals];
\tmov.u32 \t%r100, %tid.x;
\tmul.wide.u32 \t%rd2, %r100, {sz};
\tadd.s64 \t%rd4, %rd3, %rd2;
\tld.global.{t} \t{r}1, [%rd4];
\trem.u32 \t%r1, %r100, {m};
\tmul.wide.u32 \t%rd5, %r1, {sz};
"""
    if space == "shared":
        body += f"""\tmov.b{w} \t{r}2, 0;
\tmov.u64 \t%rd6, sh;
\tadd.s64 \t%rd7, %rd6, %rd2;
\tcvt.u32.u64 \t%r7, %rd7;
\tst.shared.{t} \t[%r7], {r}2;
\tbar.sync \t0;
\tcvt.u32.u64 \t%r5, %rd5;
\tmov.u32 \t%r6, sh;
\tadd.u32 \t%r5, %r5, %r6;
\tatom.shared.add.{t} \t{r}3, [%r5], {r}1;
\tbar.sync \t0;
\tld.shared.{t} \t{r}4, [%r7];
"""
    else:
        body += f"""\tadd.s64 \t%rd8, %rd1, {32 * sz};
\tadd.s64 \t%rd9, %rd8, %rd5;
\tatom.global.add.{t} \t{r}3, [%rd9], {r}1;
\tbar.sync \t0;
\tadd.s64 \t%rd9, %rd8, %rd2;
\tld.global.{t} \t{r}4, [%rd9];
"""
    body += f"""\tadd.s64 \t%rd10, %rd1, %rd2;
\tst.global.{t} \t[%rd10], {r}3;
\tst.global.{t} \t[%rd10+{32 * sz}], {r}4;
\tret;
"""
    text = kernel_ptx(body, params=[("out", "u64"), ("vals", "u64")],
                      decls=f"\t.reg .f64 \t%fd<8>;\n\t.shared .align 8 .b8 sh[{32 * sz}];\n")
    return parse_ptx(text).kernel()


@pytest.mark.parametrize("F", ["f32", "f64"])
@pytest.mark.parametrize("space", ["global", "shared"])
def test_float_atomics_of_one_warp_take_turns_in_lane_order_at_a_linear_cost(F, space):
    # sums that round (the order of the additions shows in the bits), every returned old value,
    # one word for the whole warp, three, and a word per lane: equal to the interpreter's, which
    # adds in ascending lane order. The lanes take turns (word_memory.lane_loop) and a lane
    # calls the routine only when its word changed since the warp's first addition, so one word
    # for 32 lanes costs a call per lane: about twice the lane issues of a word per lane (the
    # compare-and-swap loop's rounds, one per lane ahead on the word, made it 15x: 62,624 lane
    # issues for f32 on one global word, now 5,977, with `lower(one_warp=True)`)
    dt = np.float64 if F == "f64" else np.float32
    rng = np.random.default_rng(11)
    vals = (rng.normal(0, 1, 32) * 10.0 ** rng.integers(-3, 4, 32)).astype(dt)
    vals[7] = -vals[3]
    issues = {}
    for m in (1, 3, 32):
        k = _contended_kernel(F, space, m)
        out = np.zeros(64, dt)
        want = launch(k, 1, 32, [out.copy(), vals.copy()])
        mk, grid, block = machine_kernel(k, (1, 1, 1), (32, 1, 1), [out, vals])
        got = launch(mk, grid, block, [out.copy(), vals.copy()])
        assert got.buffers[0].tobytes() == want.buffers[0].tobytes(), m
        issues[m] = got.lane_issues
        launch_tokens(mk, grid, block, [out.copy(), vals.copy()], [0])
    assert issues[1] < 3 * issues[32], issues


def _root_edges(f64: bool, rng) -> np.ndarray:
    """Operands where a Karatsuba step of softfloat._isqrt meets its edges: significands m = t (t +
    1) (the top part's remainder is twice its root, r1 = 2 s1: the divide steps then keep the
    remainder at the divisor), t^2 (no remainder), t^2 - 1 and t^2 + 1, as the integers m (an
    even exponent: the root's input unscaled) and 2 m (odd: m doubled)."""
    from math import isqrt
    mb = 52 if f64 else 23
    ts = [int(t) for t in rng.integers(isqrt(1 << mb), isqrt(1 << (mb + 1)), 200)]
    ms = [m for t in ts for m in (t * (t + 1), t * t, t * t - 1, t * t + 1) if 1 << mb <= m < 1 << (mb + 1)]
    vals = np.array(ms + [2 * m for m in ms], np.float64)
    return vals.view(np.uint64) if f64 else vals.astype(np.float32).view(np.uint32)


@pytest.mark.parametrize("form", ["sqrt.rn.f32", "sqrt.rn.f64", "sqrt.rm.f64"])
@pytest.mark.parametrize("inline", [False, True])
def test_roots_by_karatsuba_steps_match_at_their_edges(form, inline):
    """softfloat._isqrt: one Karatsuba step over the digit method (plain lowering) and the deeper
    steps (inline: the core's first lowering, straight steps) give the interpreter's bits on the
    operands that reach the step's edges, and on random normal and special operands."""
    rng = np.random.default_rng(3)
    f64 = is64(form)
    A = _root_edges(f64, rng)
    rest = operands64(400, rng) if f64 else operands(400, rng)
    A = np.concatenate([A, rest[0]])
    Z = np.zeros_like(A)
    want, got, steps = compare(form, A, Z, Z, inline_floats=inline)
    wrong = np.nonzero(want != got)[0]
    assert wrong.size == 0, [(hex(A[i % A.size]), hex(want[i]), hex(got[i])) for i in wrong[:5]]
    assert steps > 100
