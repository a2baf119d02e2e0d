"""gpu_layers.ptx.validator: unsupported constructs are refused by name, before anything runs."""
import numpy as np
import pytest

from gpu_layers.errors import ExecutionError, UnsupportedPTX
from gpu_layers.interp import launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.ptx import parse_ptx
from gpu_layers.ptx.ir import TYPE_BITS
from gpu_layers.ptx.validator import SUPPORTED, validate

UNSUPPORTED_BODY = """\
\tld.param.u64 \t%rd1, [out];
\ttex.2d.v4.f32.f32 \t{%f1, %f2, %f3, %f4}, [tex0, {%f5, %f6}];
\tdiv.approx.f32 \t%f1, %f2, %f3;
\tdiv.full.f32 \t%f1, %f2, %f3;
\trcp.approx.ftz.f64 \t%fd1, %fd2;
\tmma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 \t{%f1, %f2, %f3, %f4}, {%r1, %r2}, {%r3}, {%f1, %f2, %f3, %f4};
\tex2.approx.f32 \t%f1, %f2;
\tadd.ftz.f32 \t%f1, %f2, %f3;
\tadd.cc.u32 \t%r1, %r2, %r3;
\tcall.uni \thelper, (%r1);
\trsqrt.approx.f64 \t%fd1, %fd2;
\tmov.u32 \t%r1, %clock;
\tadd.s32 \t%r1, %r2, %r999;
\tret;
"""


def test_unsupported_constructs_are_all_listed_by_name_and_line():
    body = UNSUPPORTED_BODY
    text = kernel_ptx(body, decls="\t.reg .f64 \t%fd<4>;\n")
    text = text.replace(".visible .entry k(", ".func helper(.param .b32 x)\n{\n\tret;\n}\n.visible .entry k(")
    m = parse_ptx(text)
    with pytest.raises(UnsupportedPTX) as ei:
        validate(m, "k")
    probs = ei.value.problems
    joined = "\n".join(probs)
    lines = text.splitlines()

    def line_of(s):
        return next(i + 1 for i, l in enumerate(lines) if s in l)

    for needle, reason in [
        ("tex.2d.v4.f32.f32", "not supported"),
        ("div.approx.f32", "not bit-defined"),
        ("div.full.f32", "not bit-defined"),
        ("rcp.approx.ftz.f64", "not bit-defined"),
        ("mma.sync", "mma"),
        ("ex2.approx.f32", "not bit-defined"),
        ("add.ftz.f32", "ftz"),
        ("add.cc.u32", "carry"),
        ("call.uni", "call not supported"),
        ("rsqrt.approx.f64", "not bit-defined"),
    ]:
        ln = line_of(needle)
        hit = [p for p in probs if p.startswith(f"line {ln}:")]
        assert hit, f"{needle} not reported:\n{joined}"
        assert needle.split()[0] in hit[0] and reason in hit[0], hit[0]
    assert f"line {line_of('%clock')}:" in joined and "%clock" in joined
    assert "%r999" in joined and "not declared" in joined
    assert ".func/call not supported" in joined
    assert not any("registers of type .f64" in p for p in probs)      # f64 is supported


def test_validation_happens_before_execution():
    # the first instruction would store out of bounds; the last is unsupported: nothing runs
    body = ("\tld.param.u64 \t%rd1, [out];\n\tst.global.u32 \t[%rd1+4096], %r1;\n"
            "\tsqrt.approx.f32 \t%f1, %f2;\n\tret;\n")
    k = parse_ptx(kernel_ptx(body)).kernel()
    with pytest.raises(UnsupportedPTX) as ei:
        launch(k, 1, 1, [np.zeros(4, np.int32)])
    assert "sqrt.approx.f32" in str(ei.value)


def test_gpu_truth_kernels_validate(tmp_path):
    from conftest import require_gpu_truth

    files = sorted(require_gpu_truth().glob("*.ptx"))
    for f in files:
        validate(parse_ptx(f.read_text()))


def test_barrier_other_than_zero_is_refused():
    with pytest.raises(UnsupportedPTX, match="barrier 0"):
        validate(parse_ptx(kernel_ptx("\tbar.sync \t1;\n\tret;\n")))


def test_module_level_global_is_refused():
    text = kernel_ptx("\tmov.u64 \t%rd1, g;\n\tret;\n", module_decls=".global .align 4 .b8 g[16];\n")
    with pytest.raises(UnsupportedPTX, match="module-level .global"):
        validate(parse_ptx(text))


# --------------------------------------------------------------------------------------------
# The table and the interpreter agree: every supported form decodes and runs.

_REG = {1: "%p", 8: "%rs", 16: "%rs", 32: "%r", 64: "%rd"}


def _dreg(bits, t, i):
    if t == "f32" and bits == 32:
        return f"%f{i}"
    return f"{_REG[bits]}{i}"


def _synth(name, form):
    """One instance of `name` with operands matching its signature, plus the setup it needs."""
    parts = name.split(".")
    types = [p for p in parts[1:] if p in TYPE_BITS]
    mods = [p for p in parts[1:] if p not in TYPE_BITS]
    t = types[0] if types else "b32"
    w = TYPE_BITS[t]
    op = parts[0]
    if op == "cvt":
        dbits = TYPE_BITS[types[0]]
    elif "wide" in mods:
        dbits = 2 * w
    elif op in ("popc", "clz", "bfind"):
        dbits = 32
    elif op == "vote" and "ballot" not in mods:
        dbits = 1
    else:
        dbits = w
    dbits = max(dbits, 16) if dbits > 1 else 1
    nvec = 4 if "v4" in mods else 2 if "v2" in mods else 1
    space = next((m for m in mods if m in ("param", "global", "shared", "local")), "")
    if space == "shared":
        addr = "[sh]"
    elif space == "local":
        addr = "[loc]"
    elif space == "param":
        addr = "[out]"
    else:
        addr = "[%rd9]"      # a global buffer (generic or .global)
    ops = []
    for s in [s for s in form.sig.split(",") if s]:
        if s == "d":
            ops.append(_dreg(dbits, types[0] if op == "cvt" else t, 1))
        elif s == "q":
            ops.append("%p1")
        elif s == "s":
            ops.append("3" if op not in ("shfl", "vote") else "-1")
        elif s == "p":
            ops.append("%p2")
        elif s == "a":
            ops.append(addr)
        elif s == "l":
            ops.append("L_end")
        elif s == "D":
            ops.append("%r1|%p1")
        elif s == "V":
            r = [_dreg(max(w, 16), t, 10 + i) for i in range(nvec)]
            ops.append(r[0] if nvec == 1 else "{" + ", ".join(r) + "}")
        elif s == "W":
            ops.append("3" if nvec == 1 else "{" + ", ".join(["3"] * nvec) + "}")
        elif s == "m":
            ops.append("1")
        elif s == "M":
            ops.append(_dreg(max(w, 16) if w > 1 else 1, t, 1))
    if op in ("bar", "barrier"):
        ops = ["0"]
    if op == "shfl":
        ops = ["%r1|%p1", "%r2", "1", "31", "-1"]
    if op == "vote":
        ops = [ops[0], "%p2", "-1"]
    return f"\t{name} \t" + ", ".join(ops) + ";" if ops else f"\t{name};"


SETUP = """\tld.param.u64 \t%rd9, [out];
\tcvta.to.global.u64 \t%rd9, %rd9;
\tsetp.eq.u32 \t%p2, 1, 1;
\tmov.u32 \t%r2, 5;
\tst.shared.v4.u32 \t[sh], {%r2, %r2, %r2, %r2};
\tst.local.v4.u32 \t[loc], {%r2, %r2, %r2, %r2};
"""


def test_every_supported_form_decodes_and_runs():
    failures = []
    buf = np.zeros(16, np.uint32)
    for name, form in sorted(SUPPORTED.items()):
        line = _synth(name, form)
        body = SETUP + line + "\nL_end:\n\tret;\n"
        text = kernel_ptx(body, decls="\t.shared .align 16 .b8 sh[64];\n\t.local .align 16 .b8 loc[64];\n")
        try:
            k = parse_ptx(text).kernel()
            launch(k, 1, 32, [buf])
        except ExecutionError:
            pass   # e.g. cvta.to.shared of a non-shared address: decoded and executed
        except Exception as e:   # noqa: BLE001
            failures.append(f"{line.strip()}: {type(e).__name__}: {e}")
    assert failures == [], "\n".join(failures[:20])
    assert len(SUPPORTED) > 1000


def test_fusion_candidates_are_warned_about():
    from gpu_layers.ptx.validator import fusion_warnings

    body = ("\tmul.f32 \t%f1, %f2, %f3;\n\tadd.f32 \t%f4, %f1, %f5;\n"
            "\tmul.rn.f32 \t%f6, %f2, %f3;\n\tadd.f32 \t%f7, %f6, %f5;\n\tret;\n")
    text = kernel_ptx(body)
    warns = fusion_warnings(parse_ptx(text).kernel())
    assert len(warns) == 1 and "fma" in warns[0]
    line = next(i + 1 for i, l in enumerate(text.splitlines()) if "add.f32 \t%f4" in l)
    assert warns[0].startswith(f"line {line}:")


def test_problems_are_scoped_to_the_kernel_and_sorted():
    text = """.version 9.5
.target sm_75
.address_size 64
.global .align 1 .b8 $str[4] = {37, 100, 10};
.func  (.param .b32 func_retval0) helper(
\t.param .b32 helper_param_0
)
{
\t.reg .b32 \t%r<3>;
\tret;
}
.visible .entry clean(
\t.param .u64 clean_param_0
)
{
\tret;
}
.visible .entry dirty(
\t.param .u64 dirty_param_0
)
{
\t.reg .b64 \t%rd<3>;
\t.reg .f64 \t%fd<3>;
\trcp.approx.ftz.f64 \t%fd1, %fd2;
\tmov.u64 \t%rd1, $str;
\tret;
}
"""
    m = parse_ptx(text)
    validate(m, "clean")          # the unused .func and string do not matter
    with pytest.raises(UnsupportedPTX) as ei:
        validate(m, "dirty")
    probs = ei.value.problems
    lines = [int(p.split(":")[0][5:]) for p in probs]
    assert lines == sorted(lines)
    assert any("$str" in p for p in probs) and any("rcp.approx.ftz.f64" in p for p in probs)
    with pytest.raises(UnsupportedPTX, match="no .entry"):
        validate(parse_ptx(text.split(".visible")[0]))
