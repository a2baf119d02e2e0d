"""Undefined values (poison): they flow silently and are an error only once observable."""
import numpy as np
import pytest

from gpu_layers.cases import compile_cached
from gpu_layers.errors import ExecutionError, UninitializedRead
from gpu_layers.interp.machine import Scalar, launch
from gpu_layers.interp.snippets import kernel_ptx, run_ptx
from gpu_layers.ptx.parser import parse_ptx
from gpu_layers.suite import SUITE_DIR

OUT = """\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r100, %tid.x;
\tmul.wide.u32 \t%rd2, %r100, 4;
\tadd.s64 \t%rd9, %rd1, %rd2;
"""
LANES = (1, 2, 4, 8, 32)


def run_body(body, n=32, **kw):
    return run_ptx(kernel_ptx(OUT + body + "\tret;\n"), 1, n, [np.zeros(n, np.uint32)], **kw).buffers[0]


def line_of(body, text):
    """Line number of the first line of the snippet's PTX containing `text`."""
    ptx = kernel_ptx(OUT + body + "\tret;\n")
    return next(i + 1 for i, ln in enumerate(ptx.splitlines()) if text in ln)


# ------------------------------------------------------------------- flows without an error


def test_selp_takes_only_the_selected_operand():
    body = """\tsetp.lt.u32 \t%p1, %r100, 8;
\tselp.b32 \t%r2, 5, %r50, %p1;
\t@%p1 st.global.u32 \t[%rd9], %r2;
"""
    assert list(run_body(body)) == [5] * 8 + [0] * 24
    # the lanes that selected the undefined operand store it: an error naming lane 8
    with pytest.raises(UninitializedRead, match=r"%r2.*%r50 was never written.*thread \(8,0,0\)"):
        run_body(body.replace("@%p1 st", "st"))


def test_poison_flows_through_moves_arithmetic_conversions_and_compares():
    body = """\tmov.u32 \t%r2, %r50;
\tadd.s32 \t%r3, %r2, 1;
\tcvt.u64.u32 \t%rd3, %r3;
\tcvt.rn.f32.u64 \t%f1, %rd3;
\tsetp.gt.f32 \t%p2, %f1, 0f00000000;
\tst.global.u32 \t[%rd9], 3;
"""
    assert list(run_body(body)) == [3] * 32
    guarded = body + "\t@%p2 st.global.u32 \t[%rd9], 4;\n"
    with pytest.raises(UninitializedRead) as ei:
        run_body(guarded)
    msg = str(ei.value)
    assert "%p2" in msg and "%r50 was never written" in msg
    assert f"line {line_of(guarded, '%p2 st')}" in msg and f"line {line_of(guarded, 'mov.u32 	%r2')}" in msg


@pytest.mark.parametrize("op, known, defined", [
    ("or.pred", 1, True), ("or.pred", 0, False), ("and.pred", 0, True), ("and.pred", 1, False)])
def test_and_or_with_a_dominating_operand_are_defined(op, known, defined):
    # nvcc writes `or.pred %p5, %p4, %p3` for `bi < 0 || v < best` with best still undefined
    body = f"""\tsetp.lt.f32 \t%p1, %f1, %f50;
\tsetp.eq.u32 \t%p2, %r100, {'%r100' if known else 99};
\t{op} \t%p3, %p2, %p1;
\tselp.u32 \t%r2, 1, 2, %p3;
\tst.global.u32 \t[%rd9], %r2;
"""
    body = "\tmov.f32 \t%f1, 0f3F800000;\n" + body
    if defined:
        assert list(run_body(body)) == [1 if op == "or.pred" else 2] * 32
    else:
        with pytest.raises(UninitializedRead, match="%f50 was never written"):
            run_body(body)


def test_and_with_zero_is_defined_on_integers():
    body = "\tand.b32 \t%r2, %r50, 0;\n\tor.b32 \t%r3, %r51, -1;\n\tadd.s32 \t%r4, %r2, %r3;\n" \
           "\tst.global.u32 \t[%rd9], %r4;\n"
    assert list(run_body(body)) == [0xFFFFFFFF] * 32
    with pytest.raises(UninitializedRead, match="%r50"):
        run_body(body.replace("%r50, 0;", "%r50, 1;"))


def test_unwritten_shared_memory_loads_poison_and_storing_it_is_an_error():
    decls = "\t.shared .align 4 .b8 s[128];\n"
    body = "\tmov.u32 \t%r1, s;\n\tshl.b32 \t%r2, %r100, 2;\n\tadd.s32 \t%r3, %r1, %r2;\n" \
           "\tld.shared.u32 \t%r4, [%r3];\n"
    ptx = kernel_ptx(OUT + body + "\tst.global.u32 \t[%rd9], 1;\n\tret;\n", decls=decls)
    assert list(run_ptx(ptx, 1, 32, [np.zeros(32, np.uint32)]).buffers[0]) == [1] * 32
    ptx = kernel_ptx(OUT + body + "\tst.global.u32 \t[%rd9], %r4;\n\tret;\n", decls=decls)
    with pytest.raises(UninitializedRead, match=r"%r4.*ld.shared.u32.*nothing has written"):
        run_ptx(ptx, 1, 32, [np.zeros(32, np.uint32)])


def test_shuffle_source_is_an_error_only_when_a_reader_consumes_it():
    # lanes 16-31 never write %r2; everyone reads lane (tid & 15): fine
    body = """\tsetp.lt.u32 \t%p1, %r100, 16;
\t@%p1 mov.u32 \t%r2, %r100;
\tand.b32 \t%r3, %r100, 15;
\tshfl.sync.idx.b32 \t%r4, %r2, %r3, 31, -1;
\tst.global.u32 \t[%rd9], %r4;
"""
    assert list(run_body(body)) == [t & 15 for t in range(32)]
    with pytest.raises(UninitializedRead, match=r"reads %r2 of lane 16.*%r2 was never written"):
        run_body(body.replace("and.b32 \t%r3, %r100, 15", "xor.b32 \t%r3, %r100, 16"))


# --------------------------------------------------------------------- observable: an error


@pytest.mark.parametrize("use, match", [
    ("\tst.global.u32 \t[%rd9], %r50;\n", "st.global.u32"),                   # stored
    ("\tcvt.u64.u32 \t%rd3, %r50;\n\tadd.s64 \t%rd4, %rd1, %rd3;\n"
     "\tld.global.u32 \t%r2, [%rd4];\n", "ld.global.u32"),                      # an address
    ("\tatom.global.add.u32 \t%r2, [%rd9], %r50;\n", "atom.global.add"),     # an atomic operand
    ("\tsetp.eq.u32 \t%p1, %r50, 0;\n\t@%p1 bra \tL_x;\nL_x:\n", "bra"),      # a branch condition
    ("\tshfl.sync.idx.b32 \t%r2, %r100, 0, 31, %r50;\n", "membermask"),       # a membermask
    ("\tsetp.eq.u32 \t%p1, %r50, 0;\n\tvote.sync.any.pred \t%p2, %p1, -1;\n", "vote.sync"),
])
def test_observable_uses_of_poison_are_errors(use, match):
    with pytest.raises(UninitializedRead, match=match) as ei:
        run_body(use)
    msg = str(ei.value)
    assert "undefined value" in msg and "%r50 was never written" in msg or "membermask" in msg
    assert "thread (0,0,0)" in msg and "line" in msg


# ------------------------------------------------------------ real nvcc loop and branch shapes

KERNELS = SUITE_DIR / "undefined_phis.cu"
X = np.array([3, -1, 4, -1, 5, -9, 2, 6, -5, 3, 5, -8, 9, 7, -9, 3, 2, -3, 8, 4, -6, 2, 6, 4, 3, 3,
              -8, 3, 2, 7, 9, 5, 0, -2, 1, 1, -4, 8, 2, -7], np.int32)


def _module():
    return parse_ptx(compile_cached(KERNELS.read_text()))


def _refs(name, x, n, key=0):
    t = np.arange(32)
    if name == "last_positive":
        out = []
        for i in t:
            pos = [x[j] for j in range(i, n, 7) if x[j] > 0]
            out.append(pos[-1] if pos else -1)
        return out
    if name == "first_match":
        return [next((j for j in range(n) if x[j] == key + i), -1) for i in t]
    if name == "prev_value":
        out = []
        for i in t:
            vals = [int(x[(j + i) % n]) for j in range(n)]
            acc = sum(vals[j] * vals[j - 1] for j in range(1, n))
            out.append(np.int32(np.int64(acc) & 0xFFFFFFFF if acc >= 0 else acc))
        return out
    if name == "min_index":
        out = []
        for i in t:
            cand = list(range(i, n, 3))
            out.append(min(cand, key=lambda j: (x[j], j)) if cand else -1)
        return out
    raise KeyError(name)


@pytest.mark.parametrize("name", ["last_positive", "first_match", "prev_value", "min_index"])
@pytest.mark.parametrize("n", [0, 5, 40])
def test_nvcc_phis_of_undefined_values_run_like_a_gpu(name, n):
    kernel = _module().kernel(name)
    x = X.astype(np.float32) if name == "min_index" else X
    args = [x, Scalar("i32", n)] + ([Scalar("i32", 2)] if name == "first_match" else []) + \
        [np.zeros(32, np.int32)]
    want = np.array(_refs(name, X, n, 2), np.int32)
    prints = set()
    for lanes in LANES:
        res = launch(kernel, 1, 32, args, lanes=lanes)
        assert res.buffers[-1].tolist() == want.tolist(), (name, n, lanes)
        prints.add(res.fingerprint)
    assert len(prints) == 1


def test_the_nvcc_shapes_really_read_unwritten_registers():
    """Guard against a vacuous test: each kernel's first thread reads a never-written register,
    so each would fail under a strict rule. Seen by making every read of poison observable."""
    from gpu_layers.interp import machine

    strict = []
    for name in ["last_positive", "prev_value", "min_index"]:
        kernel = _module().kernel(name)
        prog = machine.program_for(kernel)
        saved = [(d, d.pmode) for d in prog.code]
        try:
            for d in prog.code:
                d.pmode = "strict"
            with pytest.raises(ExecutionError, match="never written"):
                x = X.astype(np.float32) if name == "min_index" else X
                launch(kernel, 1, 32, [x, Scalar("i32", 40), np.zeros(32, np.int32)])
            strict.append(name)
        finally:
            for d, m in saved:
                d.pmode = m
    assert strict == ["last_positive", "prev_value", "min_index"]
