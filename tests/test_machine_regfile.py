"""The register-file write-back commit v1 (gpu_layers.machine.regfile), compiled for Qwen3.5-2B's
per-layer shapes: its register file, decoded from the recurrent state (gpu_layers.machine.
inspect_state), equals

  1. a plain Python model of the token stream (it shares nothing with the circuit), after every
     token, on random streams: several blocks, up to 4 lane groups per issue in any subset,
     partial and issued-but-not-executed lanes, 1/16/32/64-bit destinations with omitted zero
     chunks, S = 1 groups, predicates from lane states, undefined (poison) lanes, no-write
     instructions; on stock transformers (decode every token; prefill in segments and in one
     forward) and on the fast executor;
  2. the reference interpreter's registers after every step (its observer's W.R columns), on real
     nvcc kernels from gpu-truth (recorded on a real GPU), lowered and register-allocated: up to 16
     threads per block, several blocks, 16/32/64-bit registers, predicates, and poison overwriting
     defined values (divmod_s32); the fast executor on all of them, stock transformers (decode and
     prefill) on one.
"""
import numpy as np
import pytest
import torch
from transformers.cache_utils import DynamicCache

from gpu_layers.cases import load_cases
from gpu_layers.craft.state import max_rail_error, recurrent_state
from gpu_layers.craft.testing import TINY
from gpu_layers.hosts import REAL_2B_TEXT_CONFIG
from gpu_layers.interp import Scalar, module_for
from gpu_layers.machine import allocate, lower
from gpu_layers.machine.inspect_state import read_registers, registers_at, written
from gpu_layers.machine.protocol import COPY, FILL, lane_states
from gpu_layers.machine.regfile import (CHUNKS, GROUPS, MAX_BLOCKS, PAYLOAD, PCS, REGS, RF_PORT, WIDTHS,
                                        RegfileError, RegfileProgram, build_regfile, chunk_bits)
from tests.conftest import require_gpu_truth

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REAL_2B = {k: REAL_2B_TEXT_CONFIG[k] for k in TINY}
THREADS = 16


@pytest.fixture(scope="module")
def rf():
    torch.set_num_threads(1)
    return build_regfile(REAL_2B)


@pytest.fixture(scope="module")
def model(rf):
    return rf.model()


# ---- 1. a plain model of the stream ----------------------------------------------------------

class StreamModel:
    """Registers {(thread, slot): value or None} after each protocol token. A group's write-back
    lands when the next <g>, <wi> or the end arrives; <blk> empties the file (and drops a pending
    group). Executed lanes (state >= 2) write; undefined lanes (U) write None; a predicate's value
    is its lane state (3 = 1, 2 = 0); other values are their chunks (absent = 0), lane 0's for every
    lane when S = 1, the issue's previous group's (same lane) when S = 2, and lane I's where lane J
    sent <d J 7 I>."""

    def __init__(self, dests):
        self.dests, self.regs, self.group, self.pc, self.last = dests, {}, None, None, {}

    def feed(self, tok):
        kind = tok[0]
        if kind == "blk":
            self.regs, self.group = {}, None
            return
        if kind in ("wi", "g", "dump", "halt"):
            self._commit()
        if kind == "wi":
            self.pc, self.last = tok[2], {}
        elif kind == "g":
            self.group = (tok[1], tok[2], tok[3], tok[4], self.pc, {})
        elif kind == "d" and tok[2] == COPY:          # lane J's value is lane I's
            self.group[5][("copy", tok[1])] = tok[3]
        elif kind == "d" and tok[2] == FILL:          # chunk 0, and bits 11..31 ones
            self.group[5].update({(tok[1], 0): tok[3], (tok[1], 1): 0x7FF, (tok[1], 2): 0x3FF})
        elif kind == "d":
            self.group[5][(tok[1], tok[2])] = tok[3]

    def _commit(self):
        if self.group is None:
            return
        k, states, u, s, pc, chunks = self.group
        self.group = None
        if self.dests.get(pc) is None:
            return
        slot, width = self.dests[pc]
        lanes = {}
        for j in range(4):
            st = (states >> (2 * j)) & 3
            if st < 2:
                continue
            if (u >> j) & 1:
                v = None
            elif width == 1:
                v = int(st == 3)
            elif s == 2:
                v = self.last[j]
            else:
                src = 0 if s else chunks.get(("copy", j), j)
                v = sum(chunks.get((src, c), 0) << (PAYLOAD * c) for c in range(CHUNKS))
            self.regs[(4 * k + j, slot)] = v
            lanes[j] = v
        self.last = lanes


def random_value(rng, width):
    kind = rng.integers(6)
    top = (1 << width) - 1
    if kind == 0:
        return 0
    if kind == 1:
        return int(rng.integers(1, 1 << 11)) & top                # one chunk
    if kind == 2:
        return top & ~((1 << (width - 3)) - 1)                    # only the top bits
    if kind == 3:
        return int(rng.choice([top, 1 << (width - 1), (1 << 11) | 1, (1 << 32) - int(rng.integers(1, 257))])) & top
    return int(rng.integers(0, 1 << 62)) * 4 + int(rng.integers(4)) & top


def chunks_of(v):
    return [(v >> (PAYLOAD * c)) & ((1 << chunk_bits(c)) - 1) for c in range(CHUNKS)]


def random_program(rng, n=40):
    pcs = rng.choice(PCS, n, replace=False)
    dests = {}
    for p in pcs:
        r = rng.random()
        dests[int(p)] = None if r < 0.15 else (int(rng.integers(REGS)), 1 if r < 0.35 else int(rng.choice(WIDTHS[1:])))
    return RegfileProgram({f"s{i}": i for i in range(REGS)}, dests)


def random_stream(rng, prog, n_issues, blocks=3):
    """Protocol tuples: `blocks` blocks of random issues of the program's PCs, then <halt>."""
    toks = []
    pcs = sorted(prog.dests)
    for b in rng.choice(MAX_BLOCKS, blocks, replace=False):
        toks.append(("blk", int(b)))
        for _ in range(n_issues // blocks):
            pc = int(rng.choice(pcs))
            toks.append(("wi", 0, pc))
            d = prog.dests[pc]
            groups = [k for k in range(GROUPS) if rng.random() < 0.6] or [int(rng.integers(GROUPS))]
            prev = None                                  # (executed lanes, values) of a defined group
            for k in groups:
                if d is not None and d[1] > 1 and prev is not None and rng.random() < 0.35:
                    ex = [j for j in prev[0] if rng.random() < 0.8]      # S = 2: the previous group's
                    issued = sum(1 << j for j in range(4) if j in ex or rng.random() < 0.3)
                    toks.append(("g", k, lane_states(issued, sum(1 << j for j in ex), 0), 0, 2))
                    prev = (ex, prev[1])
                    continue
                st = [int(x) for x in rng.choice(3, 4, p=[0.15, 0.15, 0.7])]  # 0 absent, 1 issued, 2 executed
                if rng.random() < 0.4:
                    st = [2, 2, 2, 2]
                ex = [j for j in range(4) if st[j] == 2]
                u = 0
                if ex and rng.random() < 0.15:
                    u = sum(1 << j for j in ex if rng.random() < 0.5)
                issued = sum(1 << j for j in range(4) if st[j])
                exm = sum(1 << j for j in ex)
                if d is not None and d[1] == 1:                       # predicate: values in <g>
                    pv = sum(1 << j for j in ex if rng.random() < 0.5 and not (u >> j) & 1)
                    toks.append(("g", k, lane_states(issued, exm, pv), u, 0))
                    continue
                width = d[1] if d else 64
                vals = {j: 0 if (u >> j) & 1 else random_value(rng, width) for j in ex}
                same = int(len(ex) > 1 and rng.random() < 0.3)
                if same:
                    v = random_value(rng, width) or 5
                    vals = {j: 0 if (u >> j) & 1 else v for j in ex}
                    same = int(len(set(vals.values())) == 1)
                copied = {}                 # lane copies: lane j takes an earlier lane's value
                if not same and rng.random() < 0.5:
                    for jj, j in enumerate(ex):
                        srcs = [i for i in ex[:jj] if i not in copied and not (u >> i) & 1]
                        if srcs and not (u >> j) & 1 and rng.random() < 0.6:
                            copied[j] = int(rng.choice(srcs))
                            vals[j] = vals[copied[j]]
                toks.append(("g", k, lane_states(issued, exm, 0), u, same))
                prev = None if u else (ex, vals)
                data = []
                for j in ([ex[0]] if same else ex):
                    if j in copied:
                        data.append(("d", j, COPY, copied[j]))
                        continue
                    if width >= 32 and (1 << 32) - 256 <= vals[j] < 1 << 32 and rng.random() < 0.7:
                        data.append(("d", 0 if same else j, FILL, vals[j] & 0x7FF))   # a fill
                        continue
                    data += [("d", 0 if same else j, c, x) for c, x in enumerate(chunks_of(vals[j])) if x]
                if d is None:
                    data = data[:2]                 # a no-write instruction's data is ignored
                if rng.random() < 0.2:
                    rng.shuffle(data)               # the commit does not depend on chunk order
                toks += data
    return toks + [("halt",)]


def full(regs, slots):
    return {(t, s): regs.get((t, s)) for t in range(THREADS) for s in slots}


def hand_case(rf, seed, n_issues, blocks=3):
    rng = np.random.default_rng(seed)
    prog = random_program(rng)
    stream = random_stream(rng, prog, n_issues, blocks)
    names = prog.prompt_tokens() + prog.stream_tokens(stream)
    m = StreamModel(prog.dests)
    exp = [{}] * len(prog.prompt_tokens())
    for t in stream:
        m.feed(t)
        exp.append(dict(m.regs))
    assert len(names) == len(exp)
    return rf.encode(names), exp, names, prog


def assert_states(got: dict, exp: list, names, slots=range(REGS)):
    for p in sorted(got):
        want = full(exp[p], slots)
        if got[p] != want:
            bad = {k: (got[p][k], want[k]) for k in want if got[p][k] != want[k]}
            raise AssertionError(f"position {p} ({names[p]}): {len(bad)} registers differ, e.g. "
                                 f"{dict(list(bad.items())[:4])} (model, expected)")


def test_random_stream_decode_every_position(rf, model):
    ids, exp, names, prog = hand_case(rf, 0, 30)
    got = registers_at(model, rf, ids, range(len(ids)), path="decode")
    assert_states(got, exp, names)
    seen = [v for st in exp for v in st.values()]
    assert sum(v is None for v in seen) > 0 and sum(v is not None and v >> 32 for v in seen) > 0
    assert {n.split()[0] for n in names} == {"<pa", "<pd", "<blk", "<wi", "<g", "<d", "<end>"}
    assert {n.split()[2] for n in names if n.startswith("<d")} >= {"6", "7"}     # fills and lane copies


def test_random_stream_prefill_segments_and_one_shot(rf, model):
    ids, exp, names, prog = hand_case(rf, 1, 45)
    rng = np.random.default_rng(11)
    commits = [i for i, n in enumerate(names) if n.startswith(("<wi", "<g", "<blk", "<end"))]
    pos = sorted(set(rng.choice(commits, 10, replace=False).tolist()) | {len(ids) - 1})
    assert_states(registers_at(model, rf, ids, pos, path="prefill"), exp, names)
    cache = DynamicCache(config=model.config)        # the whole stream in one forward
    with torch.no_grad():
        model.model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True)
    assert_states({len(ids) - 1: read_registers(cache, rf)}, exp, names)
    place = rf.compiled.port(RF_PORT)           # the stored rails are near-ideal, not just decodable
    assert max_rail_error(recurrent_state(cache, place.layer), place) < 1e-4


def test_random_streams_fast_executor_every_position(rf):
    fm = rf.fast()
    for seed in (2, 3):
        ids, exp, names, prog = hand_case(rf, seed, 120, blocks=4)
        st = fm.new_state()
        got = {}
        for p, i in enumerate(ids):
            fm.step(st, i)
            got[p] = read_registers(st, rf)
        assert_states(got, exp, names)
        assert len(written(got[len(ids) - 1])) > 20


# ---- 2. real kernels against the interpreter -------------------------------------------------

def _case(name):
    return {c.name: c for c in load_cases(require_gpu_truth() / "cases.json")}[name]


def kernel_run(rf, name):
    """(ids, names, checks, prog, poison overwrites): for each position p where the RF must hold
    the interpreter's registers, checks[p] = {(thread, machine register): value or None}. After the
    <wi> that follows step s of a block: the registers after step s; at <blk> and the first <wi>
    of a block: none written; at <end>: after the last step. Threads beyond the block read None."""
    from gpu_layers.interp.machine import launch, program_for
    from gpu_layers.machine.protocol import trace_tokens

    case = _case(name)
    ak, _ = allocate(lower(module_for(case.ptx()).kernel(case.kernel)))
    prog = rf.program(ak)
    cols = {n: program_for(ak).colnames.index(n) for n in prog.slots}
    nt = case.block[0] * case.block[1] * case.block[2]
    snaps = []

    def observe(W, ins, pc, active, done):
        snaps.append({(t, n): (W.R[c][t] if t < nt else None) for n, c in cols.items() for t in range(THREADS)})

    def args():
        return [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in case.args]
    launch(ak, case.grid, case.block, args(), case.dynamic_shared_bytes, observer=observe)
    tr = trace_tokens(ak, case.grid, case.block, args(), case.dynamic_shared_bytes, outputs=[])
    pro = prog.prompt_tokens()
    names = pro + prog.stream_tokens(tr.tokens)
    empty = {k: None for k in snaps[0]}
    checks, step, fresh = {}, -1, True
    for p in range(len(pro), len(names)):
        n = names[p]
        if n.startswith("<blk"):
            checks[p], fresh = empty, True
        elif n.startswith("<wi"):
            checks[p] = empty if fresh else snaps[step]
            step, fresh = step + 1, False
        elif n == "<end>":
            checks[p] = snaps[step]
    assert step + 1 == len(snaps)
    overwrites = sum(1 for a, b in zip(snaps, snaps[1:]) for k in a if a[k] is not None and b[k] is None)
    return rf.encode(names), names, checks, prog, overwrites


def assert_kernel(got, checks, names):
    for p in sorted(got):
        if got[p] != checks[p]:
            bad = {k: (got[p][k], v) for k, v in checks[p].items() if got[p][k] != v}
            raise AssertionError(f"position {p} ({names[p]}): {len(bad)} registers differ, e.g. "
                                 f"{dict(list(bad.items())[:4])} (model, interpreter)")


KERNELS = ["compare_select", "divergence", "scan_inclusive_i32", "bitwise_ops", "early_return", "divmod_s32",
           "int_arith_i32", "minmax_abs", "wrap_u32"]


def test_real_kernels_fast_executor_match_the_interpreter_after_every_step(rf):
    """Every step of nine gpu-truth kernels (fast executor; exact against stock: test_fast_executor
    and the stock checks here), every machine register of every thread."""
    fm = rf.fast()
    total = {"checks": 0, "blocks": 0, "widths": set(), "overwrites": 0, "threads": 0}
    for name in KERNELS:
        ids, names, checks, prog, overwrites = kernel_run(rf, name)
        st = fm.new_state()
        got = {}
        for p, i in enumerate(ids):
            fm.step(st, i)
            if p in checks:
                got[p] = read_registers(st, rf, names=prog)
        assert_kernel(got, checks, names)
        total["checks"] += len(checks)
        total["blocks"] = max(total["blocks"], sum(n.startswith("<blk") for n in names))
        total["widths"] |= {d[1] for d in prog.dests.values() if d}
        total["overwrites"] += overwrites
        last = checks[len(ids) - 1]
        total["threads"] = max(total["threads"], len({t for (t, _), v in last.items() if v is not None}))
    assert total["checks"] > 2000 and total["blocks"] >= 3 and total["threads"] == 16
    assert total["widths"] == {1, 16, 32, 64}
    assert total["overwrites"] > 0          # poison replaced defined values (divmod_s32)


def test_real_kernel_stock_transformers_prefill_then_decode(rf, model):
    """compare_select on stock transformers as a host would run it: the prompt in one prefill (the
    chunked delta rule), the trace's first 400 tokens decoded one by one with the cache (the
    recurrent rule; the registers read after every step), the rest as prefill segments continuing
    the cache (read at every 6th step)."""
    ids, names, checks, prog, _ = kernel_run(rf, "compare_select")
    npro = sum(n.startswith(("<pa", "<pd")) for n in names)
    dec_end = npro + 400
    ends = [npro - 1] + list(range(npro, dec_end)) + [p for p in sorted(checks)[::6] if p >= dec_end]
    ends = sorted(set(ends) | {len(ids) - 1})
    base, cache, start, got = model.model, DynamicCache(config=model.config), 0, {}
    with torch.no_grad():
        for e in ends:
            base(input_ids=torch.tensor([ids[start:e + 1]]), cache=cache, use_cache=True)
            start = e + 1
            if e in checks:
                got[e] = read_registers(cache, rf, names=prog)
    assert_kernel(got, checks, names)
    assert sum(p < dec_end for p in got) >= 15 and sum(p >= dec_end for p in got) >= 10


# ---- refusals, size -------------------------------------------------------------------------

def test_refusals(rf):
    prog = RegfileProgram({"%mp0": 0, "%mr0": 1}, {0: (0, 1), 1: (1, 32), 2: None})
    for bad in [[("wi", 1, 0)], [("wi", 0, 7)], [("blk", MAX_BLOCKS)], [("g", 0, 2, 0, 0)],
                [("wi", 0, 1), ("g", 4, 2, 0, 0)], [("wi", 0, 1), ("g", 0, 1, 1, 0)],
                [("wi", 0, 1), ("g", 0, 3, 0, 0)], [("wi", 0, 0), ("g", 0, 2, 0, 0), ("d", 0, 0, 1)],
                [("wi", 0, 1), ("g", 0, 2, 0, 0), ("d", 0, 3, 1)], [("wi", 0, 1), ("g", 0, 2, 0, 0), ("d", 0, 2, 1024)],
                [("wi", 0, 2), ("g", 0, 2, 0, 0), ("d", 0, 6, 1)], [("wi", 0, 1), ("g", 0, 10, 0, 1), ("d", 1, 0, 1)],
                [("wi", 0, 1), ("g", 0, 10, 0, 0), ("d", 1, 7, 1)], [("wi", 0, 1), ("g", 0, 10, 0, 1), ("d", 1, 7, 0)],
                [("x", 5)]]:
        with pytest.raises(RegfileError):
            prog.stream_tokens(bad)
    with pytest.raises(RegfileError, match="is not a token"):
        rf.encode(["<pd 32 b32>"])
    with pytest.raises(RegfileError, match="Qwen3.5-2B"):
        build_regfile(TINY)
    local = _case("local_sort")                # vector loads: two destinations
    with pytest.raises(RegfileError, match=r"ld\.local\.v2\.u32.*writes 2 registers"):
        rf.program(allocate(lower(module_for(local.ptx()).kernel(local.kernel)))[0])
    # past 32 registers, slots are shared by registers never live together (regalloc.shared_slots),
    # also for a kernel not allocated; 40 registers live at once do not fit
    from gpu_layers.interp.snippets import kernel_ptx
    from gpu_layers.ptx.parser import parse_ptx
    arith = _case("int_arith_i32")
    prog = rf.program(lower(module_for(arith.ptx()).kernel(arith.kernel)))
    assert len(prog.slots) > 32 and max(prog.slots.values()) < 32
    body = "".join(f"\tadd.u32 \t%r{i}, %r0, {i};\n" for i in range(1, 40)) + \
        "".join(f"\tadd.u32 \t%r40, %r40, %r{i};\n" for i in range(1, 40)) + "\tret;\n"
    wide = parse_ptx(kernel_ptx("\tmov.u32 \t%r0, %tid.x;\n\tmov.u32 \t%r40, 0;\n" + body)).kernel()
    with pytest.raises(RegfileError, match=r"registers in \d+ slots: the register file holds 32"):
        rf.program(lower(wide))


def test_compiled_size_report(rf, capsys):
    comp = rf.compiled
    rep = comp.report()
    with capsys.disabled():
        print("\n" + rep)
    assert comp.num_layers == 4
    s = comp.shapes
    assert all(pl.groups(s) <= s.linear_num_key_heads for pl in comp.plans)
    vocab = PCS + 1 + REGS * len(WIDTHS) + MAX_BLOCKS + PCS + GROUPS * 4 ** 4 * 2 + (GROUPS - 1) * 2 ** 4 + \
        4 * sum(1 << chunk_bits(c) for c in range(CHUNKS)) + 4 * 256 + 6 + 1
    # (S = 2: groups 1.., lanes - or 0; fills; lane copies (I, J), I < J)
    assert comp.machine.vocab_size == vocab
    place = comp.port(RF_PORT)
    assert place.layer == 3 and [len(h) for h in place.heads] == [1, 1, 1, 1] and place.port.slots == 128
    assert not comp.bf16_unsafe()
