"""The memory unit's map (gpu_layers.machine.memory_map) and the interpreter's buffer offsets it
relies on: buffers packed into the machine's 16 KB give the same results, prompt and dump tokens
round-trip, the one-lane-per-position rule, refusals by name."""
import numpy as np
import pytest

from gpu_layers.errors import LaunchError, OutOfBounds
from gpu_layers.interp import launch, launch_args, module_for
from gpu_layers.machine import allocate, lower
from gpu_layers.machine import memory_map as MM
from gpu_layers.suite import load_suite

UNDER = """
.version 7.0
.target sm_75
.address_size 64
.visible .entry under(.param .u64 p)
{
  .reg .b64 %rd<3>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [p];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r1, [%rd2+-4];
  st.global.u32 [%rd2], %r1;
  ret;
}
"""


def _suite(name):
    return next(c for c in load_suite() if c.name == name)


def _args(c):
    return launch_args(c)


def test_layout_packs_outputs_first_at_rows():
    a, b, out = np.arange(5, dtype=np.int32), np.arange(9, dtype=np.int64), np.zeros(3, np.uint32)
    lay = MM.layout([a, 7, b, out], outputs=[3])
    assert lay.outputs == [3] and lay.offsets == {3: 0, 0: 32, 2: 64}
    assert lay.dump_words == 3
    assert MM.CAPACITY["global"] == 16384
    MM.layout([np.zeros(4096, np.int32)], outputs=[0])
    with pytest.raises(MM.MemoryMapError, match="16416 bytes of global memory: the memory unit v0 holds 16384"):
        MM.layout([np.zeros(4097, np.int32)], outputs=[0])


def test_buffer_offsets_keep_results_and_bounds():
    """A launch with the map's offsets computes the same buffers; an access below a buffer's
    start (inside its 4 GiB window) is out of bounds; offsets are checked."""
    c = _suite("shared_reverse")
    k = module_for(c.ptx()).kernel(c.kernel)
    ref = launch(k, c.grid, c.block, _args(c), c.dynamic_shared_bytes)
    args = _args(c)
    lay = MM.layout(args, [i for i, a in enumerate(c.args) if a.is_buffer and a.output])
    got = launch(k, c.grid, c.block, args, c.dynamic_shared_bytes, buffer_offsets=lay.offsets)
    for x, y in zip(ref.buffers, got.buffers):
        assert (x is None and y is None) or x.tobytes() == y.tobytes()
    under = module_for(UNDER).kernel("under")
    buf = np.arange(4, dtype=np.uint32)
    for off in (0, 32):               # below the start: outside the window, or inside it
        with pytest.raises(OutOfBounds, match="outside|not inside"):
            launch(under, 1, 1, [buf.copy()], buffer_offsets={0: off})
    with pytest.raises(LaunchError, match="multiple of 16"):
        launch(under, 1, 1, [buf.copy()], buffer_offsets={0: 8})


def test_dump_and_prompt_tokens_round_trip():
    rng = np.random.default_rng(1)
    out = rng.integers(0, 2**32, 37, dtype=np.uint32)
    out[3] = 0
    inp = rng.integers(-2**63, 2**63 - 1, 5, dtype=np.int64)
    args = [inp, out]
    lay = MM.layout(args, [1])
    toks = MM.dump_tokens({0: inp, 1: out}, lay)
    assert toks[-1] == "<end>" and sum(t.startswith("<xa ") for t in toks) == 37
    assert MM.decode_dump(toks, lay, {1: out})[1].tobytes() == out.tobytes()
    prompt = MM.prompt_tokens(args, lay, shared_bytes=64)
    assert prompt[:2] == ["<nw 37>", "<ss 16>"]
    assert prompt[2:8] == ["<mbk 0>", "<mbl 40>", "<mbh 50>", "<mbk 1>", "<mbl 0>", "<mbh 37>"]
    prompt = prompt[8:]
    nonzero = sum(1 for x in out if x) + sum(1 for x in inp.view(np.uint32) if x)
    assert sum(t.startswith("<ma ") for t in prompt) == sum(t.startswith("<mc2 ") for t in prompt) == nonzero
    # the prompt's words, read back as the machine's memory, are the buffers
    mem, cur = {}, None
    for t in prompt:
        kind, x = t[1:-1].split()
        if kind == "ma":
            cur = int(x)
            mem[cur] = 0
        else:
            k = int(kind[2])
            mem[cur] |= int(x, 16) << sum(MM.CHUNK_BITS[:k])
    words = MM.words_of({0: inp, 1: out}, lay)
    assert mem == {a: x for a, x in words.items() if x}


def test_one_lane_per_position():
    assert MM.tick_lanes([3, 0, 2]) == [2, 3] and MM.tick_lanes([1]) == []


@pytest.mark.parametrize("name,why", [("exch_claim", "atomics"), ("crc32_bytes", "sub-word"),
                                      ("rpn_eval", "local memory")])
def test_refused_by_name(name, why):
    c = _suite(name)
    mk, _ = allocate(lower(module_for(c.ptx()).kernel(c.kernel)))
    with pytest.raises(MM.MemoryMapError, match=why):
        MM.memory_ops(mk)


OVER = """
.version 7.0
.target sm_75
.address_size 64
.visible .entry over(.param .u64 p, .param .u64 q)
{
  .reg .b64 %rd<6>;
  .reg .b32 %r<3>;
  ld.param.u64 %rd1, [p];
  ld.param.u64 %rd2, [q];
  cvta.to.global.u64 %rd3, %rd1;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd4, %r1, 16;
  add.s64 %rd5, %rd3, %rd4;
  st.global.u32 [%rd5], %r1;
  ret;
}
"""


def _core_launch(ptx, name, args, block):
    from gpu_layers.machine.core import launch_tokens

    mk, _ = allocate(lower(module_for(ptx).kernel(name)))
    return launch_tokens(mk, (1, 1, 1), (block, 1, 1), args, [0] if args else [])


def test_faults_end_the_stream_at_the_faulting_lane():
    """Lane 1 stores past its 16-byte buffer, into the padding before the next buffer's row: the
    interpreter refuses it, and the machine's stream serves lane 0, ticks to lane 1 and ends
    with <fault> (no dump). Reading 4 bytes below a buffer's start faults at the first lane."""
    p, q = np.zeros(4, np.uint32), np.arange(8, dtype=np.uint32)
    with pytest.raises(OutOfBounds):
        launch(module_for(OVER).kernel("over"), 1, 4, [p.copy(), q.copy()])
    _, stream, _, tr = _core_launch(OVER, "over", [p, q], 4)
    assert stream[-3].startswith("<wi ") and stream[-2:] == ["<mt 1>", "<fault>"] and tr.buffers is None
    assert not any(t.startswith("<xa ") for t in stream)
    _, stream, _, _ = _core_launch(UNDER, "under", [np.arange(4, dtype=np.uint32)], 1)
    assert stream[-2].startswith("<wi ") and stream[-1] == "<fault>"


def test_in_bounds_accesses_pass_the_machine_rule():
    """Every access of the suite's kernels that the memory unit runs passes access_ok (the
    oracle would end their streams with <fault> otherwise)."""
    from gpu_layers.errors import QwenGPUError
    from gpu_layers.machine.core import launch_tokens

    ran = 0
    for name in ("shared_reverse", "add128", "lower_bound_search", "var_shifts", "isqrt_u32"):
        c = _suite(name)
        mk, _ = allocate(lower(module_for(c.ptx()).kernel(c.kernel)))
        try:
            _, stream, _, _ = launch_tokens(mk, c.grid, c.block, _args(c),
                                            [i for i, a in enumerate(c.args) if a.is_buffer and a.output],
                                            c.dynamic_shared_bytes)
        except QwenGPUError:
            continue
        assert stream[-1] == "<end>"
        ran += 1
    assert ran >= 4


UNW = """
.version 7.0
.target sm_75
.address_size 64
.visible .entry unw()
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .shared .align 4 .b32 sm[8];
  mov.u32 %r1, %tid.x;
  setp.eq.u32 %p1, %r1, 0;
  mov.u32 %r2, 7;
  @%p1 st.shared.u32 [sm], %r2;
  bar.sync 0;
  shl.b32 %r3, %r1, 2;
  mov.u32 %r4, sm;
  add.u32 %r5, %r4, %r3;
  ld.shared.u32 %r2, [%r5];
  ret;
}
"""


def test_a_shared_word_never_written_loads_undefined():
    """Lane 0 writes sm[0], then every lane loads sm[lane]: lanes 1..3 read words nobody wrote,
    so the load's <g> names them undefined (U = 1110), lane 0's value is sent; ticks serve 1..3."""
    _, stream, _, _ = _core_launch(UNW, "unw", [], 4)
    i = stream.index("<g 0 2 2 2 2 1110 0>")
    assert stream[i - 3:i] == ["<mt 1>", "<mt 2>", "<mt 3>"] and stream[i + 1] == "<d 0 0 007>"
    assert stream[-2:] == ["<halt>", "<end>"]
