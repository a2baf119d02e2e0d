"""Warp exchanges (gpu_layers.machine.warp_exchange): shfl.sync and vote.sync through a staging
array in shared memory compute what the interpreter computes, bit for bit, in blocks of one warp
and (waiting at the machine's warp barrier) of two, the machine core accepts them, and what the
sequence cannot wait for correctly (a partial membermask) or what the original raises on (reading
an exited lane) faults."""
import numpy as np
import pytest

from gpu_layers.errors import ExecutionError, OutOfBounds, UnsupportedPTX
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
    assert not any(i.opcode in ("shfl", "vote", "match", "activemask") for i in mk.instructions)
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


# ------------------------------------------------------------ partial membermasks (partial_exchange)

# lanes 0..7 (the first 8 of each warp) arrive one by one: lane l first runs l turns of a loop,
# then votes / matches with the 8-lane mask; the others skip it
STAGGER = """\tand.b32 \t%r40, %r100, 31;
\tmov.u32 \t%r20, 0;
\tmov.u32 \t%r21, 0;
\tmov.u32 \t%r22, 0;
\tsetp.ge.u32 \t%p9, %r40, 8;
\t@%p9 bra $SKIP;
\tmov.u32 \t%r41, 0;
$SPIN:
\tsetp.ge.u32 \t%p8, %r41, %r40;
\t@%p8 bra $VOTE;
\tadd.u32 \t%r41, %r41, 1;
\tbra $SPIN;
$VOTE:
{body}$SKIP:
\tst.global.u32 \t[%rd9], %r20;
\tst.global.u32 \t[%rd9+256], %r21;
\tst.global.u32 \t[%rd9+512], %r22;
"""


@pytest.mark.parametrize("block, warps", [(32, 1), (20, 1), (64, 2), (44, 2)])
def test_partial_votes_wait_for_the_lanes_their_mask_names(block, warps):
    """Every mode under an 8-lane mask whose lanes arrive at different steps (they spin until the
    others' counts reach theirs), twice in a loop (a lane may come back before another read it)."""
    body = """\tmov.u32 \t%r42, 0;
$AGAIN:
\tand.b32 \t%r2, %r1, 8;
\tsetp.ne.u32 \t%p1, %r2, 0;
\tvote.sync.ballot.b32 \t%r3, %p1, 255;
\tadd.u32 \t%r20, %r20, %r3;
\tvote.sync.any.pred \t%p2, %p1, 255;
\tvote.sync.all.pred \t%p3, %p1, 255;
\tvote.sync.uni.pred \t%p4, %p1, 255;
\tselp.b32 \t%r4, 1, 0, %p2;
\tselp.b32 \t%r5, 2, 0, %p3;
\tselp.b32 \t%r6, 4, 0, %p4;
\tadd.u32 \t%r21, %r21, %r4;
\tadd.u32 \t%r21, %r21, %r5;
\tadd.u32 \t%r21, %r21, %r6;
\tmul.lo.u32 \t%r1, %r1, 1103515245;
\tadd.u32 \t%r42, %r42, 1;
\tsetp.lt.u32 \t%p5, %r42, 2;
\t@%p5 bra $AGAIN;
"""
    out = _same(STAGGER.format(body=body), block, n_out=192, warps=warps)
    assert out[0] != 0


@pytest.mark.parametrize("width", ["b32", "b64"])
@pytest.mark.parametrize("block, warps", [(32, 1), (64, 2)])
def test_partial_matches_match_the_interpreter(width, block, warps):
    """match.any and match.all (value and predicate) under an 8-lane mask with a hole (lanes
    0..7 but 5, which exits first), values repeating across the lanes."""
    conv = "\tcvt.u64.u32 \t%rd20, %r7;\n\tshl.b64 \t%rd20, %rd20, 33;\n" if width == "b64" else ""
    val = "%rd20" if width == "b64" else "%r7"
    body = f"""\tand.b32 \t%r7, %r40, 3;
{conv}\tmatch.any.sync.{width} \t%r20, {val}, 223;
\tmatch.all.sync.{width} \t%r21|%p1, {val}, 223;
\tselp.b32 \t%r22, 1, 0, %p1;
"""
    exit5 = "\tand.b32 \t%r43, %r100, 31;\n\tsetp.eq.u32 \t%p7, %r43, 5;\n\t@%p7 ret;\n"
    out = _same(exit5 + STAGGER.format(body=body), block, n_out=192, warps=warps)
    assert out[0] == 0b00010001 and out[1] == 0b00000010      # lane 5 exited: 0, 4 / 1 (not 5)


def test_partial_match_all_of_equal_values():
    body = ("\tshr.u32 \t%r8, %r40, 3;\n\tmatch.all.sync.b32 \t%r21|%p1, %r8, 255;\n"
            "\tselp.b32 \t%r22, 1, 0, %p1;\n")
    out = _same(STAGGER.format(body=body), 32, n_out=192)
    assert out[64] == 255 and out[128] == 1                   # lanes 0..7 hold 0: all equal


def test_a_thread_outside_its_partial_mask_faults_as_the_original_raises():
    body = "\tvote.sync.ballot.b32 \t%r20, %p9, 127;\n"     # lane 7 is not in the mask
    k = _kernel(STAGGER.format(body=body))
    with pytest.raises(ExecutionError):
        launch(k, 1, 32, [np.zeros(192, np.uint32)])
    with pytest.raises(OutOfBounds):
        launch(lower(k, one_warp=True), 1, 32, [np.zeros(192, np.uint32)])


@pytest.mark.parametrize("block, warps", [(32, 1), (24, 1), (64, 2), (48, 2)])
def test_full_mask_matches_of_both_widths(block, warps):
    body = """\tsetp.eq.u32 \t%p7, %r100, 3;
\t@%p7 ret;
\tand.b32 \t%r7, %r1, 0x30000000;
\tcvt.u64.u32 \t%rd20, %r7;
\tand.b32 \t%r8, %r100, 1;
\tcvt.u64.u32 \t%rd21, %r8;
\tshl.b64 \t%rd21, %rd21, 40;
\tor.b64 \t%rd20, %rd20, %rd21;
\tmatch.any.sync.b32 \t%r2, %r7, %r99;
\tmatch.any.sync.b64 \t%r3, %rd20, -1;
\tmatch.all.sync.b32 \t%r4|%p1, %r7, -1;
\tmatch.all.sync.b64 \t%r5|%p2, %rd21, %r99;
\tselp.b32 \t%r6, 1, 0, %p1;
\tselp.b32 \t%r9, 2, 0, %p2;
\tadd.u32 \t%r6, %r6, %r9;
\tst.global.u32 \t[%rd9], %r2;
\tst.global.u32 \t[%rd9+256], %r3;
\tst.global.u32 \t[%rd9+512], %r4;
\tst.global.u32 \t[%rd9+768], %r6;
"""
    out = _same(body, block, n_out=256, warps=warps)
    assert out[0] != 0 and out[0] != out[64]


def test_activemask_sees_the_original_groups():
    """At entry, in each side of an if / else (the sides run one after the other) and after they
    rejoin; in a block of two warps, the second one partial."""
    body = """\tactivemask.b32 \t%r2;
\tand.b32 \t%r3, %r100, 6;
\tsetp.eq.u32 \t%p1, %r3, 2;
\t@%p1 bra $ELSE;
\tactivemask.b32 \t%r4;
\tbra $JOIN;
$ELSE:
\tactivemask.b32 \t%r4;
$JOIN:
\tactivemask.b32 \t%r5;
\tst.global.u32 \t[%rd9], %r2;
\tst.global.u32 \t[%rd9+256], %r4;
\tst.global.u32 \t[%rd9+512], %r5;
"""
    out = _same(body, 32, n_out=192)
    assert out[0] == 0xFFFFFFFF and out[64] == 0xF3F3F3F3 and out[66] == 0x0C0C0C0C and out[129] == out[0]
    out = _same(body, 40, n_out=192, warps=2)
    assert out[32] == 0xFF and out[64 + 33] == 0xF3 and out[64 + 34] == 0x0C


def test_activemask_after_code_lowered_with_branches_is_refused():
    """A 64-bit division before it is a loop in machine code: the groups there need not be the
    original's, so the lowering names the instruction instead of guessing."""
    body = ("\tcvt.u64.u32 \t%rd20, %r1;\n\tdiv.u64 \t%rd20, %rd20, %rd1;\n"
            "\tactivemask.b32 \t%r2;\n\tst.global.u32 \t[%rd9], %r2;\n")
    with pytest.raises(UnsupportedPTX, match="activemask"):
        lower(_kernel(body), one_warp=True)


@pytest.mark.parametrize("mask, ok", [("-1", True), ("%r99", True), ("65535", False)])
def test_syncwarp(mask, ok):
    body = (f"\tst.global.u32 \t[%rd9], %r1;\n\tbar.warp.sync \t{mask};\n"
            "\tld.global.u32 \t%r2, [%rd9+4];\n\tst.global.u32 \t[%rd9+128], %r2;\n")
    if ok:
        _same(body.replace("[%rd9+4]", "[%rd9]"), 32, n_out=64)
        _same(body.replace("[%rd9+4]", "[%rd9]"), 64, n_out=128, warps=2)
    else:
        with pytest.raises(UnsupportedPTX, match="bar.warp.sync"):
            lower(_kernel(body), one_warp=True)


@pytest.mark.parametrize("block, warps", [(32, 1), (20, 1), (64, 2), (44, 2)])
def test_partial_shuffles_of_every_mode(block, warps):
    """Lanes 0..7 arriving one by one shuffle under the 8-lane mask (segments of 8: c = 0x1807),
    up, down, xor and an index, in a loop (a lane may come back before another read it)."""
    body = """\tmov.u32 \t%r42, 0;
$AGAIN:
\tshfl.sync.up.b32 \t%r2|%p1, %r1, 1, 0x1800, 255;
\tshfl.sync.down.b32 \t%r3, %r1, 2, 0x1807, 255;
\tshfl.sync.bfly.b32 \t%r4, %r1, 3, 0x1807, 255;
\tshfl.sync.idx.b32 \t%r5, %r1, %r42, 0x1807, 255;
\tselp.b32 \t%r6, 1, 0, %p1;
\tadd.u32 \t%r20, %r20, %r2;
\tadd.u32 \t%r20, %r20, %r6;
\txor.b32 \t%r21, %r21, %r3;
\tadd.u32 \t%r21, %r21, %r4;
\tadd.u32 \t%r22, %r22, %r5;
\tmul.lo.u32 \t%r1, %r1, 1103515245;
\tadd.u32 \t%r42, %r42, 1;
\tsetp.lt.u32 \t%p5, %r42, 3;
\t@%p5 bra $AGAIN;
"""
    out = _same(STAGGER.format(body=body), block, n_out=192, warps=warps)
    assert out[1] != 0 and out[64 + 1] != 0


def test_a_partial_shuffle_reading_an_unnamed_lane_raises_in_both():
    body = "\tshfl.sync.idx.b32 \t%r20, %r1, 9, 31, 255;\n"     # lane 9 is not in the mask
    k = _kernel(STAGGER.format(body=body))
    with pytest.raises(ExecutionError):
        launch(k, 1, 32, [np.zeros(192, np.uint32)])
    with pytest.raises(OutOfBounds):
        launch(lower(k, one_warp=True), 1, 32, [np.zeros(192, np.uint32)])


def test_activemask_after_a_divergent_loop_of_machine_forms():
    """Lanes leave a loop after lane-dependent turns (its body and exit lower to the same
    instructions, no branch of the lowering's own): the groups that reach each activemask are
    the original's, turn by turn, inside the loop and after it."""
    body = """\tand.b32 \t%r2, %r100, 7;
\tmov.u32 \t%r3, 0;
\tmov.u32 \t%r5, 0;
$LOOP:
\tactivemask.b32 \t%r4;
\txor.b32 \t%r5, %r5, %r4;
\tadd.u32 \t%r3, %r3, 1;
\tsetp.le.u32 \t%p1, %r3, %r2;
\t@%p1 bra $LOOP;
\tactivemask.b32 \t%r6;
\tst.global.u32 \t[%rd9], %r5;
\tst.global.u32 \t[%rd9+128], %r6;
"""
    out = _same(body, 32, n_out=64)
    assert len(set(out[:32])) > 1
