"""The cursor scheduling rule and warp-synchronous waits: forward progress, reconvergence, and
deadlocks reported instead of hangs (machine.py, "Scheduling inside a warp")."""
import numpy as np
import pytest

from gpu_layers.cases import compile_cached
from gpu_layers.errors import ExecutionError, StepBudgetExceeded
from gpu_layers.interp.machine import launch
from gpu_layers.interp.snippets import kernel_ptx, run_ptx
from gpu_layers.ptx.parser import parse_ptx
from gpu_layers.suite import SUITE_DIR

LANES = (1, 2, 4, 8, 32)
LOCKS = SUITE_DIR / "spin_locks.cu"
OUT = """\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r100, %tid.x;
\tmul.wide.u32 \t%rd2, %r100, 4;
\tadd.s64 \t%rd9, %rd1, %rd2;
"""


@pytest.fixture(scope="module")
def locks():
    return parse_ptx(compile_cached(LOCKS.read_text()))


def run_all_lanes(kernel, grid, block, make_args):
    """Run with every lane count; results and trace must not depend on it. Returns the buffers."""
    results = [launch(kernel, grid, block, make_args(), lanes=n) for n in LANES]
    first = results[0]
    for r in results[1:]:
        assert r.fingerprint == first.fingerprint and r.steps == first.steps
        for a, b in zip(r.buffers, first.buffers):
            assert (a is None and b is None) or a.tobytes() == b.tobytes()
    issues = [r.lane_issues for r in results]
    assert issues == sorted(issues, reverse=True) and issues[-1] == first.steps
    return first.buffers


@pytest.mark.parametrize("name", ["spin_lock_cas", "spin_lock_outside"])
@pytest.mark.parametrize("block", [1, 32, 48, 96])
def test_spin_lock_inside_a_warp_terminates(locks, name, block):
    bufs = run_all_lanes(locks.kernel(name), 1, block, lambda: [
        np.zeros(2, np.int32), np.zeros(2, np.int32), np.zeros(128, np.int32), block])
    total, seen = bufs[1], bufs[2]
    assert total.tolist() == [sum(3 * t + 1 for t in range(block)), block]
    assert seen.tolist() == [1] * block + [0] * (128 - block)     # each count seen exactly once


@pytest.mark.parametrize("block", [32, 64, 96])
def test_ticket_lock_serves_every_ticket_in_order(locks, block):
    bufs = run_all_lanes(locks.kernel("ticket_lock"), 1, block, lambda: [
        np.zeros(2, np.uint32), np.zeros(2, np.int32), np.zeros(128, np.int32), block])
    assert bufs[0].tolist() == [block, block]
    assert bufs[1].tolist() == [sum(5 * t + 2 for t in range(block)), block]
    assert bufs[2].tolist() == list(range(1, block + 1)) + [0] * (128 - block)


def test_flag_hand_off_chain_between_warps(locks):
    data = np.arange(1, 5, dtype=np.int32)
    bufs = run_all_lanes(locks.kernel("flag_chain"), 1, 128, lambda: [data.copy(),
                                                                      np.zeros(128, np.int32)])
    val, v = [], 0
    for w in range(4):
        v = v * 3 + int(data[w])
        val.append(v)
    assert bufs[1].tolist() == [val[t // 32] + t % 32 for t in range(128)]


def test_lane_waiting_for_a_later_lane_makes_progress():
    # lane 0 spins until lane 31 (which runs further down the program) sets a shared flag
    decls = "\t.shared .align 4 .b8 flag[4];\n"
    body = """\tmov.u32 \t%r1, flag;
\tst.shared.u32 \t[%r1], 0;
\tbar.sync \t0;
\tsetp.ne.u32 \t%p1, %r100, 0;
\t@%p1 bra \tL_other;
L_spin:
\tld.volatile.shared.u32 \t%r2, [%r1];
\tsetp.eq.u32 \t%p2, %r2, 0;
\t@%p2 bra \tL_spin;
\tst.global.u32 \t[%rd9], %r2;
\tbra.uni \tL_end;
L_other:
\tsetp.ne.u32 \t%p3, %r100, 31;
\t@%p3 bra \tL_end;
\tst.volatile.shared.u32 \t[%r1], 77;
L_end:
"""
    res = run_ptx(kernel_ptx(OUT + body + "\tret;\n", decls=decls), 1, 32, [np.zeros(32, np.uint32)])
    assert res.buffers[0][0] == 77


def test_baton_through_every_lane_and_the_progress_bound():
    # lane l spins until the shared baton equals l, then passes it on (min-PC would starve the
    # holder, which runs at a higher PC than the spinners). Every runnable group of the warp is
    # picked within two sweeps of the program (2 * number of instructions steps).
    decls = "\t.shared .align 4 .b8 baton[4];\n"
    body = """\tmov.u32 \t%r1, baton;
\tst.shared.u32 \t[%r1], 0;
L_spin:
\tld.volatile.shared.u32 \t%r2, [%r1];
\tsetp.ne.u32 \t%p1, %r2, %r100;
\t@%p1 bra \tL_spin;
\tadd.s32 \t%r3, %r2, 1;
\tst.volatile.shared.u32 \t[%r1], %r3;
\tst.global.u32 \t[%rd9], %r3;
"""
    ptx = kernel_ptx(OUT + body + "\tret;\n", decls=decls)
    res = run_ptx(ptx, 1, 32, [np.zeros(32, np.uint32)], trace=True)
    assert res.buffers[0].tolist() == list(range(1, 33))
    prog_len = len(parse_ptx(ptx).kernel().instructions)
    last = {}
    live = set(range(32))
    for i, (_, _, pc, m) in enumerate(res.trace):
        for l in range(32):
            if m >> l & 1:
                last[l] = i
        if pc == prog_len - 1:                      # ret: those lanes are done
            live -= {l for l in range(32) if m >> l & 1}
        for l in live:
            assert i - last.get(l, 0) <= 2 * prog_len, (l, i)


def test_ballot_under_divergence_waits_for_every_named_thread():
    # odd lanes loop a while before the same ballot: the ballot sees all 32 predicates
    body = """\tand.b32 \t%r1, %r100, 1;
\tsetp.eq.u32 \t%p1, %r1, 0;
\t@%p1 bra \tL_vote;
\tmov.u32 \t%r2, 0;
L_loop:
\tadd.s32 \t%r2, %r2, 1;
\tsetp.lt.u32 \t%p2, %r2, %r100;
\t@%p2 bra \tL_loop;
L_vote:
\tsetp.lt.u32 \t%p3, %r100, 20;
\tvote.sync.ballot.b32 \t%r3, %p3, -1;
\tst.global.u32 \t[%rd9], %r3;
"""
    out = run_ptx(kernel_ptx(OUT + body + "\tret;\n"), 1, 32, [np.zeros(32, np.uint32)]).buffers[0]
    assert out.tolist() == [(1 << 20) - 1] * 32


def test_syncwarp_at_different_instructions_meets():
    # __syncwarp in both arms of an if/else: bar.warp.sync meets at any bar.warp.sync
    body = """\tand.b32 \t%r1, %r100, 1;
\tsetp.eq.u32 \t%p1, %r1, 0;
\t@%p1 bra \tL_even;
\tbar.warp.sync \t-1;
\tmov.u32 \t%r3, 100;
\tbra.uni \tL_join;
L_even:
\tbar.warp.sync \t-1;
\tmov.u32 \t%r3, 200;
L_join:
\tst.global.u32 \t[%rd9], %r3;
"""
    out = run_ptx(kernel_ptx(OUT + body + "\tret;\n"), 1, 32, [np.zeros(32, np.uint32)]).buffers[0]
    assert out.tolist() == [200 if t % 2 == 0 else 100 for t in range(32)]


def test_shuffles_at_different_instructions_deadlock_with_a_clear_error():
    body = """\tand.b32 \t%r1, %r100, 1;
\tsetp.eq.u32 \t%p1, %r1, 0;
\t@%p1 bra \tL_even;
\tshfl.sync.bfly.b32 \t%r3, %r100, 1, 31, -1;
\tbra.uni \tL_join;
L_even:
\tshfl.sync.bfly.b32 \t%r3, %r100, 2, 31, -1;
L_join:
\tst.global.u32 \t[%rd9], %r3;
"""
    with pytest.raises(ExecutionError, match=r"deadlocked.*shfl.sync.bfly.*never arrive"):
        run_ptx(kernel_ptx(OUT + body + "\tret;\n"), 1, 32, [np.zeros(32, np.uint32)])


def test_block_waiting_for_a_later_block_ends_at_the_step_budget():
    # blocks run one after another: block 0 waiting for block 1's flag never finishes
    src = """extern "C" __global__ void wait_next(volatile int* flag) {
        if (blockIdx.x == 0) { while (flag[1] == 0) { } } else { flag[1] = 1; }
    }"""
    k = parse_ptx(compile_cached(src)).kernel("wait_next")
    with pytest.raises(StepBudgetExceeded, match="10000"):
        launch(k, 2, 1, [np.zeros(2, np.int32)], step_budget=10_000)
