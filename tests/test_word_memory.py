"""Memory instructions as word accesses for one warp (gpu_layers.machine.word_memory): the lowered
kernel computes what the original computes, bit for bit, faults where it faults, and the machine
core accepts it (it serves only scalar 32/64-bit words)."""
import numpy as np
import pytest

from gpu_layers.errors import ExecutionError, OutOfBounds, UninitializedRead, UnsupportedPTX
from gpu_layers.interp import launch, launch_args, module_for
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import allocate, lower
from gpu_layers.machine.core import launch_tokens, machine_kernel
from gpu_layers.ptx.parser import parse_ptx

HEAD = """\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tld.param.u64 \t%rd3, [inp];
\tcvta.to.global.u64 \t%rd3, %rd3;
\tmov.u32 \t%r100, %tid.x;
\tmul.wide.u32 \t%rd2, %r100, 4;
\tadd.s64 \t%rd9, %rd1, %rd2;
\tadd.s64 \t%rd8, %rd3, %rd2;
\tsetp.lt.u32 \t%p9, %r100, 27;
"""
PARAMS = (("out", "u64"), ("inp", "u64"))
DECLS = "\t.shared .align 8 .b8 sh[256];\n"


def _kernel(body):
    return parse_ptx(kernel_ptx(HEAD + body + "\tret;\n", params=PARAMS, decls=DECLS)).kernel()


def _inputs(n_out=64):
    rng = np.random.default_rng(7)
    return [np.zeros(n_out, np.uint32), rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)]


def _same(body, block=32, n_out=64):
    """Original and lowered kernel on the interpreter: equal buffers; the core accepts the launch."""
    k = _kernel(body)
    mk = lower(k, one_warp=True)
    a = launch(k, 1, block, _inputs(n_out))
    b = launch(mk, 1, block, _inputs(n_out))
    for x, y in zip(a.buffers, b.buffers):
        assert x.tobytes() == y.tobytes()
    ak, _ = allocate(mk)
    launch_tokens(ak, (1, 1, 1), (block, 1, 1), _inputs(n_out), [0])
    return a.buffers[0]


def test_byte_stores_from_every_lane_merge_like_the_interpreter():
    # lanes 0..31 store bytes to out + tid % 11: several lanes per byte (the last wins), several
    # bytes per word (each kept), lanes 27.. guarded off
    body = """\trem.u32 \t%r1, %r100, 11;
\tcvt.u64.u32 \t%rd4, %r1;
\tadd.s64 \t%rd5, %rd1, %rd4;
\tmul.lo.u32 \t%r2, %r100, 37;
\t@%p9 st.global.u8 \t[%rd5+1], %r2;
\tcvt.u16.u32 \t%rs1, %r100;
\t@!%p9 st.global.u16 \t[%rd1+40], %rs1;
"""
    out = _same(body)
    assert out.view(np.uint8)[1:12].tolist() == [(37 * max(t for t in range(27) if t % 11 == j)) & 255
                                                 for j in range(11)]


def test_sub_word_loads_extend_into_every_register_width():
    body = """\tcvt.u64.u32 \t%rd4, %r100;
\tadd.s64 \t%rd5, %rd3, %rd4;
\tld.global.s8 \t%r1, [%rd5+3];
\tld.global.u8 \t%rs1, [%rd5];
\t@%p9 ld.global.s16 \t%rd6, [%rd8+2];
\tld.global.u16 \t%r2, [%rd8+2];
\tcvt.u32.u16 \t%r3, %rs1;
\tadd.u32 \t%r1, %r1, %r3;
\tadd.u32 \t%r1, %r1, %r2;
\tst.global.u32 \t[%rd9], %r1;
\tmul.wide.u32 \t%rd6, %r100, 8;
\tadd.s64 \t%rd7, %rd1, %rd6;
\tst.global.u64 \t[%rd7+128], %rd6;
"""
    _same(body, block=16, n_out=96)


def test_vector_loads_and_stores():
    body = """\tand.b32 \t%r1, %r100, 7;
\tmul.wide.u32 \t%rd4, %r1, 16;
\tadd.s64 \t%rd5, %rd3, %rd4;
\tld.global.v4.u32 \t{%r2, %r3, %r4, %r5}, [%rd5];
\tld.global.v2.f32 \t{%f1, %f2}, [%rd5+8];
\t@%p9 ld.global.v2.u8 \t{%rs1, %rs2}, [%rd5+6];
\tld.global.v4.u8 \t{%rs3, %rs4, %rs5, %rs6}, [%rd5+4];
\tadd.u32 \t%r2, %r2, %r5;
\tmov.b32 \t%r6, %f2;
\tmul.wide.u32 \t%rd6, %r100, 8;
\tadd.s64 \t%rd7, %rd1, %rd6;
\tst.global.v2.u32 \t[%rd7], {%r2, %r6};
\tcvt.u32.u16 \t%r7, %rs2;
\tcvt.u32.u16 \t%r8, %rs6;
\tst.global.v2.u16 \t[%rd9+128], {%rs1, %rs3};
\t@%p9 st.global.v2.u8 \t[%rd7+2], {%rs4, %rs5};
"""
    _same(body, block=16, n_out=96)


def test_misaligned_accesses_fault_as_in_the_interpreter():
    for body in ("\tld.global.u16 \t%rs1, [%rd8+1];\n", "\tst.global.u16 \t[%rd9+3], %rs1;\n",
                 "\tld.global.v4.u32 \t{%r2, %r3, %r4, %r5}, [%rd8+8];\n"):
        k = _kernel("\tmov.u16 \t%rs1, 5;\n" + body)
        for kernel in (k, lower(k, one_warp=True)):
            with pytest.raises(OutOfBounds):
                launch(kernel, 1, 4, _inputs())


@pytest.mark.parametrize("op", ["add.u32", "min.s32", "max.u32", "and.b32", "or.b32", "xor.b32",
                                "exch.b32", "inc.u32", "dec.u32", "add.u64", "min.s64", "max.u64",
                                "exch.b64", "cas.b32", "cas.b64"])
def test_atomics_run_lane_by_lane_like_the_interpreter(op):
    w = 64 if op.endswith("64") else 32
    r = "%rd" if w == 64 else "%r"
    # lanes hit 5 words (several lanes per word), lanes 27.. guarded off; the old values too
    body = f"""\trem.u32 \t%r1, %r100, 5;
\tmul.wide.u32 \t%rd4, %r1, 8;
\tadd.s64 \t%rd5, %rd3, %rd4;
\tmul.lo.u32 \t%r20, %r100, 2654435761;
\tcvt.u64.u32 \t%rd20, %r20;
\tshl.b64 \t%rd21, %rd20, 29;
\txor.b64 \t%rd20, %rd20, %rd21;
\tand.b32 \t%r21, %r100, 3;
\tcvt.u64.u32 \t%rd22, %r21;
"""
    b, c = (f"{r}20", f"{r}22") if w == 64 else ("%r20", "%r21")
    if op.startswith("cas"):
        b, c = c, b
        body += f"\t@%p9 atom.global.{op} \t{r}30, [%rd5], {b}, {c};\n"
    else:
        body += f"\t@%p9 atom.global.{op} \t{r}30, [%rd5], {b};\n"
    body = f"\tmov.b{w} \t{r}30, 7;\n" + body
    body += f"\tmul.wide.u32 \t%rd6, %r100, 8;\n\tadd.s64 \t%rd7, %rd1, %rd6;\n\tst.global.u{w} \t[%rd7], {r}30;\n"
    body += f"\tred.global.add.u{w} \t[%rd3+256], {b};\n"
    k = _kernel(body)
    inp = np.random.default_rng(3).integers(0, 4, 80, dtype=np.uint64).astype(np.uint32)
    if not op.startswith("cas"):            # cas: small words, so some compares succeed
        inp[::2] |= np.uint32(1 << 31)
    args = [np.zeros(64, np.uint32), inp]
    a = launch(k, 1, 32, [x.copy() for x in args])
    mk = lower(k, one_warp=True)
    b = launch(mk, 1, 32, [x.copy() for x in args])
    for x, y in zip(a.buffers, b.buffers):
        assert x.tobytes() == y.tobytes(), op
    launch_tokens(allocate(mk)[0], (1, 1, 1), (32, 1, 1), args, [0, 1])


CLAIM = """\tand.b32 \t%r1, %r100, 1;
\tmul.wide.u32 \t%rd4, %r1, 4;
\tadd.s64 \t%rd5, %rd3, %rd4;
\tatom.global.add.u32 \t%r2, [%rd5], 1;
\tmad.lo.s32 \t%r3, %r1, 24, %r2;
\tmul.wide.u32 \t%rd6, %r3, 4;
\tadd.s64 \t%rd7, %rd1, %rd6;
\tst.global.u32 \t[%rd7], %r100;
"""


def claim_kernel():
    """Each thread claims the next slot of its parity's list (an atomic add's old value) and
    writes its index there: the lists' order is the order of the atomics."""
    return _kernel(CLAIM)


def test_in_a_block_of_two_warps_an_atomic_holds_the_turn():
    """48 threads, two warps taking turns: each atomic is 32 turns (lane i loads, computes and
    stores), which another warp's steps must not split. They are written out (straight-line code:
    the cursor rule runs them through, no other thread of the warp comes between) and in
    Kernel.holds (the same warp takes the next step), so the lists come out in the original's
    order; without the holds the warps' turns interleave and the lists do not."""
    from dataclasses import replace

    from gpu_layers.machine.core import machine_kernel

    k = claim_kernel()
    args = [np.zeros(48, np.uint32), np.zeros(2, np.uint32)]
    mk, grid, block = machine_kernel(k, (1, 1, 1), (48, 1, 1), args)
    assert mk.holds and block == (48, 1, 1)
    a = launch(k, 1, 48, [x.copy() for x in args])
    b = launch(mk, grid, block, [x.copy() for x in args])
    for x, y in zip(a.buffers, b.buffers):
        assert x.tobytes() == y.tobytes()
    assert sorted(a.buffers[0].tolist()) == list(range(48)) and a.buffers[1].tolist() == [24, 24]
    c = launch(replace(mk, holds=frozenset()), grid, block, [x.copy() for x in args])
    assert c.buffers[0].tobytes() != a.buffers[0].tobytes()
    launch_tokens(mk, grid, block, args, [0, 1])


def test_in_a_block_of_two_warps_sequences_that_would_interleave_are_refused_by_name():
    """Sub-word stores and vectors are refused there; a warp exchange runs (it waits at the
    machine's warp barrier)."""
    from gpu_layers.machine.core import CoreError, machine_kernel

    args = [np.zeros(64, np.uint32), np.zeros(64, np.uint32)]
    for body, why in (("\tst.global.u8 \t[%rd9], %rs1;\n", "a sub-word store"),
                      ("\tld.global.v2.u32 \t{%r1, %r2}, [%rd8];\n", "a vector access")):
        with pytest.raises(CoreError, match=f"in a block of 64 threads \\(2 warps\\): {why}"):
            machine_kernel(_kernel(body), (1, 1, 1), (64, 1, 1), args)
    mk, _, _ = machine_kernel(_kernel("\tld.global.u8 \t%rs1, [%rd8];\n"), (1, 1, 1), (64, 1, 1), args)
    assert not mk.holds                      # a sub-word load is one word access
    mk, _, _ = machine_kernel(_kernel("\tshfl.sync.idx.b32 \t%r1, %r100, 0, 31, -1;\n"), (1, 1, 1), (64, 1, 1),
                              args)
    assert len(mk.warp_barriers) == 1        # a warp exchange waits at the machine's warp barrier


def test_an_exchange_with_a_shared_word_nothing_wrote_raises_in_both():
    k = _kernel("\tatom.shared.exch.b32 \t%r1, [sh+8], %r100;\n\tst.global.u32 \t[%rd9], 1;\n")
    for kernel in (k, lower(k, one_warp=True)):
        with pytest.raises(ExecutionError):
            launch(kernel, 1, 4, _inputs())


def test_sub_word_shared_accesses_are_refused_by_name():
    k = _kernel("\tld.shared.u8 \t%rs1, [sh+3];\n")
    with pytest.raises(UnsupportedPTX, match="sub-word .shared access"):
        lower(k, one_warp=True)
    assert lower(k) is not None                 # the general lowering keeps the machine form


def test_without_one_warp_the_lowering_keeps_memory_instructions_whole():
    k = _kernel("\tld.global.u8 \t%rs1, [%rd8];\n\tatom.global.add.u32 \t%r1, [%rd8], 1;\n")
    names = [i.name for i in lower(k).instructions]
    assert "ld.global.u8" in names and "atom.global.add.u32" in names
    names = [i.name for i in lower(k, one_warp=True).instructions]
    assert not any(n.startswith(("atom", "red")) or n.endswith((".u8", ".u16")) for n in names)


@pytest.fixture(scope="module")
def cases():
    from pathlib import Path

    from gpu_layers.cases import load_cases
    from gpu_layers.suite import load_suite
    from tests.conftest import require_gpu_truth
    out = {c.name: c for c in load_suite()}
    out.update({c.name: c for c in load_cases(Path(require_gpu_truth()) / "cases.json")})
    return out


WORD_CASES = ["rolling_hash", "local_sort", "local_table", "rpn_eval", "warp_scan", "warp_compact", "atoi_segments", "crc32_bytes", "small_types", "minmax_clamp",
              "struct_records", "strcmp_pairs", "mat4_transform", "scan_blelloch", "atomic_ops",
              "atomic_wide", "bitwise_atomics", "cas_increment", "exch_claim", "histogram_atomic",
              "ticket_atomics", "atomic_minmax_keys", "shared_histogram"]


def test_suite_kernels_with_bytes_vectors_and_atomics_match_and_the_core_takes_them(cases):
    from gpu_layers.machine.core import core_circuit
    vocab = {n for n, _ in core_circuit().tokens}       # every token the oracle gives is the model's
    for name in WORD_CASES:
        c = cases[name]
        k = module_for(c.ptx()).kernel(c.kernel)
        mk = lower(k, one_warp=True)
        a = launch(k, c.grid, c.block, launch_args(c), c.dynamic_shared_bytes)
        b = launch(mk, c.grid, c.block, launch_args(c), c.dynamic_shared_bytes)
        for x, y in zip(a.buffers, b.buffers):
            assert (x is None and y is None) or x.tobytes() == y.tobytes(), name
        outs = [i for i, arg in enumerate(c.args) if arg.is_buffer and arg.output]
        prompt, want, _, _ = launch_tokens(allocate(mk)[0], c.grid, c.block, launch_args(c), outs,
                                           c.dynamic_shared_bytes)
        assert set(prompt + want) <= vocab, (name, sorted(set(prompt + want) - vocab)[:3])



def test_rc4_keystream_fits_the_program_memory_by_calling_its_byte_accesses(cases):
    # a 256-byte local array, byte loads and stores in unrolled loops: 4,685 machine instructions
    # with every sequence written out, so the core's lowering calls them (call_sequences: one
    # routine per kind of byte access and per division form); outputs equal to the original's,
    # every token the oracle gives in the core's vocabulary
    from gpu_layers.machine.core import PCS, core_circuit
    c = cases["rc4_keystream"]
    k = module_for(c.ptx()).kernel(c.kernel)
    mk, grid, block = machine_kernel(k, c.grid, c.block, launch_args(c))
    entries = {entry for _, entry, _ in mk.calls}
    assert len(mk.instructions) <= PCS and len(mk.calls) >= 104 + 8 and len(entries) == 3
    a = launch(k, c.grid, c.block, launch_args(c))
    b = launch(mk, grid, block, launch_args(c))
    assert all(x is None or x.tobytes() == y.tobytes() for x, y in zip(a.buffers, b.buffers))
    outs = [i for i, arg in enumerate(c.args) if arg.is_buffer and arg.output]
    prompt, want, _, _ = launch_tokens(mk, grid, block, launch_args(c), outs)
    assert set(prompt + want) <= {n for n, _ in core_circuit().tokens}


LOCAL = "\t.local .align 16 .b8 \t__local_depot0[40];\n"


def _local_kernel(body):
    head = HEAD + "\tmov.u64 \t%SPL, __local_depot0;\n"
    decls = DECLS + LOCAL + "\t.reg .b64 \t%SPL;\n"
    return parse_ptx(kernel_ptx(head + body + "\tret;\n", params=PARAMS, decls=decls)).kernel()


def test_local_memory_lives_in_one_frame_per_lane_of_shared_memory():
    # every lane writes its own 40 bytes (a vector, a packed vector mov, a guarded scalar) and
    # reads them back (a vector, a lane-dependent word, an unpacking mov); lanes 27.. skip the
    # guarded store, so their load of it reads a word nothing wrote (undefined; a select drops it)
    body = """\tand.b32 \t%r1, %r100, 3;
\tmul.wide.u32 \t%rd4, %r1, 4;
\tadd.s64 \t%rd5, %SPL, %rd4;
\tst.local.v4.u32 \t[%SPL], {%r100, %r1, %r100, %r1};
\tmov.b64 \t%rd6, {%r100, %r1};
\tst.local.u64 \t[%SPL+16], %rd6;
\t@%p9 st.local.u32 \t[%SPL+24], %r100;
\tld.local.v2.u32 \t{%r2, %r3}, [%SPL+8];
\tld.local.u32 \t%r4, [%rd5];
\tld.local.u64 \t%rd7, [%SPL+16];
\tmov.b64 \t{%r5, %r6}, %rd7;
\tld.local.u32 \t%r7, [%SPL+24];
\tselp.b32 \t%r8, %r7, 5, %p9;
\tadd.u32 \t%r2, %r2, %r3;
\tadd.u32 \t%r2, %r2, %r4;
\tadd.u32 \t%r2, %r2, %r6;
\tadd.u32 \t%r2, %r2, %r8;
\tst.global.u32 \t[%rd9], %r2;
"""
    k = _local_kernel(body)
    mk = lower(k, one_warp=True)
    assert not any("local" in i.modifiers for i in mk.instructions if i.opcode in ("ld", "st"))
    a, b = launch(k, 1, 32, _inputs()), launch(mk, 1, 32, _inputs())
    assert a.buffers[0].tobytes() == b.buffers[0].tobytes()
    launch_tokens(allocate(mk)[0], (1, 1, 1), (32, 1, 1), _inputs(), [0])


def test_a_local_access_past_the_frame_faults_as_in_the_interpreter():
    # lane 3 stores 4 bytes at local address 40: outside its 40 bytes (the next lane's frame in
    # shared memory, which must not be reached)
    body = ("\tmul.wide.u32 \t%rd4, %r100, 8;\n\tadd.s64 \t%rd5, %SPL, %rd4;\n"
            "\tst.local.u32 \t[%rd5+16], %r100;\n")
    k = _local_kernel(body)
    for kernel in (k, lower(k, one_warp=True)):
        launch(kernel, 1, 3, _inputs())                 # lanes 0..2: in range
        with pytest.raises(OutOfBounds):
            launch(kernel, 1, 4, _inputs())


def test_the_core_refuses_sub_word_accesses_with_a_buffer_of_part_words():
    from gpu_layers.machine.core import CoreError, machine_kernel
    k = _kernel("\tld.global.u8 \t%rs1, [%rd8];\n")
    machine_kernel(k, (1, 1, 1), (4, 1, 1), _inputs())
    with pytest.raises(CoreError, match="buffer argument 1 has 6 bytes"):
        machine_kernel(k, (1, 1, 1), (4, 1, 1), [np.zeros(4, np.uint32), np.zeros(6, np.uint8)])


@pytest.mark.parametrize("name", ["spin_lock_cas", "spin_lock_outside"])
def test_spin_locks_in_blocks_of_two_warps_match_the_original(cases, name):
    """Locks taken by compare-and-swap in blocks of 48 and 40 threads (two warps): prepared for the
    core (machine_kernel: the atomics' loops hold the turn), the machine code computes the
    original's outputs (and the real GPU's: gpu-truth)."""
    from gpu_layers.machine.core import machine_kernel

    c = cases[name]
    k = module_for(c.ptx()).kernel(c.kernel)
    mk, grid, block = machine_kernel(k, c.grid, c.block, launch_args(c))
    assert block[0] > 32 and mk.holds
    a = launch(k, c.grid, c.block, launch_args(c), c.dynamic_shared_bytes)
    b = launch(mk, grid, block, launch_args(c), c.dynamic_shared_bytes, step_budget=2_000_000)
    for i, arg in enumerate(c.args):
        if arg.is_buffer and arg.output:
            assert a.buffers[i].tobytes() == b.buffers[i].tobytes(), (name, i)


def test_generic_accesses_of_global_buffers_run_as_global_ones():
    """Inline asm's generic pointers (a buffer's generic address is its global one): generic ld,
    st and red become .global when nothing makes a generic shared or local address, and compute
    what the original computes; with a cvta.shared in the kernel they stay generic (the memory
    unit refuses them by name)."""
    from gpu_layers.machine.lower import generic_as_global
    from gpu_layers.machine.memory_map import MemoryMapError, memory_ops

    body = """\tld.param.u64 \t%rd4, [inp];
\tadd.s64 \t%rd5, %rd4, %rd2;
\tld.u32 \t%r1, [%rd5];
\tld.param.u64 \t%rd6, [out];
\tadd.s64 \t%rd7, %rd6, %rd2;
\tst.u32 \t[%rd7], %r1;
\tand.b32 \t%r2, %r100, 3;
\tmul.wide.u32 \t%rd10, %r2, 4;
\tadd.s64 \t%rd11, %rd6, %rd10;
\tred.add.u32 \t[%rd11+128], %r1;
"""
    out = _same(body, n_out=64)
    assert out[32:36].any()
    k = generic_as_global(_kernel(body))
    assert [i.name for i in k.instructions if i.opcode in ("ld", "st", "red") and "param" not in i.modifiers] \
        == ["ld.global.u32", "st.global.u32", "red.global.add.u32"]
    shared = _kernel("\tmov.u64 \t%rd12, sh;\n\tcvta.shared.u64 \t%rd12, %rd12;\n" + body)
    assert generic_as_global(shared) is shared
    with pytest.raises(MemoryMapError, match="a generic address"):
        memory_ops(allocate(lower(shared, one_warp=True))[0])


DIVERGENT_ATOMICS = """\tand.b32 \t%r1, %r100, 3;
\tsetp.ne.u32 \t%p1, %r1, 0;
\t@%p1 bra \tSKIP;
\tatom.global.add.u32 \t%r2, [%rd3+256], %r100;
\tatom.global.add.u32 \t%r3, [%rd3+260], 1;
SKIP:
\tatom.global.add.u32 \t%r4, [%rd3+256], 1000;
\tatom.global.max.u32 \t%r5, [%rd3+264], %r100;
"""


def test_atomics_in_divergent_code_never_share_a_step():
    # lanes 0, 4, 8, .. add in a branch; every lane then adds to the same word. The branch's
    # turn loop jumps back, and the cursor rule lets the lanes waiting after it run on into the
    # next atomic's turns: without the warp's atomic lock two lanes, one of each group, would
    # load and store the word in one step and one addition would be lost. Here the group that
    # ran ahead waits at the lock until the other arrives and both take their turns together,
    # so even the old values come out in the interpreter's order (in general the lock keeps
    # each lane's atomic whole, not the original's order between divergent groups)
    k = _kernel(DIVERGENT_ATOMICS + "\tst.global.u32 \t[%rd9], %r4;\n")
    args = [np.zeros(64, np.uint32), np.zeros(80, np.uint32)]
    a = launch(k, 1, 32, [x.copy() for x in args])
    mk, grid, block = machine_kernel(k, (1, 1, 1), (32, 1, 1), args)
    b = launch(mk, grid, block, [x.copy() for x in args])
    assert a.buffers[1][64:67].tolist() == [sum(range(0, 32, 4)) + 32 * 1000, 8, 31]
    for x, y in zip(a.buffers, b.buffers):
        assert x.tobytes() == y.tobytes()


SUB_WORD_LOCAL = """\tsetp.lt.u32 \t%p8, %r100, 11;
\tand.b32 \t%r1, %r100, 7;
\tcvt.u64.u32 \t%rd4, %r1;
\tadd.s64 \t%rd5, %SPL, %rd4;
\tcvt.u16.u32 \t%rs1, %r100;
\tst.local.u8 \t[%rd5], %rs1;
\tst.local.u8 \t[%SPL+13], %rs1;
\t@%p8 st.local.u16 \t[%SPL+20], %rs1;
\tst.local.u32 \t[%SPL+24], %r100;
\tld.local.u8 \t%rs2, [%rd5];
\tld.local.s8 \t%rs3, [%SPL+13];
\tld.local.u32 \t%r2, [%SPL+12];
\tld.local.u16 \t%rs4, [%SPL+12];
\tld.local.u8 \t%rs5, [%SPL+26];
\tld.local.v2.u8 \t{%rs6, %rs7}, [%SPL+20];
\tcvt.u32.u16 \t%r3, %rs2;
\tcvt.s32.s16 \t%r4, %rs3;
\tcvt.u32.u16 \t%r5, %rs4;
\tcvt.u32.u16 \t%r6, %rs5;
\tcvt.u32.u16 \t%r7, %rs6;
\tselp.b32 \t%r7, %r7, 9, %p8;
\tadd.u32 \t%r3, %r3, %r4;
\tadd.u32 \t%r3, %r3, %r2;
\tadd.u32 \t%r3, %r3, %r5;
\tadd.u32 \t%r3, %r3, %r6;
\tadd.u32 \t%r3, %r3, %r7;
\tst.global.u32 \t[%rd9], %r3;
"""


def test_bytes_of_local_memory_are_tracked_one_by_one():
    # byte and 16-bit stores into words nothing wrote before (a word load of it reads the bytes
    # never written as 0, as the interpreter does), a byte of a word written whole, a signed
    # byte, a vector of two bytes, and a guarded 16-bit store whose lanes 11.. skip (their byte
    # loads of it give poison, which the select drops): equal to the interpreter, in the core
    # (16 threads: 16 frames of 64 bytes beside the 256-byte shared array)
    k = _local_kernel(SUB_WORD_LOCAL)
    a = launch(k, 1, 16, _inputs())
    mk, grid, block = machine_kernel(k, (1, 1, 1), (16, 1, 1), _inputs())
    b = launch(mk, grid, block, _inputs())
    assert a.buffers[0].tobytes() == b.buffers[0].tobytes()
    launch_tokens(mk, grid, block, _inputs(), [0])


@pytest.mark.parametrize("read", ["ld.local.u8 \t%rs2, [%SPL+14]", "ld.local.u16 \t%rs2, [%SPL+14]",
                                  "ld.local.u8 \t%rs2, [%SPL+16]"])
def test_a_local_byte_nothing_wrote_is_undefined_as_in_the_interpreter(read):
    # byte 13 written; bytes 14-15 of its word and the word at 16 never: the original raises when
    # the value is stored, and so does the lowered kernel (its byte masks say nothing was written)
    body = f"""\tcvt.u16.u32 \t%rs1, %r100;
\tst.local.u8 \t[%SPL+13], %rs1;
\t{read};
\tcvt.u32.u16 \t%r3, %rs2;
\tst.global.u32 \t[%rd9], %r3;
"""
    k = _local_kernel(body)
    mk, grid, block = machine_kernel(k, (1, 1, 1), (4, 1, 1), _inputs())
    for kernel, g, bl in ((k, 1, 4), (mk, grid, block)):
        with pytest.raises(UninitializedRead):
            launch(kernel, g, bl, _inputs())


def test_local_sub_word_accesses_called_as_routines_match_the_interpreter():
    # the smallest lowering (call_sequences): each unguarded scalar byte or 16-bit local access
    # calls one routine per kind (a store of 1 byte; loads of u8, s8, u16: 6 sites, 4 routines);
    # the guarded store and the vector load stay inline. The same buffers as the original, and
    # the core takes the launch
    k = _local_kernel(SUB_WORD_LOCAL)
    inline, called = lower(k, one_warp=True), lower(k, one_warp=True, threads=16, call_sequences=True)
    assert len(called.calls) == 6 and len({entry for _, entry, _ in called.calls}) == 4
    a = launch(k, 1, 16, _inputs())
    for mk in (inline, called):
        assert launch(mk, 1, 16, _inputs()).buffers[0].tobytes() == a.buffers[0].tobytes()
    ak, _ = allocate(called)
    launch_tokens(ak, (1, 1, 1), (16, 1, 1), _inputs(), [0])


def test_a_local_byte_nothing_wrote_is_undefined_through_the_routines_too():
    body = """\tcvt.u16.u32 \t%rs1, %r100;
\tst.local.u8 \t[%SPL+13], %rs1;
\tld.local.u8 \t%rs2, [%SPL+14];
\tcvt.u32.u16 \t%r3, %rs2;
\tst.global.u32 \t[%rd9], %r3;
"""
    mk = lower(_local_kernel(body), one_warp=True, call_sequences=True)
    assert len(mk.calls) == 2
    with pytest.raises(UninitializedRead):
        launch(mk, 1, 4, _inputs())


def test_a_local_byte_past_the_frame_faults_in_the_routine_and_names_its_sites():
    # lane 3 stores a byte at local address 40 (its 40 bytes end at 39): the routine's range
    # check faults, and what the fault means names the lines of the routine's sites
    body = ("\tmul.wide.u32 \t%rd4, %r100, 8;\n\tadd.s64 \t%rd5, %SPL, %rd4;\n\tcvt.u16.u32 \t%rs1, %r100;\n"
            "\tst.local.u8 \t[%rd5+16], %rs1;\n\tst.local.u8 \t[%rd5+15], %rs1;\n")
    k = _local_kernel(body)
    mk = lower(k, one_warp=True, call_sequences=True)
    lines = [i.line for i in k.instructions if i.name == "st.local.u8"]
    assert len(mk.calls) == 2 and len(lines) == 2
    why = list(mk.checks.values())
    assert f"a 1-byte local store outside the thread's 40 bytes of local memory (at one of lines {lines[0]}, " \
           f"{lines[1]}: every such store calls one routine)" in why
    launch(mk, 1, 3, _inputs())                          # lanes 0..2: in range
    with pytest.raises(OutOfBounds):
        launch(mk, 1, 4, _inputs())


def test_local_frames_are_one_per_thread_of_the_block():
    # 4 threads: 4 frames (40 bytes of local memory and their byte masks: 48 + 16 bytes each)
    k = _local_kernel(SUB_WORD_LOCAL)
    mk, _, _ = machine_kernel(k, (1, 1, 1), (4, 1, 1), _inputs())
    frames = next(v for v in mk.vars if v.name == "__mq_local")
    assert frames.size == 4 * 64
