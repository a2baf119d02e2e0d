"""The machine core (gpu_layers.machine.core): control unit, register file, ALU and the memory
unit v0 in one circuit. It schedules for Qwen3.5-2B's per-layer shapes; its vocabulary carries
the whole prompt, trace and dump of real nvcc kernels (lowered, register-allocated); and, compiled
layer by layer into the fast executor (the dense model does not fit this machine's memory), it runs
a kernel inside the model: it generates every token of the trace and the dump itself, and the
output buffers decoded from its tokens equal the reference interpreter's bit for bit."""
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from gpu_layers.cases import load_cases
from gpu_layers.craft.assemble import Shapes, schedule
from gpu_layers.craft.testing import TINY
from gpu_layers.errors import QwenGPUError
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG
from gpu_layers.interp import launch, launch_args, module_for
from gpu_layers.machine import lower
from gpu_layers.machine import memory_map as MM
from gpu_layers.machine.core import (CoreError, check_core, core_circuit, launch_tokens, machine_kernel, prompt_tokens,
                                     run_core)
from gpu_layers.machine.datapath_program import datapath_program, register_slots
from gpu_layers.machine.regalloc import allocate
from gpu_layers.suite import load_suite

REAL_2B = {k: REAL_2B_TEXT_CONFIG[k] for k in TINY}
TRUTH = Path(__file__).resolve().parents[2] / "shared" / "gpu-truth" / "cases.json"


@pytest.fixture(scope="module")
def circuit():
    return core_circuit()


def _case(name):
    cases = {c.name: c for c in load_suite()}
    if TRUTH.is_file():
        cases.update({c.name: c for c in load_cases(TRUTH)})
    c = cases[name]
    mk, _ = allocate(lower(module_for(c.ptx()).kernel(c.kernel)))
    args = launch_args(c)
    return c, mk, args


def _reference(c):
    """The original kernel on the reference interpreter (the default memory layout)."""
    args = launch_args(c)
    return launch(module_for(c.ptx()).kernel(c.kernel), c.grid, c.block, args, c.dynamic_shared_bytes)


def _outputs(c):
    return [i for i, a in enumerate(c.args) if a.is_buffer and a.output]


def test_schedules_for_qwen35_2b(circuit):
    s = Shapes.of(REAL_2B)            # (the validator's exactness pass takes minutes: compile runs it)
    plans, _ = schedule(circuit, s)
    from webapp.render import CORE_LAYERS     # the app's layer map says the same
    assert len(plans) == CORE_LAYERS == 24
    for pl in plans:
        assert pl.neurons() <= s.intermediate_size
        assert pl.groups(s) <= s.linear_num_key_heads


def test_fp32_error_bound_of_every_step_stays_in_budget():
    """Stock transformers sums in fp32: no step of the core moves by more than STOCK_FP32_BUDGET
    margins of craft/precision.py's bound (every input's largest measured error, all the same
    way, and the norm's); a guard against circuits that widen it (section 37)."""
    from gpu_layers.craft.precision import STOCK_FP32_BUDGET, step_margins
    from gpu_layers.craft.recycle import recycle
    c = core_circuit()
    s = Shapes.of(REAL_2B)
    plans, pos = schedule(c, s)
    recycle(c, plans, pos, s.intermediate_size)
    bounds = step_margins(c, pos)
    worst = max(bounds, key=lambda b: b.total)
    assert worst.total <= STOCK_FP32_BUDGET, worst
    assert len(bounds) > 10_000 and worst.total > 0.5       # it measures the real core


@pytest.mark.parametrize("name", ["divergence", "vec_add_i32", "early_return", "scan_inclusive_i32",
                                  "shared_reverse", "add128"])
def test_vocabulary_carries_prompt_stream_and_dump(circuit, name):
    """The oracle's whole sequence is in the vocabulary; a memory group has one tick per executed
    lane after its first; the dump alone decodes to the original kernel's outputs."""
    c, mk, args = _case(name)
    vocab = {n for n, _ in circuit.tokens}
    prompt, stream, lay, tr = launch_tokens(mk, c.grid, c.block, args, _outputs(c), c.dynamic_shared_bytes)
    missing = sorted({t for t in prompt + stream if t not in vocab})
    assert not missing, missing[:10]
    assert stream[0] == "<blk 0>" and stream[-1] == "<end>" and "<halt>" in stream
    mem_pcs = set(MM.memory_ops(mk))
    want_ticks, pc = 0, None
    for t in stream:
        if t.startswith("<wi "):
            pc = int(t.split()[2])
        if t.startswith("<g ") and pc in mem_pcs:
            want_ticks += max(0, sum(int(x) >= 2 for x in t[1:-1].split()[2:6]) - 1)
    assert sum(t.startswith("<mt ") for t in stream) == want_ticks
    ref = _reference(c)
    dec = MM.decode_dump(stream, lay, {i: args[i] for i in _outputs(c)})
    for i in _outputs(c):
        assert dec[i].tobytes() == ref.buffers[i].tobytes()


def test_refuses_what_it_lacks_by_name():
    c, mk, args = _case("flag_chain")                  # 256 threads: eight warps
    with pytest.raises(CoreError, match="256 threads per block: the machine core v0 runs up to 128"):
        prompt_tokens(mk, c.grid, (256, 1, 1), args, _outputs(c))
    c, mk, args = _case("exch_claim")
    with pytest.raises(MM.MemoryMapError, match="atomics"):
        prompt_tokens(mk, c.grid, c.block, args, _outputs(c))
    c, mk, args = _case("crc32_bytes")
    with pytest.raises(MM.MemoryMapError, match="sub-word"):
        prompt_tokens(mk, c.grid, c.block, args, _outputs(c))
    # a register-writing form the ALU does not compute is refused by name, never run wrongly
    from gpu_layers.interp.snippets import kernel_ptx
    from gpu_layers.ptx.parser import parse_ptx
    k = parse_ptx(kernel_ptx("\tmov.u32 \t%r1, %tid.x;\n\tcvt.sat.u8.s32 \t%rs1, %r1;\n\tret;\n")).kernel()
    mk, _ = allocate(lower(k))
    with pytest.raises(CoreError, match=r"line \d+: `cvt.sat.u8.s32 .*does not compute it"):
        prompt_tokens(mk, (1, 1, 1), (4, 1, 1), [np.zeros(1, np.int32)], [0])
    # the special registers are operand a only (the vocabulary has no <ps .. tid>)
    k = parse_ptx(kernel_ptx("\tmov.u32 \t%r1, 3;\n\tadd.u32 \t%r2, %r1, %tid.x;\n\tret;\n")).kernel()
    mk, _ = allocate(lower(k))
    with pytest.raises(CoreError, match=r"reads tid as its second operand"):
        prompt_tokens(mk, (1, 1, 1), (4, 1, 1), [np.zeros(1, np.int32)], [0])


# ---- compiled, through the fast executor (compile_fast: layer by layer) ---------------------------

@pytest.fixture(scope="module")
def core():
    from gpu_layers.machine.core import build_core_fast
    torch.set_num_threads(1)
    # the validator's exactness pass (minutes on this circuit) runs in scripts/machine_core.py
    return build_core_fast(REAL_2B, check=False)


@pytest.mark.parametrize("name", ["scan_inclusive_i32", "reduce_sum_i32"])
def test_core_runs_a_kernel_inside_the_model(core, name):
    """From the prompt on, every token is the model's own greedy choice over the whole vocabulary:
    the trace (control, ALU and load values, ticks) and the dump equal the oracle's token for
    token, and the outputs decoded from the generated tokens alone equal the original kernel's
    on the reference interpreter. scan_inclusive_i32: global and shared memory, barriers, two
    blocks (shared memory starts unwritten in each); reduce_sum_i32: the same with two warps per
    block (the round robin's <w W H G>, barriers across warps). Both have groups that copy the
    previous group's values (S = 2)."""
    _runs_exactly(core, name, lambda c, want: sum(t.startswith("<g ") and t.endswith(" 2>") for t in want) > 40)


def _runs_exactly(core, name, stream_ok):
    """Case `name` inside the model: every generated token equals the oracle's (whose stream
    first passes stream_ok(case, stream)), and the outputs decoded from them equal the
    reference interpreter's."""
    fm, ids = core
    c, mk, args = _case(name)
    prompt, want, lay, _ = launch_tokens(mk, c.grid, c.block, args, _outputs(c), c.dynamic_shared_bytes)
    assert stream_ok(c, want)
    got, bad = run_core(fm, ids, prompt, want)
    assert bad is None and got == want
    dec = MM.decode_dump(got, lay, {i: args[i] for i in _outputs(c)})
    ref = _reference(c)
    for i in _outputs(c):
        assert dec[i].tobytes() == ref.buffers[i].tobytes()


def test_core_runs_a_block_of_four_warps(core):
    """flag_chain: 128 threads, four warps taking turns by the round robin (`<w W H G>` names warps
    0-3); each thread waits for the flag its predecessor sets, so the chain crosses every warp
    boundary and only fair turns finish it. The model generates the trace and the dump; the
    outputs equal the original kernel's."""
    _runs_exactly(core, "flag_chain", lambda c, want: c.block[0] == 128
                  and {t.split()[1] for t in want if t.startswith("<w ")} == {"0", "1", "2", "3"})


def test_core_runs_atomics_that_hold_the_turn_in_a_block_of_two_warps(core):
    """48 threads claim list slots with atomic adds (tests/test_word_memory.claim_kernel): two
    warps, each atomic 32 turns (one per lane of the warp) written out, holding the turn (`<pc
    hold>`: the control unit names the same warp again in `<w W H G>`). The model generates the
    trace and the dump; the lists come out in the original kernel's order."""
    from gpu_layers.machine.core import machine_kernel
    from tests.test_word_memory import claim_kernel

    fm, ids = core
    k = claim_kernel()
    args = [np.zeros(48, np.uint32), np.zeros(2, np.uint32)]
    mk, grid, block = machine_kernel(k, (1, 1, 1), (48, 1, 1), args)
    prompt, want, lay, _ = launch_tokens(mk, grid, block, args, [0, 1])
    assert prompt.count("<pc hold>") > 100
    got, bad = run_core(fm, ids, prompt, want)
    assert bad is None and got == want
    dec = MM.decode_dump(got, lay, {0: args[0], 1: args[1]})
    ref = launch(k, (1, 1, 1), (48, 1, 1), [a.copy() for a in args])
    assert dec[0].tobytes() == ref.buffers[0].tobytes() and dec[1].tolist() == [24, 24]


def test_core_runs_warp_exchanges_in_a_block_of_two_warps(core):
    """40 threads (a full warp and 8 lanes) shuffle three times and vote once after a divergent
    loop (lanes arrive apart; one lane of the second warp exits instead of coming, which releases
    the others): each exchange waits at the machine's warp barrier (`<pc wbar>`; its releases flip
    the warp's G in `<w W H G>`). The model generates the trace and the dump; the outputs equal
    the original kernel's."""
    from gpu_layers.machine.core import machine_kernel
    from gpu_layers.nvcc import compile_cuda
    from tests.test_machine_control import WSYNC

    fm, ids = core
    k = module_for(compile_cuda(WSYNC)).kernel("wsync")
    args = [((np.arange(40) * 7919) % 23).astype(np.int32), np.zeros(64, dtype=np.int32)]
    mk, grid, block = machine_kernel(k, (1, 1, 1), (40, 1, 1), args)
    prompt, want, lay, _ = launch_tokens(mk, grid, block, args, [1])
    assert prompt.count("<pc wbar>") == 4 and {t for t in want if t.startswith("<w ")} >= {"<w 1 0 1>"}
    got, bad = run_core(fm, ids, prompt, want)
    assert bad is None and got == want
    dec = MM.decode_dump(got, lay, {1: args[1]})
    ref = launch(k, (1, 1, 1), (40, 1, 1), [a.copy() for a in args])
    assert dec[1].tobytes() == ref.buffers[1].tobytes()


def _register_snapshots(c, mk, args, lay, slots):
    """The interpreter's registers {(thread, machine register): value or None} after every step of
    the machine code, with the buffers where the memory map puts them (pointers are values too)."""
    from gpu_layers.interp.machine import program_for

    from gpu_layers.machine.core import THREADS

    cols = {n: program_for(mk).colnames.index(n) for n in slots}
    nt = c.block[0] * c.block[1] * c.block[2]
    snaps = []
    last, blk = {}, [None]         # every warp's registers as of its last step in this block

    def observe(W, ins, pc, active, done):
        if W.block_idx != blk[0]:
            last.clear()
            blk[0] = W.block_idx
        last[W.index] = {(32 * W.index + t, n): (W.R[col][t] if 32 * W.index + t < nt else None)
                         for n, col in cols.items() for t in range(32)}
        snaps.append({(t, n): last.get(t // 32, {}).get((t, n)) for n in cols for t in range(THREADS)})
    launch(mk, c.grid, c.block, launch_args(c), c.dynamic_shared_bytes, buffer_offsets=lay.offsets,
           observer=observe)
    return snaps


@pytest.mark.parametrize("name", ["min_index", "lane_divergence"])
def test_core_runs_whole_warps_and_its_state_holds_the_interpreters_registers(core, name):
    """min_index: one warp of 32 threads (8 lane groups, the register file in two banks of heads
    per lane), poison (an undefined predicate or-ed with a true one is defined); lane_divergence:
    two warps of 32 (banks 2 W + K // 4, the warp kept with each group until its commit at the
    next issue's <wi>); both have groups that copy the previous group's values (S = 2: the commit
    reads the last group that sent them) and fills (small negative values in one <d>); min_index has
    lane copies (<d J 7 I>: the commit takes lane I's value). At every position the model's greedy
    token is the oracle's; after every
    <wi>, the register file read out of the model's DeltaNet state (inspect_state.core_registers)
    equals the interpreter's registers after the previous step for every thread; every unwritten
    or poisoned slot holds exact zeros (a blank write of rails read a little off 0/1 left -2e-5,
    which the read's RMSNorm blew up into a wrong undefined lane in min_index); the outputs decode
    from the tokens."""
    from gpu_layers.machine.inspect_state import blank_rails, core_registers
    from gpu_layers.machine.regfile import program_of

    fm, ids = core
    inv = {i: n for n, i in ids.items()}
    c, mk, args = _case(name)
    prompt, want, lay, _ = launch_tokens(mk, c.grid, c.block, args, _outputs(c), c.dynamic_shared_bytes)
    assert sum(t.startswith("<g ") and t.endswith(" 2>") for t in want) > 100
    # fills (<d J 6 X>: -256 .. -1 as 32 bits, one token for three chunks)
    assert sum(t.startswith("<d ") and t.split()[2] == "6" for t in want) >= {"min_index": 40}.get(name, 1)
    # lane copies (<d J 7 I>: lane J's operands, so its value, are lane I's; 232 in min_index)
    assert sum(t.startswith("<d ") and t.split()[2] == "7" for t in want) >= {"min_index": 200}.get(name, 0)
    slots = program_of(mk).slots
    snaps = _register_snapshots(c, mk, args, lay, slots)
    empty = {k: None for k in snaps[0]}
    st = fm.new_state()
    for t in prompt:
        nxt = fm.step(st, ids[t])
    step, fresh, checked, blanks, threads = -1, True, 0, 0, set()
    for p, t in enumerate(want):
        assert inv[nxt] == t, (p, t, inv[nxt])
        nxt = fm.step(st, ids[t])
        if t.startswith("<blk"):
            fresh = True
        elif t.startswith("<wi"):
            exp = empty if fresh else snaps[step]
            step, fresh = step + 1, False
            got = core_registers(st, slots)
            assert got == exp, (p, {k: (got[k], v) for k, v in exp.items() if got[k] != v})
            checked += 1
            threads |= {th for (th, _), v in got.items() if v is not None}
            if step % 8 == 0:
                n, worst = blank_rails(st)
                assert worst == 0.0, (p, worst)
                blanks += n
    assert step + 1 == len(snaps) and checked > 400 and blanks > 0 and threads == set(range(c.block[0]))
    dec = MM.decode_dump(want, lay, {i: args[i] for i in _outputs(c)})
    ref = _reference(c)
    for i in _outputs(c):
        assert dec[i].tobytes() == ref.buffers[i].tobytes()


def test_its_state_holds_the_interpreters_memory_after_every_step(core):
    """scan_inclusive_i32 (two blocks of 16 threads, global and shared stores, barriers): after
    every step of the model's own run, every global and shared word read out of the memory unit's
    heads (inspect_state.core_memory) equals the oracle's memory after the same step (shared memory
    starts unwritten in each block; a global word of 0 is never sent, so it reads None)."""
    from gpu_layers.machine.inspect_state import core_memory

    fm, ids = core
    c, mk, args = _case("scan_inclusive_i32")
    prompt, want, lay, _ = launch_tokens(mk, c.grid, c.block, args, _outputs(c), c.dynamic_shared_bytes)
    where = dict(lay.offsets)         # machine byte address of each buffer's first byte
    snaps = []

    def observe(W, ins, pc, active, done):
        glob = {}
        for k, (i, off) in enumerate(sorted(where.items())):
            reg = W.glob.regions[k]
            for x in range(0, reg.size, 4):
                v = int.from_bytes(reg.data[x:x + 4], "little")
                glob[off + x] = v or None
        sh = W.shared
        shared = {x: (int.from_bytes(sh.data[x:x + 4], "little") if any(sh.init[x:x + 4]) else None)
                  for x in range(0, sh.size - sh.size % 4, 4)}
        snaps.append((glob, shared))
    launch(mk, c.grid, c.block, launch_args(c), c.dynamic_shared_bytes, buffer_offsets=lay.offsets,
           observer=observe)
    st = fm.new_state()
    for t in prompt:
        fm.step(st, ids[t])
    step, checked, fresh = -1, 0, False
    for t in want:
        if t.startswith("<blk"):
            fresh = step >= 0         # shared memory is reset at <blk>: the next check is global only
        if t.startswith("<wi") and step >= 0:
            glob, shared = snaps[step]
            gm, sm = core_memory(st, "global"), core_memory(st, "shared")
            assert {x: gm[x] for x in glob} == glob, step
            assert all(gm[x] is None for x in gm if x not in glob)
            if not fresh:
                got = {x: sm[x] for x in shared}
                assert got == shared, (step, {x: (got[x], v) for x, v in shared.items() if got[x] != v})
            else:                     # a new block: nothing written yet
                assert all(v is None for v in sm.values())
            checked, fresh = checked + 1, False
        if t.startswith("<wi"):
            step += 1
        fm.step(st, ids[t])
    assert checked == len(snaps) - 1 and any(v is not None for v in snaps[-1][1].values())


def test_core_runs_a_program_past_512_machine_instructions(core):
    """local_sort (a per-lane local array sorted in shared-memory frames: 627 machine
    instructions, the code past PC 512 runs), one block of 4 threads: the model generates the
    trace and the dump; every program memory reads its fifth bank; the outputs equal the original
    kernel's on the interpreter."""
    fm, ids = core
    c, _, args = _case("local_sort")
    grid, block = (1, 1, 1), (4, 1, 1)
    mk, grid, block = machine_kernel(module_for(c.ptx()).kernel(c.kernel), grid, block, args)
    assert len(mk.instructions) > 600
    prompt, want, lay, _ = launch_tokens(mk, grid, block, args, _outputs(c), c.dynamic_shared_bytes)
    assert any(t.startswith("<wi ") and int(t.split()[2]) >= 512 for t in want)
    got, bad = run_core(fm, ids, prompt, want)
    assert bad is None and got == want
    dec = MM.decode_dump(got, lay, {i: args[i] for i in _outputs(c)})
    ref = launch(module_for(c.ptx()).kernel(c.kernel), grid, block, launch_args(c), c.dynamic_shared_bytes)
    for i in _outputs(c):
        assert dec[i].tobytes() == ref.buffers[i].tobytes()


def test_core_faults_on_an_access_outside_the_buffers(core):
    """Lane 1 stores past its buffer (tests/test_memory_map.py's `over` kernel): the model itself
    serves lane 0, ticks to lane 1 and emits <fault> there; the run ends without a dump."""
    from test_memory_map import OVER

    fm, ids = core
    mk, _ = allocate(lower(module_for(OVER).kernel("over")))
    args = [np.zeros(4, np.uint32), np.arange(8, dtype=np.uint32)]
    prompt, want, _, _ = launch_tokens(mk, (1, 1, 1), (4, 1, 1), args, [0])
    got, bad = run_core(fm, ids, prompt, want)
    assert bad is None and got == want and got[-2:] == ["<mt 1>", "<fault>"]


def test_a_failed_check_of_the_lowering_is_reported_by_what_it_means(core):
    """A shuffle whose membermask, computed at run time, names 16 lanes in a block of two warps
    (a constant partial mask is partial_exchange's rendezvous, which runs it): the lowering's
    check (a load from address 0 where it fails) makes the model emit <fault>, and the backend
    names the check (Kernel.checks) instead of an access outside the buffers."""
    from gpu_layers.errors import ExecutionError
    from gpu_layers.interp.snippets import kernel_ptx
    from gpu_layers.machine.backend import run_kernel_model
    from gpu_layers.ptx.parser import parse_ptx

    body = ("\tld.param.u64 \t%rd1, [out];\n\tcvta.to.global.u64 \t%rd1, %rd1;\n\tmov.u32 \t%r1, %tid.x;\n"
            "\tmul.wide.u32 \t%rd2, %r1, 4;\n\tadd.s64 \t%rd3, %rd1, %rd2;\n"
            "\txor.b32 \t%r99, %r1, %r1;\n\tor.b32 \t%r99, %r99, 65535;\n"
            "\tsetp.ge.u32 \t%p1, %r1, 16;\n\tsetp.lt.u32 \t%p2, %r1, 32;\n\tand.pred \t%p1, %p1, %p2;\n"
            "\t@%p1 ret;\n\tshfl.sync.bfly.b32 \t%r2, %r1, 1, 31, %r99;\n\tst.global.u32 \t[%rd3], %r2;\n\tret;\n")
    k = parse_ptx(kernel_ptx(body)).kernel()
    args = [np.zeros(48, np.uint32)]
    launch(k, (1, 1, 1), (48, 1, 1), [a.copy() for a in args])          # the original runs it
    with pytest.raises(ExecutionError, match="its membermask does not name every thread of the warp"):
        run_kernel_model(k, (1, 1, 1), (48, 1, 1), args, [0], core=core)


def test_core_loads_undefined_shared_words(core):
    """Shared words never written load as undefined lanes (a blank word in the latch): the model
    predicts the load's <g> with U = 1110 itself (tests/test_memory_map.py's `unw` kernel)."""
    from test_memory_map import UNW

    fm, ids = core
    mk, _ = allocate(lower(module_for(UNW).kernel("unw")))
    prompt, want, _, _ = launch_tokens(mk, (1, 1, 1), (4, 1, 1), [], [])
    got, bad = run_core(fm, ids, prompt, want)
    assert bad is None and got == want and "<g 0 2 2 2 2 1110 0>" in got


@pytest.fixture()
def cached_core(core, tmp_path, monkeypatch):
    """The compiled core in a fresh cache directory, as `run --backend model` finds it."""
    from gpu_layers.machine import backend

    monkeypatch.setenv("QWENGPU_CACHE", str(tmp_path))
    backend.cache_dir().mkdir(parents=True)
    with open(backend.cache_dir() / f"core-{backend.core_key()}.pkl", "wb") as f:
        pickle.dump(core, f, protocol=pickle.HIGHEST_PROTOCOL)
    return tmp_path


def test_the_core_cache_keeps_only_the_current_core(tmp_path, monkeypatch):
    """A compile writes core-<key>.pkl (key: the circuit's sources) and removes the cores of
    earlier sources (300 MB each), which no run loads again; a second load reads the cache."""
    from gpu_layers.machine import backend
    from gpu_layers.machine import core as core_mod

    monkeypatch.setenv("QWENGPU_CACHE", str(tmp_path))
    backend.cache_dir().mkdir(parents=True)
    stale = backend.cache_dir() / "core-0123456789abcdef.pkl"
    stale.write_bytes(b"old")
    calls = []
    monkeypatch.setattr(core_mod, "build_core_fast", lambda config, check=True: calls.append(1) or ("fm", {"<end>": 0}))
    assert backend.load_core() == ("fm", {"<end>": 0}) and calls == [1]
    assert not stale.exists()
    assert [p.name for p in backend.cache_dir().iterdir()] == [f"core-{backend.core_key()}.pkl"]
    assert backend.load_core() == ("fm", {"<end>": 0}) and calls == [1]


def test_run_backend_model_prints_the_interpreters_outputs(cached_core, capsys):
    """`python -m gpu_layers run CASE --backend model`: vec_add_i32 (3 blocks, global loads and
    stores, a bounds check) runs inside the model, loaded from the cache; the printed bits equal
    the interpreter backend's, which equal the real GPU's (tests/test_gpu_truth.py)."""
    from gpu_layers.cli import main

    assert main(["run", str(TRUTH), "--name", "vec_add_i32", "--backend", "model", "--bits"]) == 0
    cap = capsys.readouterr()
    assert main(["run", str(TRUTH), "--name", "vec_add_i32", "--bits"]) == 0
    assert cap.out == capsys.readouterr().out and "machine tokens" in cap.err


def test_run_backend_model_exits_2_on_a_fault(cached_core, tmp_path, capsys):
    from test_memory_map import OVER

    from gpu_layers.cli import main

    case = {"name": "over", "ptx": OVER, "kernel": "over", "grid": [1, 1, 1], "block": [4, 1, 1],
            "args": [{"name": "p", "type": "u32*", "data": [0] * 4, "output": True},
                     {"name": "q", "type": "u32*", "data": list(range(8))}]}
    f = tmp_path / "over.json"
    f.write_text(json.dumps(case))
    assert main(["run", str(f), "--backend", "model"]) == 2
    err = capsys.readouterr().err
    assert "refused a memory access" in err and "lane 1" in err and "st.global" in err


def _core_stream(name):
    c, mk, args = _case(name)
    prompt, stream, _, _ = launch_tokens(mk, c.grid, c.block, args, _outputs(c), c.dynamic_shared_bytes)
    kinds = [op.kind for op in datapath_program(mk, register_slots(mk), c.grid, c.block, args)]
    return prompt + stream, len(prompt), kinds


def test_core_check_catches_a_wrong_loaded_value(core):
    """The check can fail: one <d> of a load altered in the oracle's stream, the model's prediction
    there (the value it read from its own memory) differs from it, at exactly that position."""
    fm, ids = core
    names, n0, kinds = _core_stream("divergence")
    pc, at = None, None
    for p in range(n0, len(names)):
        if names[p].startswith("<wi "):
            pc = int(names[p].split()[2])
        if names[p].startswith("<d ") and kinds[pc] == "load":
            at = p
            break
    _, j, ch, x = names[at][1:-1].split()
    names = names[:at] + [f"<d {j} {ch} {int(x, 16) ^ 1:03x}>"]
    checked, skipped, bad = check_core(fm, ids, names, n0, kinds)
    assert [b[0] for b in bad] == [at - 1] and skipped == 0 and checked == len(names) - n0


def test_compile_fast_equals_compile_circuit():
    """compile_fast (layer by layer into the fast executor) gives the executor compile_circuit's
    dense machine gives: bit-identical logits on a control-unit stream."""
    from gpu_layers.craft.assemble import compile_circuit, compile_fast
    from gpu_layers.craft.fast import FastMachine
    from gpu_layers.machine.control import ControlUnit, control_circuit, control_stream

    torch.set_num_threads(1)
    comp = compile_circuit(control_circuit(16), REAL_2B)
    dense = FastMachine(comp.machine)
    fast, names = compile_fast(control_circuit(16), REAL_2B)
    assert names == comp.machine.token_names
    cu = ControlUnit(comp, {n: i for i, n in enumerate(names)}, 16)
    c, mk, args = _case("divergence")
    toks, _ = control_stream(cu, lower(module_for(c.ptx()).kernel(c.kernel)), c.grid, c.block, args)
    sd, sf = dense.new_state(), fast.new_state()
    for t in cu.encode(toks[:600]):
        a = np.asarray(dense.step(sd, t, logits=True))
        b = np.asarray(fast.step(sf, t, logits=True))
        assert np.array_equal(a, b)


WORD_KERNEL = """\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tld.param.u64 \t%rd3, [inp];
\tcvta.to.global.u64 \t%rd3, %rd3;
\tmov.u32 \t%r1, %tid.y;
\tmov.u32 \t%r2, %ntid.x;
\tmov.u32 \t%r3, %tid.x;
\tmad.lo.u32 \t%r4, %r1, %r2, %r3;
\tmov.u32 \t%r5, %ctaid.y;
\tshl.b32 \t%r6, %r5, 3;
\tadd.u32 \t%r7, %r6, %r4;
\tmul.wide.u32 \t%rd4, %r7, 8;
\tadd.s64 \t%rd5, %rd3, %rd4;
\tld.global.v2.u32 \t{%r8, %r9}, [%rd5];
\tld.global.s8 \t%r10, [%rd5+5];
\tadd.u32 \t%r11, %r8, %r10;
\tcvt.u64.u32 \t%rd6, %r7;
\tadd.s64 \t%rd7, %rd1, %rd6;
\tst.global.u8 \t[%rd7+8], %r11;
\tand.b32 \t%r12, %r7, 1;
\tmul.wide.u32 \t%rd8, %r12, 4;
\tadd.s64 \t%rd9, %rd1, %rd8;
\tatom.global.add.u32 \t%r13, [%rd9], %r9;
\tmul.wide.u32 \t%rd10, %r7, 4;
\tadd.s64 \t%rd11, %rd1, %rd10;
\tst.global.u32 \t[%rd11+32], %r13;
\tmov.u64 \t%SPL, __local_depot0;
\tst.local.u32 \t[%SPL+4], %r8;
\tld.local.u32 \t%r14, [%SPL+4];
\tmov.u32 \t%r15, -1;
\tshfl.sync.down.b32 \t%r16, %r14, 1, 6175, %r15;
\tsetp.gt.u32 \t%p1, %r16, %r14;
\tvote.sync.ballot.b32 \t%r17, %p1, %r15;
\tadd.u32 \t%r18, %r16, %r17;
\tst.global.u32 \t[%rd11+96], %r18;
\tret;
"""


def test_core_runs_bytes_vectors_atomics_local_memory_shuffles_and_a_2d_launch(core):
    """One kernel with what core.machine_kernel lowers into scalar word accesses: a 2-D grid and
    block (flattened), a vector load, a signed byte load, byte stores from every thread into
    shared words, an atomic add eight threads apply to one word (a loop over the lanes), a local
    word (a frame per lane in shared memory), a shuffle and a ballot (a staging array).
    The model generates the trace and the dump; the outputs equal the original kernel's."""
    from gpu_layers.interp.snippets import kernel_ptx
    from gpu_layers.machine.core import machine_kernel
    from gpu_layers.ptx.parser import parse_ptx

    fm, ids = core
    decls = "\t.local .align 8 .b8 \t__local_depot0[8];\n\t.reg .b64 \t%SPL;\n"
    k = parse_ptx(kernel_ptx(WORD_KERNEL, params=(("out", "u64"), ("inp", "u64")), decls=decls)).kernel()
    rng = np.random.default_rng(5)
    args = [np.zeros(40, np.uint32), rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)]
    grid, block = (1, 2, 1), (4, 2, 1)
    mk, fgrid, fblock = machine_kernel(k, grid, block, args)
    assert (fgrid, fblock) == ((2, 1, 1), (8, 1, 1))
    assert not any(i.opcode in ("atom", "shfl", "vote") or i.types[-1:] in (("u8",), ("s8",))
                   or "local" in i.modifiers for i in mk.instructions)
    prompt, want, lay, _ = launch_tokens(mk, fgrid, fblock, args, [0])
    got, bad = run_core(fm, ids, prompt, want)
    assert bad is None and got == want
    dec = MM.decode_dump(got, lay, {0: args[0]})
    ref = launch(k, grid, block, [a.copy() for a in args])
    assert dec[0].tobytes() == ref.buffers[0].tobytes()
    assert ref.buffers[0][:2].tolist() != [0, 0]


FAR = """
.version 7.0
.target sm_75
.address_size 64
.visible .entry far(.param .u64 o, .param .u64 p, .param .u32 k)
{
  .reg .b64 %rd<9>;
  .reg .b32 %r<5>;
  ld.param.u64 %rd1, [o];
  ld.param.u64 %rd2, [p];
  ld.param.u32 %r1, [k];
  cvta.to.global.u64 %rd3, %rd1;
  cvta.to.global.u64 %rd4, %rd2;
  mov.u32 %r2, %tid.x;
  add.s32 %r3, %r1, %r2;
  mul.wide.u32 %rd5, %r3, 4;
  add.s64 %rd6, %rd4, %rd5;
  ld.global.u32 %r4, [%rd6];
  mul.wide.u32 %rd7, %r2, 4;
  add.s64 %rd8, %rd3, %rd7;
  st.global.u32 [%rd8], %r4;
  ret;
}
"""


def test_core_reads_the_top_of_its_16_kb_of_global_memory_and_faults_past_it(core):
    """A 4,088-word input after a 4-word output: lanes read words 4084..4087 (machine words
    4092..4095, global banks 28..31, address bits 12 and 13 set) and the outputs equal the
    interpreter's; read two words further, lanes 2 and 3 leave the buffer and the model emits
    <fault> at lane 2."""
    fm, ids = core
    k = module_for(FAR).kernel("far")
    mk, _ = allocate(lower(k))
    inp = np.zeros(4088, np.uint32)
    inp[-6:] = [0xDEADBEEF, 7, 0x80000001, 12345, 0xFFFFFFFF, 99]
    args = [np.zeros(4, np.uint32), inp, 4084]
    prompt, want, lay, _ = launch_tokens(mk, (1, 1, 1), (4, 1, 1), args, [0])
    assert lay.offsets == {0: 0, 1: 32} and MM.CAPACITY["global"] == 16384
    got, bad = run_core(fm, ids, prompt, want)
    assert bad is None and got == want
    ref = launch(k, 1, 4, [np.zeros(4, np.uint32), inp.copy(), 4084])
    assert MM.decode_dump(got, lay, {0: args[0]})[0].tobytes() == ref.buffers[0].tobytes() == inp[-4:].tobytes()
    prompt, want, _, _ = launch_tokens(mk, (1, 1, 1), (4, 1, 1), [np.zeros(4, np.uint32), inp, 4086], [0])
    got, bad = run_core(fm, ids, prompt, want)
    assert bad is None and got == want and got[-2:] == ["<mt 2>", "<fault>"]


def _long_program(filler: int) -> str:
    """A kernel whose lanes branch over `filler` adds (lanes >= 100 would run them) to a store
    and a mask of %tid.x: the executed code sits past PC `filler`."""
    body = "\n".join("  add.u32 %r2, %r2, %r1;" for _ in range(filler))
    return f""".version 7.0
.target sm_75
.address_size 64
.visible .entry long(.param .u64 o)
{{
  .reg .b64 %rd<5>;
  .reg .b32 %r<5>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [o];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, 5;
  setp.lt.u32 %p1, %r1, 100;
  @%p1 bra SKIP;
{body}
SKIP:
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  xor.b32 %r3, %r1, 1234567;
  st.global.u32 [%rd4], %r3;
  ret;
}}
"""


def test_core_runs_a_program_to_its_last_program_bank_and_refuses_a_longer_one(core):
    """1,850 machine instructions (past the 1,024 PCs the core had; the store at the end sits in
    the fifteenth and last bank of every program memory, PCs 1,792..1,919): the model runs it and
    the outputs equal the interpreter's. A program past 1,920 PCs is refused by name."""
    from gpu_layers.machine.core import PCS
    fm, ids = core
    k = module_for(_long_program(1850)).kernel("long")
    mk, _, _ = machine_kernel(k, (1, 1, 1), (4, 1, 1), [np.zeros(4, np.uint32)])
    assert PCS == 1920 and 1792 < len(mk.instructions) <= PCS
    prompt, want, lay, _ = launch_tokens(mk, (1, 1, 1), (4, 1, 1), [np.zeros(4, np.uint32)], [0])
    assert max(int(t.split()[2]) for t in want if t.startswith("<wi ")) >= 1792
    got, bad = run_core(fm, ids, prompt, want)
    assert bad is None and got == want
    ref = launch(k, 1, 4, [np.zeros(4, np.uint32)])
    assert MM.decode_dump(got, lay, {0: np.zeros(4, np.uint32)})[0].tobytes() == ref.buffers[0].tobytes()
    assert ref.buffers[0].tolist() == [j ^ 1234567 for j in range(4)]
    k = module_for(_long_program(1950)).kernel("long")
    mk, _, _ = machine_kernel(k, (1, 1, 1), (4, 1, 1), [np.zeros(4, np.uint32)])
    with pytest.raises(QwenGPUError, match=r"machine instructions: the register file holds PCs < 1920"):
        prompt_tokens(mk, (1, 1, 1), (4, 1, 1), [np.zeros(4, np.uint32)], [0])
