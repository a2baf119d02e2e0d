"""Warp exchanges (gpu_layers.machine.warp_exchange): shfl.sync and vote.sync through a staging
array in shared memory compute what the interpreter computes, bit for bit, in blocks of one warp
and (waiting at the machine's warp barrier) of two, the machine core accepts them, and what the
sequence cannot wait for correctly (a partial membermask) or what the original raises on (reading
an exited lane) faults."""
import numpy as np
import pytest

from gpu_layers.errors import ExecutionError, OutOfBounds
from gpu_layers.interp import launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import allocate, lower
from gpu_layers.machine.core import launch_tokens
from gpu_layers.ptx.parser import parse_ptx

HEAD = """\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r100, %tid.x;
\tmul.wide.u32 \t%rd2, %r100, 4;
\tadd.s64 \t%rd9, %rd1, %rd2;
\tmul.lo.u32 \t%r1, %r100, 2654435761;
\tmov.u32 \t%r99, -1;
"""


def _kernel(body):
    return parse_ptx(kernel_ptx(HEAD + body + "\tret;\n")).kernel()


def _same(body, block, n_out=256, warps=1):
    k = _kernel(body)
    mk = lower(k, one_warp=True, warps=warps)
    assert not any(i.opcode in ("shfl", "vote") for i in mk.instructions)
    a = launch(k, 1, block, [np.zeros(n_out, np.uint32)])
    b = launch(mk, 1, block, [np.zeros(n_out, np.uint32)])
    assert a.buffers[0].tobytes() == b.buffers[0].tobytes()
    launch_tokens(allocate(mk)[0], (1, 1, 1), (block, 1, 1), [np.zeros(n_out, np.uint32)], [0])
    return a.buffers[0]


SHFL = """\tshfl.sync.{mode}.b32 \t%r2|%p1, %r1, {b}, {c}, %r99;
\tselp.b32 \t%r3, 1, 0, %p1;
\tst.global.u32 \t[%rd9+{o}], %r2;
\tst.global.u32 \t[%rd9+{o2}], %r3;
"""


def _operand(value, form, name):
    """(set-up code, operand): the value as an immediate, a constant register (one `mov` of an
    immediate: folded when lowering) or a register computed at run time (not folded)."""
    if form == "imm":
        return "", str(value)
    if form == "const":
        return f"\tmov.u32 \t{name}, {value};\n", name
    return f"\txor.b32 \t{name}, %r100, %r100;\n\tadd.u32 \t{name}, {name}, {value};\n", name


@pytest.mark.parametrize("block", [32, 20])
@pytest.mark.parametrize("form", ["imm", "const", "computed"])
def test_shuffles_of_every_mode_and_width_match_the_interpreter(block, form):
    body = ""
    cases = [("up", 1, 0), ("up", 3, 0x1800), ("down", 2, 31), ("down", 5, 0x1c1f), ("bfly", 4, 31),
             ("bfly", 1, 0x1e1f), ("idx", 7, 31), ("idx", 3, 0x181f), ("idx", 0x25, 0x101f)]
    for k, (mode, b, c) in enumerate(cases):
        if block < 32 and mode in ("down", "bfly", "idx"):
            continue                       # (lanes past the block: the interpreter raises)
        setb, ob = _operand(b, form, f"%r{40 + 2 * k}")
        setc, oc = _operand(c, form, f"%r{41 + 2 * k}")
        body += setb + setc + SHFL.format(mode=mode, b=ob, c=oc, o=256 * k, o2=256 * k + 128)
    out = _same(body.replace("+0]", "]"), block, n_out=640)
    assert out.any()


def test_known_operands_fold_away():
    """Constant b, c and a full membermask leave no membermask check and no segment arithmetic."""
    def length(mask_form, c_form):
        setm, om = _operand(-1, mask_form, "%r60")
        setc, oc = _operand(0x181f, c_form, "%r61")
        body = setm + setc + f"\tshfl.sync.bfly.b32 \t%r2, %r1, 4, {oc}, {om};\n\tst.global.u32 \t[%rd9], %r2;\n"
        _same(body, 32)
        return len(lower(_kernel(body), one_warp=True).instructions)

    # computed: two set-up instructions per operand (a folded constant's mov is not emitted), the
    # 6 of the membermask check, and the segment's 7 (cval, seg, ~seg, minl, maxl) where known
    # operands need 2 (minl, maxl)
    assert length("computed", "computed") - length("const", "const") == 4 + 6 + 5
    assert length("imm", "imm") == length("const", "const")      # the constants' movs are gone


@pytest.mark.parametrize("block, faults", [(32, True), (16, False)])
def test_a_constant_partial_membermask_is_checked_against_the_block(block, faults):
    body = ("\tmov.u32 \t%r98, 65535;\n"
            "\tshfl.sync.bfly.b32 \t%r2, %r1, 1, 31, %r98;\n\tst.global.u32 \t[%rd9], %r2;\n")
    k = _kernel(body)
    if faults:
        with pytest.raises(ExecutionError):
            launch(k, 1, block, [np.zeros(32, np.uint32)])     # the original: thread 16 outside its mask
        with pytest.raises(OutOfBounds):
            launch(lower(k, one_warp=True), 1, block, [np.zeros(32, np.uint32)])
    else:
        _same(body, block, n_out=32)


def test_a_shuffle_with_a_lane_dependent_source_in_a_loop():
    body = """\tmov.u32 \t%r5, 0;
$L1:
\tand.b32 \t%r6, %r1, 31;
\tshfl.sync.idx.b32 \t%r1, %r1, %r6, 31, %r99;
\tadd.u32 \t%r5, %r5, 1;
\tsetp.lt.u32 \t%p2, %r5, 3;
\t@%p2 bra $L1;
\tst.global.u32 \t[%rd9], %r1;
"""
    _same(body, 32)


@pytest.mark.parametrize("block", [32, 13])
def test_votes_match_the_interpreter(block):
    body = """\tand.b32 \t%r2, %r1, 4;
\tsetp.ne.u32 \t%p1, %r2, 0;
\tsetp.lt.u32 \t%p2, %r100, 40;
\tvote.sync.ballot.b32 \t%r3, %p1, %r99;
\tvote.sync.any.pred \t%p3, %p1, %r99;
\tvote.sync.all.pred \t%p4, %p2, %r99;
\tvote.sync.uni.pred \t%p5, %p1, %r99;
\tselp.b32 \t%r4, 1, 0, %p3;
\tselp.b32 \t%r5, 2, 0, %p4;
\tselp.b32 \t%r6, 4, 0, %p5;
\tadd.u32 \t%r4, %r4, %r5;
\tadd.u32 \t%r4, %r4, %r6;
\tst.global.u32 \t[%rd9], %r3;
\tst.global.u32 \t[%rd9+128], %r4;
"""
    out = _same(body, block)
    assert out[0] != 0 and out[32] == 3


def test_a_vote_after_lanes_exited_counts_only_the_others():
    body = """\tsetp.ge.u32 \t%p1, %r100, 24;
\t@%p1 ret;
\tsetp.ne.u32 \t%p2, %r100, 1;
\tvote.sync.ballot.b32 \t%r3, %p2, %r99;
\tst.global.u32 \t[%rd9], %r3;
"""
    out = _same(body, 32)
    assert out[0] == (1 << 24) - 1 - 2


def test_a_partial_membermask_faults_where_the_interpreter_runs_it():
    body = ("\tmov.u32 \t%r99, 65535;\n\tsetp.lt.u32 \t%p1, %r100, 16;\n\t@!%p1 ret;\n"
            "\tshfl.sync.bfly.b32 \t%r2, %r1, 1, 31, %r99;\n\tst.global.u32 \t[%rd9], %r2;\n")
    k = _kernel(body)
    launch(k, 1, 32, [np.zeros(32, np.uint32)])          # the original: lanes 0..15 exchange
    with pytest.raises(OutOfBounds):
        launch(lower(k, one_warp=True), 1, 32, [np.zeros(32, np.uint32)])


def test_reading_a_lane_that_exited_raises_in_both():
    body = ("\tsetp.eq.u32 \t%p1, %r100, 5;\n\t@%p1 ret;\n"
            "\tshfl.sync.idx.b32 \t%r2, %r1, 5, 31, %r99;\n\tst.global.u32 \t[%rd9], %r2;\n")
    k = _kernel(body)
    for kernel in (k, lower(k, one_warp=True)):
        with pytest.raises(ExecutionError):
            launch(kernel, 1, 32, [np.zeros(32, np.uint32)])


def test_the_staging_array_after_the_kernels_own_shared_memory():
    """The slots' addresses are numbers (warp_exchange.stage_address): with shared variables of
    the kernel's own before the staging array, the shuffle still reads the right slots."""
    body = ("\tshl.b32 \t%r5, %r100, 2;\n\tmov.u32 \t%r6, buf;\n\tadd.u32 \t%r6, %r6, %r5;\n"
            "\tst.shared.u32 \t[%r6], %r1;\n"
            "\tshfl.sync.down.b32 \t%r2, %r1, 3, 31, %r99;\n"
            "\tld.shared.u32 \t%r7, [%r6];\n\tadd.u32 \t%r2, %r2, %r7;\n\tst.global.u32 \t[%rd9], %r2;\n")
    k = parse_ptx(kernel_ptx(HEAD + body + "\tret;\n", decls="\t.shared .align 4 .b8 buf[132];\n")).kernel()
    mk = lower(k, one_warp=True)
    from gpu_layers.interp.decode import make_layout
    assert make_layout(mk).shared["__mq_stage"] == 136
    a = launch(k, 1, 32, [np.zeros(32, np.uint32)])
    b = launch(mk, 1, 32, [np.zeros(32, np.uint32)])
    assert a.buffers[0].tobytes() == b.buffers[0].tobytes()


TWO_WARPS = """\tshfl.sync.up.b32 \t%r2, %r1, 1, 0, %r99;
\tshfl.sync.idx.b32 \t%r7, %r1, 3, 31, %r99;
\tadd.u32 \t%r2, %r2, %r7;
\tand.b32 \t%r3, %r1, 4;
\tsetp.ne.u32 \t%p1, %r3, 0;
\tsetp.lt.u32 \t%p2, %r100, 40;
\tvote.sync.ballot.b32 \t%r4, %p1, %r99;
\tvote.sync.all.pred \t%p3, %p2, %r99;
\tselp.b32 \t%r5, 1, 0, %p3;
\tst.global.u32 \t[%rd9], %r2;
\tst.global.u32 \t[%rd9+256], %r4;
\tst.global.u32 \t[%rd9+512], %r5;
"""


@pytest.mark.parametrize("block", [64, 44])
def test_exchanges_in_a_block_of_two_warps(block):
    """Each warp exchanges among its own lanes (its 32 slots; a vote over the warp's lanes only,
    the partial second warp's 12 in a block of 44), waiting at the machine's warp barrier."""
    out = _same(TWO_WARPS, block, n_out=192, warps=2)
    assert out[128] == 1 and out[128 + 33] == 0           # all(tid < 40): in warp 0, not in warp 1


def test_a_partial_membermask_in_a_block_of_two_warps_faults():
    """Warp 0's lanes 16..31 exit, and its other lanes exchange with a mask of 16 lanes, as warp
    1 (16 threads) does: the original runs it, the lowering faults (its mask check names every
    thread of the warp, not only those that have not exited)."""
    body = ("\tsetp.ge.u32 \t%p1, %r100, 16;\n\tsetp.lt.u32 \t%p2, %r100, 32;\n\tand.pred \t%p1, %p1, %p2;\n"
            "\t@%p1 ret;\n\tmov.u32 \t%r99, 65535;\n"
            "\tshfl.sync.bfly.b32 \t%r2, %r1, 1, 31, %r99;\n\tst.global.u32 \t[%rd9], %r2;\n")
    k = _kernel(body)
    launch(k, 1, 48, [np.zeros(64, np.uint32)])
    with pytest.raises(OutOfBounds):
        launch(lower(k, one_warp=True, warps=2), 1, 48, [np.zeros(64, np.uint32)])
