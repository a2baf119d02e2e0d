"""The float routines' fast entries (gpu_layers/machine/fast_paths.py) and the definedness analysis
that allows them (gpu_layers/machine/definedness.py): the analysis proves only what holds, the
fast entries give the interpreter's bits on normal, zero, tie, cancelling and overflowing
operands (falling back where they must), they are what normal operands run (the step counts),
and a site whose operands are not proven defined keeps the general entry."""
import numpy as np
import pytest

from gpu_layers.errors import UninitializedRead
from gpu_layers.interp import launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import lower
from gpu_layers.machine.definedness import defined
from gpu_layers.machine.float_forms import compare, kernel_for, normal_operands, operands, operands64
from gpu_layers.ptx.parser import parse_ptx


def _at(k, text):
    """Index of the instruction whose text starts with `text`."""
    return next(i for i, ins in enumerate(k.instructions) if str(ins).startswith(text))


def test_definedness_proves_what_holds_on_every_path():
    body = """\tld.param.u64 \t%rd1, [out];
\tmov.u32 \t%r100, %tid.x;
\tld.global.f32 \t%f1, [%rd1];
\tld.shared.f32 \t%f2, [sh];
\tadd.f32 \t%f3, %f1, %f5;
\tsetp.lt.u32 \t%p1, %r100, 2;
\t@%p1 mov.f32 \t%f4, 0f3F800000;
\tmov.f32 \t%f6, 0f00000000;
\t@%p1 mov.f32 \t%f6, %f1;
\tdiv.u32 \t%r2, %r100, 3;
\tmov.u32 \t%r3, 0;
$L1:
\tadd.f32 \t%f6, %f6, %f1;
\tadd.u32 \t%r3, %r3, 1;
\t@%p1 bra \t$L2;
\tmov.f32 \t%f7, %f1;
$L2:
\tsetp.lt.u32 \t%p2, %r3, 4;
\t@%p2 bra \t$L1;
\tst.global.f32 \t[%rd1], %f6;
\tret;
"""
    k = parse_ptx(kernel_ptx(body, decls="\t.shared .align 4 .b8 sh[4];\n")).kernel()
    d = defined(k)
    end = d[_at(k, "st.global")]
    assert {"%rd1", "%r100", "%f1", "%f6", "%p1", "%r3", "%p2"} <= end
    # from shared memory, never written, guarded over nothing, a division, one path only
    assert not end & {"%f2", "%f3", "%f5", "%f4", "%r2", "%f7"}
    assert "%f6" in d[_at(k, "add.f32 %f6")]           # through the loop's back edge too
    assert d[0] == frozenset()


FAST = ["add.rn.f32", "sub.rn.f32", "mul.rn.f32", "fma.rn.f32", "add.rn.f64", "sub.rn.f64",
        "mul.rn.f64", "add.rz.f32", "sub.rm.f32", "mul.rp.f32", "fma.rm.f32", "fma.rz.f32",
        "add.rp.f64", "sub.rz.f64", "mul.rm.f64", "mul.rz.f64", "div.rn.f32", "div.rm.f32",
        "rcp.rn.f32", "fma.rn.f64", "fma.rp.f64", "sqrt.rn.f32", "sqrt.rn.f64", "sqrt.rz.f64",
        "sqrt.rp.f64", "div.rn.f64", "div.rm.f64", "div.rz.f64", "rcp.rn.f64", "rcp.rp.f64"]


@pytest.mark.parametrize("form", FAST)
def test_fast_entries_match_the_interpreter_bit_for_bit(form):
    A, B, C = normal_operands(3000, np.random.default_rng(11), form.endswith("f64"))
    want, got, _ = compare(form, A, B, C)
    wrong = np.nonzero(want != got)[0]
    assert wrong.size == 0, [(hex(A[i % A.size]), hex(B[i % A.size]), hex(C[i % A.size]), hex(want[i]),
                              hex(got[i])) for i in wrong[:5]]


# steps per thread when every operand is normal: the general routine's are 135 (f32 add),
# 192 (mul), 196 (fma), 217 (div), 244 (f64 add), 530 (f64 mul), 530 (f64 fma) and 387 (f64 div)
@pytest.mark.parametrize("form,most", [("add.rn.f32", 70), ("mul.rn.f32", 80), ("fma.rn.f32", 130),
                                       ("add.rn.f64", 75), ("mul.rn.f64", 160), ("add.rm.f32", 75),
                                       ("fma.rp.f32", 135), ("mul.rz.f64", 165), ("div.rn.f32", 95),
                                       ("fma.rn.f64", 260), ("div.rn.f64", 165), ("div.rp.f64", 170)])
def test_normal_operands_take_the_fast_entry(form, most):
    vals = np.array([1.5, -3.25, 1e-3, 7e4, -2.5e-7, 0.1, 33.0, -1.75], np.float64)
    rng = np.random.default_rng(5)
    abc = [rng.permutation(np.tile(vals, 8)) for _ in range(3)]
    dt = np.float64 if form.endswith("f64") else np.float32
    A, B, C = (x.astype(dt).view(np.uint64 if dt is np.float64 else np.uint32) for x in abc)
    want, got, steps = compare(form, A, B, C)
    assert (want == got).all()
    assert steps <= most


@pytest.mark.parametrize("form,most", [("sqrt.rn.f32", 250), ("sqrt.rn.f64", 460), ("sqrt.rm.f64", 460)])
def test_positive_normal_roots_take_the_fast_entry(form, most):
    """The general root is 352 (binary32) and 665 (binary64) steps; a positive normal operand
    takes the fast entry (zeros, negatives and the rest fall back: the table above checks them)."""
    rng = np.random.default_rng(6)
    dt, ut = (np.float64, np.uint64) if form.endswith("f64") else (np.float32, np.uint32)
    A = np.exp(rng.uniform(-60, 60, 256)).astype(dt).view(ut)
    want, got, steps = compare(form, A, A, A)
    assert (want == got).all()
    assert steps <= most


def test_a_site_whose_operands_are_not_proven_defined_keeps_the_general_entry():
    def kernel(load):
        body = (f"\tld.param.u64 \t%rd1, [out];\n\t{load};\n\tadd.f32 \t%f2, %f1, %f1;\n"
                "\tst.global.f32 \t[%rd1], %f2;\n\tret;\n")
        return parse_ptx(kernel_ptx(body, decls="\t.shared .align 4 .b8 sh[4];\n")).kernel()
    shared = kernel("ld.shared.f32 \t%f1, [sh]")
    glob = kernel("ld.global.f32 \t%f1, [%rd1]")
    text = [[str(i) for i in lower(k, fast_floats=f).instructions] for k in (shared, glob) for f in (True, False)]
    assert text[0] == text[1]           # shared memory may be undefined: the general entry only
    assert len(text[2]) > len(text[3]) + 30      # global words are defined: the fast entry too
    out = np.full(1, 0x40000000, np.uint32)       # 2.0
    assert launch(lower(glob), 1, 1, [out.copy()]).buffers[0][0] == 0x40800000


DIV64 = """\tld.param.u64 \t%rd1, [out];
\tld.param.u64 \t%rd2, [inp];
\tmov.u32 \t%r1, %tid.x;
\tmul.wide.u32 \t%rd3, %r1, 16;
\tadd.s64 \t%rd4, %rd2, %rd3;
\tld.global.u64 \t%rd5, [%rd4];
\tld.global.u64 \t%rd6, [%rd4+8];
\tOP \t%rd7, %rd5, %rd6;
\tmul.wide.u32 \t%rd8, %r1, 8;
\tadd.s64 \t%rd9, %rd1, %rd8;
\tst.global.u64 \t[%rd9], %rd7;
\tret;
"""


def _div64(op, a, b):
    k = parse_ptx(kernel_ptx(DIV64.replace("OP", op), params=[("out", "u64"), ("inp", "u64")])).kernel()
    inp = np.stack([a, b], 1).ravel()
    res = [launch(x, 1, a.size, [np.zeros(a.size, np.uint64), inp.copy()]) for x in (k, lower(k))]
    return res[0].buffers[0], res[1].buffers[0], (res[1].lane_issues - res[0].lane_issues) * 4 / a.size


@pytest.mark.parametrize("op", ["rem.u64", "div.u64", "rem.s64", "div.s64"])
def test_64_bit_division_by_a_32_bit_divisor_branches_and_is_exact(op):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 1 << 64, 64, dtype=np.uint64)
    small = rng.integers(1, 1 << 32, 64, dtype=np.uint64)
    b = np.where(rng.integers(0, 2, 64).astype(bool), small, rng.integers(1, 1 << 64, 64, dtype=np.uint64))
    a[:6] = [2 ** 64 - 1, 2 ** 64 - 1, 2 ** 63, 5, 2 ** 62, 2 ** 64 - 7]       # and edge divisors
    b[:6] = [1, 0xFFFFFFFF, 0x100000000, 2 ** 64 - 1, 2 ** 64 - 1, 0x80000000]
    want, got, _ = _div64(op, a, b)
    assert (want == got).all(), [(hex(x), hex(y)) for x, y, w, g in zip(a, b, want, got) if w != g][:4]
    want, got, steps = _div64(op, a, small)           # every divisor below 2^32: the short path
    assert (want == got).all() and steps < 160        # (the general loop: about 500)
    big = rng.integers(1 << 32, 1 << 64, 64, dtype=np.uint64)
    big[:4] = [2 ** 32, 2 ** 63, 2 ** 63 + 1, 2 ** 64 - 1]
    want, got, steps = _div64(op, a, big)             # every divisor 2^32 or more: the quotient
    assert (want == got).all() and steps < 360        # is below 2^32, 32 turns (64: about 620)


def test_64_bit_division_by_zero_stays_undefined():
    a = np.arange(1, 5, dtype=np.uint64)
    b = np.array([3, 0, 5, 7], np.uint64)
    k = parse_ptx(kernel_ptx(DIV64.replace("OP", "rem.u64"), params=[("out", "u64"), ("inp", "u64")])).kernel()
    for x in (k, lower(k)):
        with pytest.raises(UninitializedRead, match=r"thread \(1,0,0\)"):
            launch(x, 1, 4, [np.zeros(4, np.uint64), np.stack([a, b], 1).ravel()])


def test_64_bit_division_branches_on_a_defined_divisor_whatever_the_dividend():
    # thread 1's dividend is never written: the short path computes an undefined result from it,
    # as the original instruction does; the branch itself reads only the divisor
    text = DIV64.replace("\tld.global.u64 \t%rd5, [%rd4];\n",
                         "\tsetp.ne.u32 \t%p1, %r1, 1;\n\t@%p1 ld.global.u64 \t%rd5, [%rd4];\n")
    k = parse_ptx(kernel_ptx(text.replace("OP", "rem.u64"), params=[("out", "u64"), ("inp", "u64")])).kernel()
    mk = lower(k)
    assert any(str(i).startswith("setp.gt.u64") and str(i).endswith("4294967295") for i in mk.instructions)
    inp = np.array([10, 3, 11, 4, 12, 5, 13, 6], np.uint64)
    for x in (k, mk):
        with pytest.raises(UninitializedRead, match=r"thread \(1,0,0\)"):
            launch(x, 1, 4, [np.zeros(4, np.uint64), inp.copy()])


@pytest.mark.parametrize("guarded", [False, True])
@pytest.mark.parametrize("form", FAST)
def test_fast_entries_written_out_at_their_sites_match_the_interpreter(form, guarded):
    """lower(inline_floats=True): the fast code at the site, the general entry called where it
    falls back; the lanes wait at the site's leaf of the return tree (a site every lane of the
    warp reaches) or go on at once (guarded: a site under a branch). Special operands mixed with
    normal ones in every lane group, so both ways run in one warp."""
    wide = form.endswith("f64")
    A, B, C = (operands64 if wide else operands)(600, np.random.default_rng(12))
    want, got, _ = compare(form, A, B, C, inline_floats=True, guarded=guarded)
    wrong = np.nonzero(want != got)[0]
    assert wrong.size == 0, [(hex(A[i % A.size]), hex(B[i % A.size]), hex(C[i % A.size]), hex(want[i]),
                              hex(got[i])) for i in wrong[:5]]


def test_written_out_fast_code_is_what_normal_operands_run():
    """Normal operands: the fast code at the site and the leaf's two branches; no argument
    copies, no return tree (the call's fast entry: argument copies, the branch, the tree)."""
    vals = np.array([1.5, -3.25, 1e-3, 7e4, -2.5e-7, 0.1, 33.0, -1.75], np.float32)
    rng = np.random.default_rng(5)
    A, B, C = (rng.permutation(np.tile(vals, 8)).view(np.uint32) for _ in range(3))
    for form in ("add.rn.f32", "mul.rn.f32", "fma.rn.f32"):
        w1, g1, called = compare(form, A, B, C)
        w2, g2, inline = compare(form, A, B, C, inline_floats=True)
        _, _, straight = compare(form, A, B, C, inline_floats=True, guarded=True)
        assert (w1 == g1).all() and (w2 == g2).all()
        assert inline < called and straight <= inline - 1, (form, called, inline, straight)


def test_return_tree_is_the_cheapest_for_the_weights():
    from gpu_layers.machine.softfloat import return_tree

    def steps(node, own, depth=0):          # {site: steps of its return}
        if isinstance(node, int):
            return {node: depth + 1}
        m, left, right = node
        out = steps(right, own, depth + 2)
        out.update({left: depth + 2} if isinstance(left, int) and left not in own else steps(left, own, depth + 2))
        return out

    def trees(lo, hi):
        if hi - lo == 1:
            yield lo
            return
        for m in range(lo + 1, hi):
            for left in trees(lo, m):
                for right in trees(m, hi):
                    yield (m, left, right)

    rng = np.random.default_rng(3)
    for n in range(1, 7):
        for _ in range(4):
            w = [int(x) for x in rng.choice([1, 16], n)]
            own = {int(x) for x in np.nonzero(rng.random(n) < 0.3)[0]}
            t = return_tree(w, own)
            s = steps(t, own)
            assert sorted(s) == list(range(n))
            cost = sum(w[k] * s[k] for k in s)
            assert cost == min(sum(w[k] * v for k, v in steps(x, own).items()) for x in trees(0, n))
    assert max(steps(return_tree([1] * 32), set()).values()) <= 2 * 5 + 1     # a binary search


def test_the_cores_lowering_of_every_float_case_matches_the_original():
    """core.machine_kernel takes the first of its lowerings that fits (fast entries written out
    at their sites first): every suite and gpu-truth case with float arithmetic, outputs bit for
    bit equal to the original kernel's."""
    from gpu_layers.errors import QwenGPUError
    from gpu_layers.interp import launch_args, module_for
    from gpu_layers.machine.core import machine_kernel
    from gpu_layers.suite import with_gpu_truth

    ran = 0
    for c in with_gpu_truth():
        k = module_for(c.ptx()).kernel(c.kernel)
        if not any(i.types and i.types[-1] in ("f32", "f64") and i.opcode in ("add", "sub", "mul", "fma",
                                                                           "div", "sqrt", "rcp", "atom", "red")
                   for i in k.instructions):
            continue
        try:
            mk, grid, block = machine_kernel(k, c.grid, c.block, launch_args(c))
        except QwenGPUError:
            continue
        a = launch(k, c.grid, c.block, launch_args(c), c.dynamic_shared_bytes).buffers
        b = launch(mk, grid, block, launch_args(c), c.dynamic_shared_bytes).buffers
        assert all(x is None or x.tobytes() == y.tobytes() for x, y in zip(a, b)), c.name
        ran += 1
    assert ran >= 25, ran


def test_a_sites_result_stays_live_through_its_return_branches():
    """liveness(through_returns=True), which a register-file slot shared across widths needs:
    at every return branch, what the calls returning there write and their site reads after
    is live (a written-out site returns there from its general entry's call and from its fast
    lanes' jump to the leaf, which writes nothing: the union, not the last call's)."""
    from gpu_layers.machine.liveness import liveness

    k = parse_ptx(kernel_for("fma.rn.f32")).kernel()
    for opts in ({}, {"inline_floats": True, "straight_steps": True}):
        mk = lower(k, **opts)
        lv = liveness(mk, through_returns=True)
        back_of = {c: r for c, _, r in mk.calls}
        checked = 0
        for c, body in lv.routines.items():
            for j in body & set(mk.returns):
                t = mk.labels[mk.instructions[j].operands[0].name]
                if t == back_of[c]:
                    assert lv.live_in[t] & lv.defs[c] <= lv.live_out[j], (opts, j)
                    checked += bool(lv.live_in[t] & lv.defs[c])
        assert checked >= 1
