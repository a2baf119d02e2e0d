"""Every typed error of the interpreter, with a message that names what went wrong and where."""
import numpy as np
import pytest

from gpu_layers.errors import (
    ExecutionError, LaunchError, OutOfBounds, StepBudgetExceeded, UninitializedRead,
)
from gpu_layers.interp import Scalar, launch
from gpu_layers.interp.snippets import kernel_ptx, run_ptx
from gpu_layers.ptx import parse_ptx

OUT = """\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r100, %tid.x;
\tmul.wide.u32 \t%rd2, %r100, 4;
\tadd.s64 \t%rd9, %rd1, %rd2;
"""


def _k(body, **kw):
    return parse_ptx(kernel_ptx(OUT + body + "\tret;\n", **kw)).kernel()


def _line(kernel, opcode_text):
    return next(i.line for i in kernel.instructions if i.name == opcode_text)


def test_uninitialised_register_read_names_register_line_and_thread():
    k = _k("\tadd.s32 \t%r2, %r1, 1;\n\tst.global.u32 \t[%rd9], %r2;\n")
    with pytest.raises(UninitializedRead) as ei:
        launch(k, 1, 4, [np.zeros(4, np.int32)])
    msg = str(ei.value)
    assert "%r1" in msg and f"line {_line(k, 'add.s32')}" in msg and "thread (0,0,0)" in msg


def test_uninitialised_guard_predicate():
    k = _k("\t@%p3 st.global.u32 \t[%rd9], 1;\n")
    with pytest.raises(UninitializedRead, match="%p3"):
        launch(k, 1, 4, [np.zeros(4, np.int32)])


def test_partially_written_register_is_caught_for_the_unwritten_thread():
    body = """\tsetp.eq.u32 \t%p1, %r100, 2;
\t@%p1 mov.u32 \t%r5, 7;
\tst.global.u32 \t[%rd9], %r5;
"""
    with pytest.raises(UninitializedRead, match=r"%r5.*thread \(0,0,0\)"):
        launch(_k(body), 1, 4, [np.zeros(4, np.int32)])


def test_out_of_bounds_global_store_names_buffer_address_and_line():
    k = _k("\tst.global.u32 \t[%rd9+16], %r100;\n")
    with pytest.raises(OutOfBounds) as ei:
        launch(k, 1, 4, [np.zeros(4, np.int32)])
    msg = str(ei.value)
    assert "'out'" in msg and f"line {_line(k, 'st.global.u32')}" in msg and "0x" in msg
    assert "thread (0,0,0)" in msg


def test_a_load_into_its_own_address_register_faults_in_the_right_thread():
    # threads 0..3 load in range, thread 4 past the end: the error is thread 4's, not thread 0's
    # re-run from its loaded value (the scalar fast path used to restart on the general one)
    k = _k("\tmul.wide.u32 \t%rd3, %r100, 8;\n\tadd.s64 \t%rd3, %rd1, %rd3;\n"
           "\tld.global.u64 \t%rd3, [%rd3];\n\tst.global.u32 \t[%rd9], 1;\n")
    with pytest.raises(OutOfBounds) as ei:
        launch(k, 1, 8, [np.zeros(4, np.int64)])
    assert "thread (4,0,0)" in str(ei.value) and "0x1000000020" in str(ei.value)
    res = launch(k, 1, 4, [np.arange(4, dtype=np.int64) + 7])
    assert res.buffers[0].tolist() == [(1 << 32) + 1, (1 << 32) + 1, 9, 10]


def test_misaligned_access():
    k = _k("\tld.global.u32 \t%r1, [%rd1+2];\n")
    with pytest.raises(OutOfBounds, match="misaligned"):
        launch(k, 1, 1, [np.zeros(4, np.int32)])


def test_wild_pointer_and_out_of_range_local():
    k = _k("\tld.global.u32 \t%r1, [%rd2];\n")    # %rd2 is an offset, not a pointer
    with pytest.raises(OutOfBounds, match="not inside any buffer"):
        launch(k, 1, 2, [np.zeros(4, np.int32)])
    decls = "\t.local .align 4 .b8 \tdepot[8];\n"
    k = _k("\tst.local.u32 \t[depot+8], 1;\n", decls=decls)
    with pytest.raises(OutOfBounds, match="local"):
        launch(k, 1, 1, [np.zeros(4, np.int32)])


def test_uninitialised_local_memory_read():
    decls = "\t.local .align 4 .b8 \tdepot[8];\n"
    load = "\tst.local.u32 \t[depot], 1;\n\tld.local.u32 \t%r1, [depot+4];\n"
    launch(_k(load, decls=decls), 1, 1, [np.zeros(4, np.int32)])      # an unused undefined value
    k = _k(load + "\tst.global.u32 \t[%rd9], %r1;\n", decls=decls)
    with pytest.raises(UninitializedRead, match=r"%r1.*ld.local.u32.*nothing has written"):
        launch(k, 1, 1, [np.zeros(4, np.int32)])


def test_step_budget_stops_an_infinite_loop():
    k = _k("L_forever:\n\tadd.s32 \t%r100, %r100, 1;\n\tbra.uni \tL_forever;\n")
    with pytest.raises(StepBudgetExceeded, match="1000"):
        launch(k, 1, 32, [np.zeros(32, np.int32)], step_budget=1000)


def test_default_step_budget_is_set():
    from gpu_layers.interp import DEFAULT_STEP_BUDGET

    assert DEFAULT_STEP_BUDGET == 2_000_000


@pytest.mark.parametrize("grid, block, args, kw, match", [
    (1, (2048, 1, 1), None, {}, "1024"),
    (1, (33, 33, 1), None, {}, "threads"),
    (1, (1, 1, 65), None, {}, "limits"),
    ((0, 1, 1), 32, None, {}, ">= 1"),
    ((1, 1, 1, 1), 32, None, {}, "1 to 3"),
    ((1 << 16, 1 << 5, 1), 32, None, {}, "exceeds"),
    (1, 32, [], {}, "takes 1 arguments"),
    (1, 32, [np.zeros(4, np.int32), 1], {}, "takes 1 arguments"),
    (1, 32, [1.5], {}, "float"),
    (1, 32, [np.zeros(4, np.int8)], {}, "dtype"),
    (1, 32, None, {"lanes": 3}, "divide 32"),
    (1, 32, None, {"dynamic_shared_bytes": 49 * 1024}, "shared memory"),
])
def test_bad_launches(grid, block, args, kw, match):
    k = _k("\tst.global.u32 \t[%rd9], %r100;\n")
    if args is None:
        args = [np.zeros(32, np.int32)]
    dsm = kw.pop("dynamic_shared_bytes", 0)
    with pytest.raises(LaunchError, match=match):
        launch(k, grid, block, args, dsm, **kw)


def test_scalar_argument_checks():
    params = [("out", "u64"), ("n", "u32")]
    k = _k("\tld.param.u32 \t%r1, [n];\n", params=params)
    buf = np.zeros(4, np.int32)
    launch(k, 1, 1, [buf, Scalar("u32", 2**32 - 1)])
    with pytest.raises(LaunchError, match="out of range"):
        launch(k, 1, 1, [buf, Scalar("i32", 2**31)])
    with pytest.raises(LaunchError, match="does not fit"):
        launch(k, 1, 1, [buf, Scalar("u64", 1)])
    with pytest.raises(LaunchError, match="64-bit"):
        launch(k, 1, 1, [buf, buf])
    with pytest.raises(LaunchError, match="does not fit"):
        launch(k, 1, 1, [buf, 2**32])


def test_barrier_with_a_partial_count_is_refused_at_run_time():
    k = _k("\tbar.sync \t0, 32;\n")
    launch(k, 1, 32, [np.zeros(32, np.int32)])
    with pytest.raises(ExecutionError, match="barrier for 32 threads"):
        launch(k, 1, 64, [np.zeros(64, np.int32)])


def test_errors_are_qwengpu_errors():
    from gpu_layers.errors import QwenGPUError

    for cls in (ExecutionError, LaunchError, OutOfBounds, StepBudgetExceeded, UninitializedRead):
        assert issubclass(cls, QwenGPUError)


def test_run_ptx_helper_and_trace():
    ptx = kernel_ptx(OUT + "\tst.global.u32 \t[%rd9], %r100;\n\tret;\n")
    res = run_ptx(ptx, 2, 4, [np.zeros(8, np.int32)], trace=True)
    assert [t[0] for t in res.trace] == [0] * 7 + [1] * 7
    assert list(res.buffers[0]) == [0, 1, 2, 3, 0, 0, 0, 0]


def test_padding_inside_a_partly_written_access_reads_as_zero():
    # a struct {int a; <4 bytes padding>; int b; int c} copied with one ld.v4: fine
    decls = "\t.local .align 16 .b8 \tdepot[16];\n"
    body = """\tst.local.u32 \t[depot], 5;
\tst.local.v2.u32 \t[depot+8], {6, 7};
\tld.local.v4.u32 \t{%r1, %r2, %r3, %r4}, [depot];
\tadd.s32 \t%r5, %r1, %r2;
\tadd.s32 \t%r5, %r5, %r4;
\tst.global.u32 \t[%rd9], %r5;
\tst.local.u8 \t[depot+5], 1;
\tld.local.u32 \t%r6, [depot+4];
\tst.global.u32 \t[%rd9+4], %r6;
"""
    res = launch(_k(body, decls=decls), 1, 1, [np.zeros(2, np.int32)])
    assert list(res.buffers[0]) == [12, 256]
    k = _k("\tst.local.u32 \t[depot], 5;\n\tld.local.v2.u32 \t{%r1, %r2}, [depot+8];\n"
           "\tst.global.u32 \t[%rd9], %r2;\n", decls=decls)
    with pytest.raises(UninitializedRead, match=r"%r2.*ld.local.v2.u32.*nothing has written"):
        launch(k, 1, 1, [np.zeros(2, np.int32)])


def test_maxntid_and_reqntid_bound_the_block():
    ptx = kernel_ptx(OUT + "\tret;\n").replace("\n{\n", "\n.maxntid 64, 1, 1\n{\n", 1)
    k = parse_ptx(ptx).kernel()
    launch(k, 1, 64, [np.zeros(64, np.int32)])
    with pytest.raises(LaunchError, match="maxntid"):
        launch(k, 1, 65, [np.zeros(65, np.int32)])
    ptx = kernel_ptx(OUT + "\tret;\n").replace("\n{\n", "\n.reqntid 32, 2\n{\n", 1)
    k = parse_ptx(ptx).kernel()
    launch(k, 1, (32, 2), [np.zeros(64, np.int32)])
    with pytest.raises(LaunchError, match="reqntid"):
        launch(k, 1, 64, [np.zeros(64, np.int32)])


def test_huge_local_arrays_are_refused_before_anything_runs():
    decls = "\t.local .align 4 .b8 \tdepot[1048576];\n"
    k = _k("\tst.local.u32 \t[depot], 1;\n", decls=decls)
    launch(k, 1, 4, [np.zeros(4, np.int32)])                      # 4 MiB for 4 threads: fine
    with pytest.raises(LaunchError, match="local memory"):
        launch(k, 1, 32, [np.zeros(4, np.int32)])                 # 32 MiB: refused
