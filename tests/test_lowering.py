"""Lowering to machine code: every instruction of the result is one machine step, and the lowered
kernel computes what the original computes, bit for bit, on the suite and the gpu-truth cases."""
import importlib

import numpy as np
import pytest

from gpu_layers.cases import load_cases
from gpu_layers.errors import UninitializedRead, UnsupportedPTX
from gpu_layers.interp import Scalar, launch, module_for
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import lower, machine_problems
from gpu_layers.machine.lower import STEP_UNROLL, _expansion, _is_machine_form
from gpu_layers.ptx.ir import FImm, Imm, Instruction
from gpu_layers.ptx.parser import parse_ptx, split_opcode
from gpu_layers.ptx.validator import SUPPORTED
from gpu_layers.suite import load_suite
from tests.conftest import require_gpu_truth


def _run(kernel, case, lanes=4):
    args = [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in case.args]
    return launch(kernel, case.grid, case.block, args, case.dynamic_shared_bytes, lanes=lanes,
                  step_budget=20_000_000)


def _all_cases():
    return list(load_suite()) + list(load_cases(require_gpu_truth() / "cases.json"))


def test_lowered_kernels_match_the_originals_bit_for_bit():
    lowered, refused = [], []
    for case in _all_cases():
        kernel = module_for(case.ptx()).kernel(case.kernel)
        try:
            mk = lower(kernel)
        except UnsupportedPTX as e:
            assert all("is not supported by the compiled machine yet" in p for p in e.problems)
            refused.append(case.name)
            continue
        assert all(_is_machine_form(ins) for ins in mk.instructions), case.name
        assert machine_problems(mk) == []
        a, b = _run(kernel, case), _run(mk, case)
        for x, y in zip(a.buffers, b.buffers):
            assert (x is None and y is None) or x.tobytes() == y.tobytes(), case.name
        lowered.append(case.name)
    # every kernel lowers (f32 and f64 arithmetic, float atomics: softfloat.py)
    assert refused == [] and len(lowered) >= 136, (len(lowered), refused)


def test_every_form_the_interpreter_runs_is_a_machine_form_or_expanded():
    # nothing the validator accepts is left to refusal: f32 and f64 arithmetic, conversions and
    # float atomics included (machine_problems stays the guard for forms added later)
    left = []
    for name in SUPPORTED:
        opcode, modifiers, types = split_opcode(name)
        ins = Instruction(opcode, modifiers, types, None, [], 0, name)
        if not _is_machine_form(ins) and _expansion(ins) is None:
            left.append(name)
    assert left == []


def test_a_form_without_an_expansion_is_refused_by_name_and_line(monkeypatch):
    L = importlib.import_module("gpu_layers.machine.lower")
    monkeypatch.setitem(L._EXPANSIONS, "dbin", None)      # as if f64 add had no expansion
    body = ("\tmov.f64 \t%fd1, 0d3FF0000000000000;\n\tadd.f64 \t%fd2, %fd1, %fd1;\n"
            "\tdiv.rn.f32 \t%f3, 0f3F800000, 0f40000000;\n\tsub.rn.f64 \t%fd4, %fd2, %fd1;\n\tret;\n")
    text = kernel_ptx(body, decls="\t.reg .f64 \t%fd<8>;\n")
    with pytest.raises(UnsupportedPTX) as ei:
        lower(parse_ptx(text).kernel())
    lines = text.splitlines()
    want = [f"line {i + 1}: `{n}` is not supported by the compiled machine yet"
            for i, ln in enumerate(lines) for n in ("add.f64", "sub.rn.f64") if f"\t{n} " in ln]
    assert ei.value.problems == want


OUT = """\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r100, %tid.x;
\tmul.wide.u32 \t%rd2, %r100, 4;
\tadd.s64 \t%rd9, %rd1, %rd2;
"""


def _lowered(body):
    return lower(parse_ptx(kernel_ptx(OUT + body + "\tret;\n")).kernel())


def test_multiplies_and_divisions_are_machine_steps_and_keep_poison():
    """A 32-bit multiply is 16 two-bit machine multiply steps (mquad; only its low 32 bits are
    kept) and a 32-bit division 32 divide steps (dstep), in loops of STEP_UNROLL, not a
    shift-and-add loop; an undefined operand makes the product and the quotient undefined (mquad
    and dstep read both operands at every step), as in the original."""
    body = ("\tld.global.u32 \t%r1, [%rd9];\n\tmul.lo.u32 \t%r3, %r1, %r7;\n"
            "\tdiv.u32 \t%r4, %r1, %r8;\n")
    k = _lowered(body + "\tst.global.u32 \t[%rd9], %r3;\n")
    names = [ins.name for ins in k.instructions]
    assert names.count("mquad.b64") == STEP_UNROLL and names.count("dstep.b64") == STEP_UNROLL
    assert "mstep.b64" not in names
    assert k.machine and "mul.lo.u32" not in names and "div.u32" not in names
    for dst in ("%r3", "%r4"):                   # %r7, %r8 never written: undefined operands
        with pytest.raises(UninitializedRead, match=r"thread \(0,0,0\)"):
            launch(_lowered(body + f"\tst.global.u32 \t[%rd9], {dst};\n"), 1, 32, [np.ones(32, np.int32)])


@pytest.mark.parametrize("called", [False, True])
def test_division_by_zero_stays_undefined_after_lowering(called):
    # called: the divisions call routines (lower's call_sequences), which prove nothing of their
    # operands and carry poison through their argument registers
    body = "\tsub.u32 \t%r2, %r100, 3;\n\tdiv.s32 \t%r3, 100, %r2;\n\trem.u32 \t%r4, 7, %r2;\n"
    out = np.zeros(32, np.int32)

    def lowered(text):
        k = lower(parse_ptx(kernel_ptx(OUT + text + "\tret;\n")).kernel(), call_sequences=called)
        assert len(k.calls) == (2 if called else 0)
        return k
    res = launch(lowered(body + "\tst.global.u32 \t[%rd9], 1;\n"), 1, 32, [out])
    assert res.buffers[0].tolist() == [1] * 32                  # unused: fine
    for dst in ("%r3", "%r4"):
        with pytest.raises(UninitializedRead, match=r"thread \(3,0,0\)"):
            launch(lowered(body + f"\tst.global.u32 \t[%rd9], {dst};\n"), 1, 32, [out])


def test_guarded_expansions_change_nothing_where_the_guard_is_false():
    body = """\tmov.u32 \t%r3, 77;
\tsetp.lt.u32 \t%p1, %r100, 10;
\t@%p1 mul.lo.s32 \t%r3, %r100, %r100;
\t@!%p1 div.u32 \t%r3, %r50, %r100;
\tst.global.u32 \t[%rd9], %r3;
"""
    # lanes >= 10 divide an undefined value: poison, stored -> an error; so guard that too
    body = body.replace("\t@!%p1 div.u32 \t%r3, %r50, %r100;\n", "")
    res = launch(_lowered(body), 1, 32, [np.zeros(32, np.int32)])
    assert res.buffers[0].tolist() == [t * t for t in range(10)] + [77] * 22


def test_lowered_code_has_no_data_dependent_branches():
    # a multiply of an undefined value must stay poison, not become a branch on poison
    body = "\tmul.lo.s32 \t%r3, %r50, %r100;\n\tmov.u32 \t%r4, 5;\n\tst.global.u32 \t[%rd9], %r4;\n"
    res = launch(_lowered(body), 1, 32, [np.zeros(32, np.int32)])
    assert res.buffers[0].tolist() == [5] * 32


def _imm_sources(ins):
    from gpu_layers.ptx.ir import Imm, Vec
    return sum(isinstance(o, Imm) for o in ins.operands) + sum(
        isinstance(e, Imm) for o in ins.operands if isinstance(o, Vec) for e in o.elems)


def test_every_machine_instruction_has_at_most_one_immediate():
    # the datapath has one immediate field per instruction (gpu_layers/machine/datapath_program.py);
    # a barrier's thread count is the only exception the lowering keeps (none occur here)
    seen = 0
    for case in _all_cases():
        try:
            mk = lower(module_for(case.ptx()).kernel(case.kernel))
        except UnsupportedPTX:
            continue
        seen += 1
        bad = [str(i) for i in mk.instructions if _imm_sources(i) > 1]
        assert bad == [], (case.name, bad[:5])
    assert seen >= 100


def test_two_immediates_move_into_a_temporary_and_keep_the_guard():
    body = """\tmov.u32 \t%r3, 77;
\tsetp.lt.u32 \t%p1, %r100, 10;
\tsetp.lt.u32 \t%p2, %r100, 5;
\t@%p1 selp.b32 \t%r3, 1, -2, %p2;
\tadd.u32 \t%r4, 30212, 5;
\tadd.u32 \t%r3, %r3, %r4;
\tst.global.u32 \t[%rd9], %r3;
"""
    mk = _lowered(body)
    sel = [i for i in mk.instructions if i.opcode == "selp"]
    assert len(sel) == 1 and _imm_sources(sel[0]) == 1 and str(sel[0].guard) == "@%p1"
    k = mk.instructions.index(sel[0])
    mov = mk.instructions[k - 1]
    assert mov.name == "mov.b32" and mov.guard is None and str(mov.operands[1]) == "1"
    assert str(sel[0].operands[1]) == str(mov.operands[0]) and str(sel[0].operands[2]) == "-2"
    res = launch(mk, 1, 32, [np.zeros(32, np.int32)])
    want = [(1 if t < 5 else -2) + 30217 if t < 10 else 77 + 30217 for t in range(32)]
    assert res.buffers[0].tolist() == want


# ------------------------------------------------------------------------ the token protocol

from gpu_layers.machine.protocol import decode_outputs, thread_instructions, trace_tokens  # noqa: E402

PROTOCOL_CASES = ("vec_add_i32", "warp_reduce", "reduce_sum_i32", "divergence", "spin_lock_outside",
                  "last_positive", "atomic_ops")


@pytest.mark.parametrize("name", PROTOCOL_CASES)
def test_outputs_decode_from_the_token_stream_alone(name):
    case = next(c for c in _all_cases() if c.name == name)
    kernel = module_for(case.ptx()).kernel(case.kernel)
    mk = lower(kernel)
    ref = _run(kernel, case)
    outs = [i for i, a in enumerate(case.args) if a.is_buffer]

    def args():
        return [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in case.args]
    tr = trace_tokens(mk, case.grid, case.block, args(), case.dynamic_shared_bytes, outputs=outs)
    dec = decode_outputs(tr.tokens, {i: case.args[i].data for i in outs})
    for i in outs:
        assert dec[i].tobytes() == ref.buffers[i].tobytes(), (name, case.args[i].name)
    # the stream is a function of the launch: the same tokens every time
    again = trace_tokens(mk, case.grid, case.block, args(), case.dynamic_shared_bytes, outputs=outs)
    assert again.tokens == tr.tokens
    kinds = {t[0] for t in tr.tokens}
    assert {"wi", "g", "dump", "halt"} <= kinds and tr.tokens[-1] == ("halt",)
    assert all(0 <= t[1] < 4 and 0 <= t[2] < 8 and 0 < t[3] < 1 << 11 for t in tr.tokens if t[0] == "d")
    assert all(0 <= t[1] < 1 << 16 for t in tr.tokens if t[0] == "x")
    assert thread_instructions(kernel, case.grid, case.block, args()) > 0


def _group_values(tokens):
    """Per <g>, in order: (K, L, U, S, {executed lane: its value}), S = 2 taking the issue's previous
    group's value of the same lane (None where that group did not execute the lane), a lane copy
    (<d J 7 I>) lane I's."""
    from gpu_layers.machine.protocol import COPY, FILL, PAYLOAD, lane_masks

    FILL_ONES = (1 << 32) - (1 << PAYLOAD)         # a fill's bits 11..31
    out, prev = [], {}
    for t in tokens + [("halt",)]:
        if t[0] in ("wi", "g", "halt") and out and out[-1][5] is not None:
            k, st, u, s, ch, _ = out[-1]
            ex = lane_masks(st)[1]
            lanes = [j for j in range(4) if (ex >> j) & 1]
            src = {j: ch.get((j, COPY), j) for j in lanes}
            vals = {j: prev.get(j) if s == 2 else
                    sum((x | FILL_ONES) if c == FILL else x << (PAYLOAD * c)
                        for (jj, c), x in ch.items() if jj == (0 if s else src[j]) and c != COPY) for j in lanes}
            out[-1] = (k, st, u, s, vals, None)
            prev = vals
        if t[0] == "wi":
            prev = {}
        elif t[0] == "g":
            out.append((t[1], t[2], t[3], t[4], {}, True))
        elif t[0] == "d":
            out[-1][4][(t[1], t[2])] = t[3]
    return [g[:5] for g in out]


LANE_COPIES = ("warp_reduce", "atomic_ops")      # cases whose stream has lane copies (measured: 82, 42)


@pytest.mark.parametrize("name", ["reduce_sum_i32", "warp_reduce", "divergence", "atomic_ops"])
def test_groups_that_copy_the_previous_group_carry_the_same_values(name):
    """trace_tokens(copies=True, fills=True, lane_copies=True) (the machine core's stream)
    against the plain stream: the same <g> tokens but S, each group's lanes holding the same
    values, S = 2 only where its rule holds (a later group of the issue, an ALU instruction
    writing data, no undefined lane here or in the previous group, executed lanes a subset of the
    previous group's), never on a memory instruction, fills (<d J 6 X>) only for ALU results in
    [2^32 - 256, 2^32), lane copies (<d J 7 I>) only in an S = 0 group of an ALU instruction, from
    an earlier executed defined lane that sent its own value, for a nonzero value, and some groups
    copy (fewer <d>)."""
    from gpu_layers.machine.protocol import is_memory, lane_masks

    case = next(c for c in _all_cases() if c.name == name)
    mk = lower(module_for(case.ptx()).kernel(case.kernel), one_warp=True)

    def args():
        return [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in case.args]
    plain = trace_tokens(mk, case.grid, case.block, args(), case.dynamic_shared_bytes).tokens
    copy = trace_tokens(mk, case.grid, case.block, args(), case.dynamic_shared_bytes, copies=True,
                        fills=True, lane_copies=True).tokens
    strip = [t for t in copy if t[0] not in ("g", "d")]
    assert strip == [t for t in plain if t[0] not in ("g", "d")]
    gp, gc = _group_values(plain), _group_values(copy)
    assert [g[:3] + (g[4],) for g in gp] == [g[:3] + (g[4],) for g in gc]
    pcs = [t[2] for t in copy if t[0] == "wi"]
    issue, prev, copied, fills, lane_copies, own = -1, None, 0, 0, 0, set()
    for t in copy:
        if t[0] == "wi":
            issue, prev = issue + 1, None
        elif t[0] == "g":
            if t[4] == 2:
                ins = mk.instructions[pcs[issue]]
                ex = lane_masks(t[2])[1]
                assert prev is not None and not t[3] and not prev[3] and not ex & ~lane_masks(prev[2])[1]
                assert not is_memory(ins) and ins.opcode not in ("setp", "bra", "st")
                copied += 1
            prev, own = t, set()
        elif t[0] == "d" and t[2] == 6:
            assert 0x700 <= t[3] < 0x800 and not is_memory(mk.instructions[pcs[issue]])
            fills += 1
            own.add(t[1])
        elif t[0] == "d" and t[2] == 7:
            ex, u = lane_masks(prev[2])[1], prev[3]
            assert prev[4] == 0 and t[3] < t[1] and (ex >> t[3]) & 1 and not (u >> t[3]) & 1 and not (u >> t[1]) & 1
            assert t[3] in own and t[1] not in own and not is_memory(mk.instructions[pcs[issue]])
            lane_copies += 1
        elif t[0] == "d":
            own.add(t[1])
    assert copied > 0 and sum(t[0] == "d" for t in copy) < sum(t[0] == "d" for t in plain)
    assert fills > 0 or name != "divergence"
    assert lane_copies > 0 or name not in LANE_COPIES


def test_group_tokens_follow_the_lane_count():
    case = next(c for c in _all_cases() if c.name == "vec_add_i32")
    mk = lower(module_for(case.ptx()).kernel(case.kernel))

    def args():
        return [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in case.args]
    groups = {n: sum(t[0] == "g" for t in trace_tokens(mk, case.grid, case.block, args(), lanes=n).tokens)
              for n in (1, 4, 32)}
    steps = sum(t[0] == "wi" for t in trace_tokens(mk, case.grid, case.block, args(), lanes=32).tokens)
    assert groups[32] == steps and groups[1] >= groups[4] >= groups[32]


def test_register_pressure_counts_live_values_not_declarations():
    from gpu_layers.machine.liveness import pressure

    body = """\tmov.u32 \t%r1, 1;
\tmov.u32 \t%r2, 2;
\tadd.s32 \t%r3, %r1, %r2;
\tmov.u32 \t%r4, 4;
\tadd.s32 \t%r5, %r3, %r4;
\tsetp.lt.u32 \t%p1, %r100, 3;
\t@%p1 mov.u32 \t%r5, 9;
\tst.global.u32 \t[%rd9], %r5;
"""
    p = pressure(parse_ptx(kernel_ptx(OUT + body + "\tret;\n")).kernel())
    # the most at once: %rd9 (64 bits) with %r100, %r1 and %r2, not the 320 declared registers
    assert p.declared == 320 and p.max_regs == 4 and p.max_bits == 64 + 3 * 32


def test_a_selp_of_two_constants_lowers_to_a_move_and_a_selp():
    """The datapath has one immediate per instruction: selp of two different constants (an f64
    pair in f32_promote_f64) becomes a move of the first into a temporary, then the selp; the
    guard stays on the selp. Bit for bit on the interpreter."""
    import numpy as np

    from gpu_layers.interp import launch
    from gpu_layers.interp.snippets import kernel_ptx
    from gpu_layers.ptx.parser import parse_ptx

    body = """\tmov.u32 \t%r1, %tid.x;
\tsetp.lt.u32 \t%p1, %r1, 2;
\tsetp.lt.u32 \t%p2, %r1, 3;
\tselp.f64 \t%fd1, 0dBFD3333333333333, 0d3E112E0BE826D695, %p1;
\tmov.u32 \t%r2, 1;
\t@%p2 selp.b32 \t%r2, 7, -9, %p1;
\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmul.wide.u32 \t%rd2, %r1, 16;
\tadd.s64 \t%rd3, %rd1, %rd2;
\tst.global.f64 \t[%rd3], %fd1;
\tst.global.u32 \t[%rd3+8], %r2;
\tret;
"""
    k = parse_ptx(kernel_ptx(body, decls="\t.reg .f64 \t%fd<4>;\n")).kernel()
    mk = lower(k)
    sel = [i for i in mk.instructions if i.opcode == "selp"]
    assert all(not (isinstance(i.operands[1], (Imm, FImm)) and isinstance(i.operands[2], (Imm, FImm)))
               for i in sel) and len(sel) == 2
    assert str(sel[1].guard) == "@%p2"
    out = np.zeros(16, np.uint32)
    want = launch(k, 1, 4, [out]).buffers[0]
    assert launch(mk, 1, 4, [out]).buffers[0].tobytes() == want.tobytes()


_EDGES32 = [0, 1, 2, 3, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x10000, 0xFFFF, 12345, 0x9E3779B9]


def _pair_head(b_offset=256) -> list:
    """The start of a kernel(out, ina) over operand pairs: thread t's a in %rd44 (ina[t]), its b in
    %rd46 (b_offset bytes further), the address of out[t] in %rd48."""
    return ["\tld.param.u64 \t%rd40, [out];", "\tcvta.to.global.u64 \t%rd40, %rd40;",
            "\tld.param.u64 \t%rd41, [ina];", "\tcvta.to.global.u64 \t%rd41, %rd41;",
            "\tmov.u32 \t%r100, %tid.x;", "\tmul.wide.u32 \t%rd42, %r100, 8;",
            "\tadd.s64 \t%rd43, %rd41, %rd42;", "\tld.global.u64 \t%rd44, [%rd43];",
            f"\tadd.s64 \t%rd45, %rd43, {b_offset};", "\tld.global.u64 \t%rd46, [%rd45];",
            "\tadd.s64 \t%rd48, %rd40, %rd42;"]


@pytest.mark.parametrize("ty", ["u16", "s16", "u32", "s32", "u64", "s64"])
def test_multiplies_of_every_form_match_the_interpreter(ty):
    """mul and mad .lo / .hi / .wide on edge and random operands (the loop over the multiplier's
    bits, the wide form's signed correction, constant multipliers as shifts, adds and
    subtracts), lowered == original."""
    w = int(ty[1:])
    rng = np.random.default_rng(w + (ty[0] == "s"))
    vals = [v & ((1 << w) - 1) for v in _EDGES32] + [int(x) for x in rng.integers(0, 1 << w, 32, dtype=np.uint64)]
    n = 32
    a = np.array(vals[:n], dtype=np.uint64)
    b = np.array((vals[n // 2:] + vals)[:n][::-1], dtype=np.uint64)
    r, rd = {16: "%rs", 32: "%r", 64: "%rd"}[w], {16: "%r", 32: "%rd", 64: None}[w]
    body = _pair_head()
    if w == 64:
        body += ["\tmov.b64 \t%rd1, %rd44;", "\tmov.b64 \t%rd2, %rd46;"]
    else:
        body += [f"\tcvt.u{w}.u64 \t{r}1, %rd44;", f"\tcvt.u{w}.u64 \t{r}2, %rd46;"]
    forms = [f"mul.lo.{ty} \t{r}3, {r}1, {r}2", f"mul.hi.{ty} \t{r}3, {r}1, {r}2",
             f"mad.lo.{ty} \t{r}3, {r}1, {r}2, {r}1", f"mad.hi.{ty} \t{r}3, {r}1, {r}2, {r}2",
             f"mul.lo.{ty} \t{r}3, {r}1, 1000003", f"mul.hi.{ty} \t{r}3, {r}2, -7",
             # constants in non-adjacent form (a lone subtract; 1024 - 32 + 8; 256 - 1 with an
             # addend) and one kept as its bits (an alternating magic number)
             f"mul.lo.{ty} \t{r}3, {r}1, -1", f"mul.lo.{ty} \t{r}3, {r}2, 1000",
             f"mad.lo.{ty} \t{r}3, {r}1, 255, {r}2", f"mul.lo.{ty} \t{r}3, {r}1, 1717986919"]
    if rd:
        forms += [f"mul.wide.{ty} \t{rd}3, {r}1, {r}2", f"mad.wide.{ty} \t{rd}3, {r}1, {r}2, {rd}3",
                  f"mul.wide.{ty} \t{rd}3, {r}1, -3"]
    wide = lambda f: ".wide." in f                                   # noqa: E731
    for k, f in enumerate(forms):
        dst = f"{rd}3" if wide(f) else f"{r}3"
        if "mad.wide" in f:
            body.append(f"\tmov.b{2 * w} \t{rd}3, 77;")
        body.append(f"\t{f};")
        bits = 2 * w if wide(f) else w
        if bits == 64:
            body.append(f"\tst.global.u64 \t[%rd48+{256 * k}], {dst};")
        else:
            body.append(f"\tcvt.u64.u{bits} \t%rd49, {dst};")
            body.append(f"\tst.global.u64 \t[%rd48+{256 * k}], %rd49;")
    body.append("\tret;")
    k = parse_ptx(kernel_ptx("\n".join(body) + "\n", params=[("out", "u64"), ("ina", "u64")])).kernel()
    inputs = np.concatenate([a, b])
    want = launch(k, 1, n, [np.zeros(32 * len(forms), np.uint64), inputs.copy()]).buffers[0]
    got = launch(lower(k), 1, n, [np.zeros(32 * len(forms), np.uint64), inputs.copy()]).buffers[0]
    assert want.tobytes() == got.tobytes()


@pytest.mark.parametrize("ty", ["u16", "s16", "u32", "s32", "u64", "s64"])
def test_divisions_of_every_width_match_the_interpreter(ty):
    """div and rem on edge and random operands (divisors with the top bit set: the remainder's
    overflow), lowered == original (division by zero and MIN / -1: test above)."""
    w = int(ty[1:])
    M = (1 << w) - 1
    rng = np.random.default_rng(100 + w + (ty[0] == "s"))
    vals = [v & M for v in _EDGES32] + [int(x) for x in rng.integers(0, 1 << w, 40, dtype=np.uint64)]
    n = 32
    a = vals[:n]
    b = (vals[n // 2:] + vals)[:n][::-1]
    b[3], b[4] = 1 << (w - 1), M - 5                   # top bits set
    b = [1 if y == 0 else y for y in b]
    if ty[0] == "s":
        b = [2 if (x == 1 << (w - 1) and y == M) else y for x, y in zip(a, b)]
    r = {16: "%rs", 32: "%r", 64: "%rd"}[w]
    body = _pair_head()
    if w == 64:
        body += ["\tmov.b64 \t%rd1, %rd44;", "\tmov.b64 \t%rd2, %rd46;"]
    else:
        body += [f"\tcvt.u{w}.u64 \t{r}1, %rd44;", f"\tcvt.u{w}.u64 \t{r}2, %rd46;"]
    forms = [f"div.{ty} \t{r}3, {r}1, {r}2", f"rem.{ty} \t{r}3, {r}1, {r}2", f"div.{ty} \t{r}3, {r}1, 7"]
    for k, f in enumerate(forms):
        body.append(f"\t{f};")
        if w == 64:
            body.append(f"\tst.global.u64 \t[%rd48+{256 * k}], {r}3;")
        else:
            body += [f"\tcvt.u64.u{w} \t%rd49, {r}3;", f"\tst.global.u64 \t[%rd48+{256 * k}], %rd49;"]
    body.append("\tret;")
    k = parse_ptx(kernel_ptx("\n".join(body) + "\n", params=[("out", "u64"), ("ina", "u64")])).kernel()
    inputs = np.array(a + b, dtype=np.uint64)
    want = launch(k, 1, n, [np.zeros(32 * len(forms), np.uint64), inputs.copy()]).buffers[0]
    got = launch(lower(k), 1, n, [np.zeros(32 * len(forms), np.uint64), inputs.copy()]).buffers[0]
    assert want.tobytes() == got.tobytes()
    if w == 32:                          # the smallest lowering: one routine per form, called
        called = lower(k, call_sequences=True)
        assert len(called.calls) == len(forms) and len(called.returns) >= 2
        got = launch(called, 1, n, [np.zeros(32 * len(forms), np.uint64), inputs.copy()]).buffers[0]
        assert want.tobytes() == got.tobytes()


def test_permutes_with_constant_selectors_match_the_interpreter():
    """prmt with a constant selector (bytes moved by shifts and masks, sign spreads, constant
    sources) on edge and random operands, lowered == original, each in a few steps; a source the
    selector takes no byte of still makes the result undefined (prmt's poison is either source's)."""
    rng = np.random.default_rng(7)
    n = 32
    vals = _EDGES32 + [int(x) for x in rng.integers(0, 1 << 32, 40, dtype=np.uint64)]
    a, b = vals[:n], (vals[n // 2:] + vals)[:n][::-1]
    sels = [0x3210, 0x7654, 0x0123, 0x7604, 0x7054, 0x0654, 0x9898, 0x1010, 0xBA98, 0xF1E4, 0x4444, 0x3333]
    sels += [int(x) for x in rng.integers(0, 1 << 16, 12)]
    body = _pair_head() + ["\tcvt.u32.u64 \t%r1, %rd44;", "\tcvt.u32.u64 \t%r2, %rd46;"]
    forms = [f"prmt.b32 \t%r3, %r1, %r2, {c}" for c in sels]
    forms += ["prmt.b32 \t%r3, %r1, 0x80FF0102, 0x6547", "prmt.b32 \t%r3, 0x7F00FF80, %r2, 0xC9C9"]
    for k, f in enumerate(forms):
        body += [f"\t{f};", "\tcvt.u64.u32 \t%rd49, %r3;", f"\tst.global.u64 \t[%rd48+{256 * k}], %rd49;"]
    body.append("\tret;")
    k = parse_ptx(kernel_ptx("\n".join(body) + "\n", params=[("out", "u64"), ("ina", "u64")])).kernel()
    mk = lower(k)
    assert len(mk.instructions) < len(k.instructions) + 8 * len(forms)
    inputs = np.array(a + b, dtype=np.uint64)
    want = launch(k, 1, n, [np.zeros(32 * len(forms), np.uint64), inputs.copy()]).buffers[0]
    got = launch(mk, 1, n, [np.zeros(32 * len(forms), np.uint64), inputs.copy()]).buffers[0]
    assert want.tobytes() == got.tobytes()
    for sel in (0x3210, 0x1098):                 # %r7 never written: b undefined, a's bytes only
        bad = "\tprmt.b32 \t%r3, %r100, %r7, " + f"{sel};\n\tst.global.u32 \t[%rd9], %r3;\n"
        with pytest.raises(UninitializedRead, match=r"thread \(0,0,0\)"):
            launch(_lowered(bad), 1, 32, [np.ones(32, np.int32)])


@pytest.mark.parametrize("straight", [False, True])
def test_divisions_skip_the_steps_that_cannot_subtract(straight, monkeypatch):
    """Division of operands proven defined skips its first 16, 24 or 32 divide steps where they
    could only shift (lower._dsteps): dividends and divisors of every pair of bit lengths give
    each case, in counted loops and written out (straight_steps, the division inside a loop),
    for u32 / s32 and u64 by a divisor below 2^32; the results equal the original's, with fewer
    lane issues than the same lowering without the skip (each lane group shares its operands:
    lanes that skip differently diverge, and then issue apart)."""
    rng = np.random.default_rng(11)
    a, b = [], []
    for la in range(0, 33, 4):
        for lb in range(1, 33, 5):
            a.append(int(rng.integers(0, 1 << la)) | (1 << la >> 1))
            b.append(int(rng.integers(1, 1 << lb)) | (1 << lb >> 1))
    a, b = [x for x in a for _ in range(4)], [y for y in b for _ in range(4)]     # a pair per group
    n = len(a)
    body = _pair_head(8 * n) + ["\tcvt.u32.u64 \t%r1, %rd44;", "\tcvt.u32.u64 \t%r2, %rd46;",
                                "\tshl.b64 \t%rd1, %rd44, 29;", "\tmov.u32 \t%r90, 0;", "$L_top:"]
    forms = ["div.u32 \t%r3, %r1, %r2", "rem.u32 \t%r3, %r1, %r2", "div.s32 \t%r3, %r1, %r2",
             "div.u64 \t%rd3, %rd1, %rd46", "rem.u64 \t%rd3, %rd1, %rd46"]
    for k, f in enumerate(forms):
        body.append(f"\t{f};")
        if "64" in f:
            body.append(f"\tst.global.u64 \t[%rd48+{8 * n * k}], %rd3;")
        else:
            body += ["\tcvt.u64.u32 \t%rd49, %r3;", f"\tst.global.u64 \t[%rd48+{8 * n * k}], %rd49;"]
    body += ["\tadd.u32 \t%r90, %r90, 1;", "\tsetp.lt.u32 \t%p9, %r90, 2;", "\t@%p9 bra $L_top;", "\tret;"]
    k = parse_ptx(kernel_ptx("\n".join(body) + "\n", params=[("out", "u64"), ("ina", "u64")])).kernel()
    inputs = np.array(a + b, dtype=np.uint64)
    args = lambda: [np.zeros(n * len(forms), np.uint64), inputs.copy()]     # noqa: E731
    want = launch(k, 1, n, args()).buffers[0]
    res = launch(lower(k, straight_steps=straight), 1, n, args())
    assert want.tobytes() == res.buffers[0].tobytes()
    lowering = importlib.import_module("gpu_layers.machine.lower")
    dsteps = lowering._dsteps
    monkeypatch.setattr(lowering, "_dsteps", lambda em, rx, bm, skip=False: dsteps(em, rx, bm))
    plain = launch(lower(k, straight_steps=straight), 1, n, args())
    assert want.tobytes() == plain.buffers[0].tobytes()
    assert res.lane_issues < 0.8 * plain.lane_issues
