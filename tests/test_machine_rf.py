"""The v0 register-file commit circuit (gpu_layers.machine.rf_circuit) driven through stock
transformers Qwen3.5 layers (fp32, CPU): its register file, decoded from the recurrent state in the
cache (gpu_layers.machine.inspect_state), equals

  1. a plain Python model of the token stream, after every token (decode) and at segment ends
     (prefill: the chunked delta rule, continuing the cache), on random hand-made streams with
     partial masks, S = 1 groups, omitted zero chunks, lone <g 1> issues and no-write instructions;
  2. the reference interpreter's registers (its observer's W.R columns) after every step, on a real
     nvcc kernel from gpu-truth (vec_add_i32, lowered to machine code, traced by the protocol oracle).

The circuit is compiled for Qwen3.5-2B's per-layer budgets (the "tiny-2b-layers" host's: the machine
a 2B build contains); one test compiles it for the tiny host's small heads, where the program
memory is banked.
"""
import numpy as np
import pytest
import torch
from transformers.cache_utils import DynamicCache

from gpu_layers.craft.state import max_rail_error, recurrent_state
from gpu_layers.craft.testing import LAYERS_2B, TINY
from gpu_layers.machine.protocol import lane_masks, lane_states
from gpu_layers.machine.inspect_state import read_registers, registers_at, written
from gpu_layers.machine.rf_circuit import (CHUNKS, PAYLOAD, REGS, RF_PORT, StreamError, build_rf_machine,
                                           chunk_bits)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

M32 = (1 << 32) - 1


@pytest.fixture(scope="module")
def machine():
    rf = build_rf_machine(LAYERS_2B)
    return rf, rf.model()


# ---- a plain model of the stream (shares nothing with the circuit) ---------------------------

class StreamModel:
    """Registers after each protocol token: a group's values are written when the next <g>, <wi>
    or the end arrives; chunks not sent are 0; S = 1: lane 0's chunks for every executed lane."""

    def __init__(self, program):
        self.program, self.regs, self.group, self.pc = program, {}, None, None

    def feed(self, tok):
        kind = tok[0]
        if kind in ("wi", "g", "dump", "halt"):
            self._commit()
        if kind == "wi":
            self.pc = tok[2]
        elif kind == "g":
            self.group = (tok[1], lane_masks(tok[2])[1], tok[4], self.pc, {})
        elif kind == "d":
            self.group[4][(tok[1], tok[2])] = tok[3]

    def _commit(self):
        if self.group is None:
            return
        k, e, s, pc, chunks = self.group
        self.group = None
        r = self.program.get(pc)
        if r is None:
            return
        for j in range(4):
            if (e >> j) & 1:
                src = 0 if s else j
                self.regs[(4 * k + j, r)] = sum(chunks.get((src, c), 0) << (PAYLOAD * c) for c in range(CHUNKS)) & M32


def random_value(rng):
    kind = rng.integers(6)
    if kind == 0:
        return 0
    if kind == 1:
        return int(rng.integers(1, 1 << 11))                 # one chunk
    if kind == 2:
        return int(rng.integers(1, 1 << 10)) << 22           # only the top chunk
    if kind == 3:
        return int(rng.choice([M32, 1 << 31, (1 << 11) | 1]))
    return int(rng.integers(0, 1 << 32))


def chunks_of(v):
    return [(v >> (PAYLOAD * c)) & ((1 << chunk_bits(c)) - 1) for c in range(CHUNKS)]


def random_stream(rng, n_issues, program):
    """Protocol tuples of n_issues random issues of the program's PCs, ending with <halt>."""
    toks = []
    pcs = sorted(program)
    for _ in range(n_issues):
        pc = int(rng.choice(pcs))
        toks.append(("wi", 0, pc))
        present = [[True, True], [True, False], [False, True]][rng.choice(3, p=[0.6, 0.2, 0.2])]
        for k in range(2):
            if not present[k]:
                continue
            e = int(rng.choice([15, int(rng.integers(0, 16))]))
            vals = [random_value(rng) for _ in range(4)]
            same = 0
            lanes = [j for j in range(4) if (e >> j) & 1]
            if len(lanes) > 1 and rng.random() < 0.3:
                v = random_value(rng) or 5
                vals = [v] * 4
                same = 1
            toks.append(("g", k, lane_states(e, e, 0), 0, same))
            data = []
            for j in ([0] if same else lanes):
                data += [("d", 0 if same else j, c, x) for c, x in enumerate(chunks_of(vals[j])) if x]
            if program[pc] is None and rng.random() < 0.5:
                data = data[:2]                           # no-write instructions may still carry data
            if rng.random() < 0.2:
                rng.shuffle(data)                         # the commit does not depend on chunk order
            toks += data
    return toks + [("halt",)]


def random_program(rng, n=24):
    pcs = rng.choice(64, n, replace=False)
    return {int(p): (None if rng.random() < 0.2 else int(rng.integers(REGS))) for p in pcs}


def expected_states(program, stream):
    """{stream index: registers after that token} from the plain model."""
    m = StreamModel(program)
    out = []
    for t in stream:
        m.feed(t)
        out.append(dict(m.regs))
    return out


def full_state(regs):
    return {(t, r): regs.get((t, r)) for t in range(8) for r in range(REGS)}


def hand_case(rf, seed, n_issues):
    rng = np.random.default_rng(seed)
    program = random_program(rng)
    stream = random_stream(rng, n_issues, program)
    names = rf.program_tokens(program) + rf.stream_tokens(stream)
    npro = len(program)
    exp = [{}] * npro + expected_states(program, stream)
    assert len(names) == len(exp)
    return rf.encode(names), exp, names


def assert_states(got: dict, exp: list, names):
    for p in sorted(got):
        want = full_state(exp[p])
        if got[p] != want:
            bad = {k: (got[p][k], want[k]) for k in want if got[p][k] != want[k]}
            raise AssertionError(f"position {p} ({names[p]}): {len(bad)} registers differ, e.g. "
                                 f"{dict(list(bad.items())[:4])} (model, expected)")


# ---- 1. hand-made streams ------------------------------------------------------------------

def test_hand_streams_decode_every_position(machine):
    rf, model = machine
    ids, exp, names = hand_case(rf, 0, 40)
    got = registers_at(model, rf, ids, range(len(ids)), path="decode")
    assert_states(got, exp, names)
    assert len(written(got[len(ids) - 1])) >= 60       # most registers of most threads written
    kinds = {n.split()[0] for n in names}
    assert kinds == {"<pd", "<wi", "<g", "<d", "<end>"}


def test_hand_streams_prefill_segments_and_one_shot(machine):
    rf, model = machine
    ids, exp, names = hand_case(rf, 1, 110)
    rng = np.random.default_rng(11)
    commits = [i for i, n in enumerate(names) if n.startswith(("<wi", "<g 1", "<end"))]
    pos = sorted(set(rng.choice(commits, 10, replace=False).tolist()) | {len(ids) - 1, 70, 71})
    assert_states(registers_at(model, rf, ids, pos, path="prefill"), exp, names)
    cache = DynamicCache(config=model.config)        # the whole stream in one forward
    with torch.no_grad():
        model(torch.tensor([ids]), cache=cache, use_cache=True)
    assert_states({len(ids) - 1: read_registers(cache, rf)}, exp, names)
    place = rf.compiled.port(RF_PORT)           # the stored rails are near-ideal, not just decodable
    assert max_rail_error(recurrent_state(cache, place.layer), place) < 1e-4


def test_small_heads_bank_the_program():
    """Compiled for the tiny host's small heads (key dim 32 < 64 PCs) the program memory is banked
    (2 banks of 32): a path the 2B's 128-wide heads do not take. Exact on both paths."""
    rf = build_rf_machine(TINY)
    assert rf.compiled.num_layers == 4 and rf.bank_slots == 32
    model = rf.model()
    ids, exp, names = hand_case(rf, 2, 24)
    assert_states(registers_at(model, rf, ids, range(len(ids)), path="decode"), exp, names)
    pos = [i for i, n in enumerate(names) if n.startswith("<wi")][::6] + [len(ids) - 1]
    assert_states(registers_at(model, rf, ids, pos, path="prefill"), exp, names)


def test_stream_refusals(machine):
    rf, _ = machine
    for bad in [[("blk", 1)], [("wi", 1, 0)], [("wi", 0, 64)], [("g", 2, 2, 0, 0)],
                [("g", 0, 2, 1, 0)], [("d", 0, 3, 1)], [("d", 0, 2, 1024)], [("x", 5)]]:
        with pytest.raises(StreamError):
            rf.stream_tokens(bad)
    with pytest.raises(StreamError):
        rf.program_tokens({64: 1})
    with pytest.raises(StreamError):
        rf.encode(["<pd 0 r16>"])


# ---- 2. a real kernel ------------------------------------------------------------------------

def v0_kernel_case(mk, grid, block, args):
    """A lowered kernel's v0 program, stream and per-step interpreter registers.

    Registers: the <= 32-bit (non-predicate) registers written by single-destination instructions
    are renamed 0..15 in order of first write; instructions writing predicates or nothing are
    `none`; instructions writing 64-bit (or several) registers are left out of the stream (their
    issues are dropped: they touch no tracked register). Returns (program {pc: reg or None},
    stream tuples, {reg index: name}, snapshots: per step {(thread, reg): value or None},
    step index of every kept <wi> in the stream)."""
    from gpu_layers.interp.machine import launch, program_for
    from gpu_layers.machine.protocol import destinations, trace_tokens

    dst = destinations(mk)
    bad = {n for d in dst.values() if len(d) > 1 or (d and d[0][1] > 32) for n, b in d if b <= 32}
    regs, program, dropped = {}, {}, set()
    for pc in sorted(dst):
        d = dst[pc]
        if not d or (len(d) == 1 and d[0][1] == 1):
            program[pc] = None
        elif len(d) == 1 and d[0][1] <= 32 and d[0][0] not in bad:
            program[pc] = regs.setdefault(d[0][0], len(regs))
        else:
            dropped.add(pc)
    assert len(regs) <= REGS and len(dst) <= 64
    prog = program_for(mk)
    cols = {i: prog.colnames.index(n) for n, i in regs.items()}
    snaps = []

    def observe(W, ins, pc, active, done):
        snaps.append({(t, i): W.R[c][t] for i, c in cols.items() for t in range(8)})
    launch(mk, grid, block, [a.copy() if isinstance(a, np.ndarray) else a for a in args], observer=observe)
    tr = trace_tokens(mk, grid, block, [a.copy() if isinstance(a, np.ndarray) else a for a in args])
    stream, steps, keep, step = [], [], True, -1
    for t in tr.tokens:
        if t[0] == "wi":
            step += 1
            keep = t[2] not in dropped
            if keep:
                steps.append(step)
        elif t[0] in ("dump", "halt"):
            stream.append(("halt",))
            break
        if keep and t[0] != "blk":
            stream.append(t)
    assert step + 1 == len(snaps)
    return program, stream, {i: n for n, i in regs.items()}, snaps, steps


def _every_step_matches(machine, mk, args):
    """Run lowered kernel `mk` (one block of 8 threads) through the v0 register file: after every
    step's write-back has committed (at the next <wi> and at <end>) the register file in the
    cache equals the interpreter's registers after that step: every step of the first third on
    the decode path (a decode step costs ~0.05-0.1 s at the 2B's dense layer budgets on a CPU
    core), every 10th step over the whole stream on the prefill path, each segment continuing
    the cache, and the end. Returns (steps checked, steps checked on decode, the final
    registers {(thread, reg index): value}, {reg index: name})."""
    program, stream, regnames, snaps, steps = v0_kernel_case(mk, 1, 8, args)
    rf, model = machine
    names = rf.program_tokens(program) + rf.stream_tokens(stream)
    ids = rf.encode(names)
    npro = len(program)
    # commit positions: each kept <wi> (the previous kept step is complete) and <end>
    wi_pos = [npro + i for i, t in enumerate(stream) if t[0] == "wi"]
    checks = {p: steps[n - 1] for n, p in enumerate(wi_pos) if n > 0}
    checks[len(ids) - 1] = steps[-1]
    exp = [None] * len(ids)
    for p, st in checks.items():
        exp[p] = {k: v for k, v in snaps[st].items() if v is not None}
    head = [p for p in sorted(checks) if p < len(ids) // 3]
    assert_states(registers_at(model, rf, ids, head, path="decode"), exp, names)
    pre = sorted(checks)[::10] + [len(ids) - 1]
    assert_states(registers_at(model, rf, ids, pre, path="prefill"), exp, names)
    return len(checks), len(head), exp[len(ids) - 1], regnames


def test_real_kernel_vec_add_i32_matches_the_interpreter(machine):
    """gpu-truth's vec_add_i32 (nvcc PTX, recorded on a real GPU), lowered to machine code (its
    blockIdx * blockDim is a loop of machine multiply steps), one block of 8 threads, twice: n = 6 (threads 6
    and 7 take the bounds-check exit: partial masks, lone groups) and n = 8 (whole groups, other
    data). Every step matches (`_every_step_matches`)."""
    from conftest import require_gpu_truth
    from gpu_layers.interp import Scalar, module_for
    from gpu_layers.machine import lower

    kernel = module_for((require_gpu_truth() / "vec_add_i32.ptx").read_text()).kernel("vec_add_i32")
    rng = np.random.default_rng(5)
    a = rng.integers(-2 ** 31, 2 ** 31, 8).astype(np.int32)
    b = rng.integers(-2 ** 31, 2 ** 31, 8).astype(np.int32)
    mk = lower(kernel)
    n_add, head_add, final, regnames = _every_step_matches(
        machine, mk, [Scalar("i32", 6), a, b, np.zeros(8, np.int32)])
    assert {regnames[r] for _, r in final} >= {"%r1", "%r6", "%r7", "%r8"}    # the sums were written
    assert final[(3, [i for i, n in regnames.items() if n == "%r8"][0])] == (int(a[3]) + int(b[3])) & M32

    # again with n = 8: every thread adds, no exits (whole groups), other data
    c = rng.integers(-2 ** 31, 2 ** 31, 8).astype(np.int32)
    d = rng.integers(-2 ** 31, 2 ** 31, 8).astype(np.int32)
    n_all, head_all, final, regnames = _every_step_matches(
        machine, mk, [Scalar("i32", 8), c, d, np.zeros(8, np.int32)])
    r8 = [i for i, n in regnames.items() if n == "%r8"][0]
    assert all(final[(t, r8)] == (int(c[t]) + int(d[t])) & M32 for t in range(8))
    assert n_add + n_all >= 36 and head_add + head_all > 12      # steps checked (two-bit multiply steps)


# ---- 3. size -----------------------------------------------------------------------------------

def test_compiled_size_report(machine, capsys):
    rf, _ = machine
    comp = rf.compiled
    rep = comp.report()
    with capsys.disabled():
        print("\n" + rep)
    assert comp.num_layers == 4
    assert comp.machine.width == 369
    assert comp.machine.vocab_size == 64 * 17 + 64 + 2 * 16 * 2 + 4 * (2048 + 2048 + 1024) + 1
    place = comp.port(RF_PORT)
    assert place.layer == 3 and [len(h) for h in place.heads] == [1, 1, 1, 1]
    assert "mix:rf" in rep and not comp.bf16_unsafe()
