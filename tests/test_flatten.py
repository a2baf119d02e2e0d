"""Flattening a multi-dimensional launch (gpu_layers/machine/flatten.py): the 1-D launch of the
flattened kernel computes what the original launch computes, bit for bit, with every warp running
the same instructions in the same order; the machine core then accepts its %tid / %ctaid reads."""
from dataclasses import replace

import numpy as np
import pytest

from gpu_layers.cases import load_cases
from gpu_layers.errors import LaunchError, QwenGPUError, StepBudgetExceeded, UnsupportedPTX
from gpu_layers.interp import launch, launch_args, module_for
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import allocate, lower
from gpu_layers.machine.core import launch_tokens
from gpu_layers.machine.flatten import _div, _FlatEmitter, _magic, _rem, flatten_launch
from gpu_layers.ptx.ir import Imm, Kernel
from gpu_layers.ptx.parser import parse_ptx
from gpu_layers.suite import load_suite
from tests.conftest import require_gpu_truth

NAMED = {"conv2d_tile", "grid2d_index", "index_3d", "mandelbrot", "morton2d"}


def _multi_dim_cases():
    cases = list(load_suite()) + list(load_cases(require_gpu_truth() / "cases.json"))
    out = [c for c in cases if c.grid[1:] != (1, 1) or c.block[1:] != (1, 1)]
    assert NAMED <= {c.name for c in out}
    return out


def _by_warp(kernel, result, temps=frozenset()):
    """{(block, warp): [(original instruction index, active mask)]}: the steps of a launch, the
    flattening's own instructions (those writing one of its temporaries `temps`) left out."""
    index = [i for i, x in enumerate(kernel.instructions)
             if not (x.operands and str(x.operands[0]) in temps)]
    orig = {pc: k for k, pc in enumerate(index)}
    out = {}
    for block, warp, pc, mask in result.trace:
        if pc in orig:
            out.setdefault((block, warp), []).append((orig[pc], mask))
    return out


def _same_launch(kernel, grid, block, args, shared=0):
    """Launch `kernel` as given and flattened: equal buffers, and each warp's steps in order."""
    flat, fg, fb = flatten_launch(kernel, grid, block)
    assert fg == (np.prod(grid), 1, 1) and fb == (np.prod(block), 1, 1)
    a = launch(kernel, grid, block, args, shared, trace=True)          # launch copies the buffers
    b = launch(flat, fg, fb, args, shared, trace=True)
    for x, y in zip(a.buffers, b.buffers):
        assert (x is None and y is None) or x.tobytes() == y.tobytes()
    assert _by_warp(kernel, a) == _by_warp(flat, b, set(flat.reg_types()) - set(kernel.reg_types()))
    return flat


def test_flattened_cases_match_the_original_launches():
    for c in _multi_dim_cases():
        kernel = module_for(c.ptx()).kernel(c.kernel)
        text = [str(i) for i in kernel.instructions]
        _same_launch(kernel, c.grid, c.block, launch_args(c), c.dynamic_shared_bytes)
        assert [str(i) for i in kernel.instructions] == text, c.name        # the input is unchanged


def test_the_core_no_longer_refuses_the_launch_shape():
    # step_budget=1: the prompt (where the shape is checked) is built; the trace is not run
    for c in _multi_dim_cases():
        kernel = module_for(c.ptx()).kernel(c.kernel)
        flat, grid, block = flatten_launch(kernel, c.grid, c.block)
        outs = [i for i, a in enumerate(c.args) if a.is_buffer and a.output]
        try:
            launch_tokens(allocate(lower(flat))[0], grid, block, launch_args(c), outs,
                          c.dynamic_shared_bytes, step_budget=1)
        except StepBudgetExceeded:
            pass
        except QwenGPUError as e:
            assert " in a grid of " not in str(e) and " in a block of " not in str(e), (c.name, e)


IDS = """\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tmov.u32 \t%r1, %tid.x;
\tmov.u32 \t%r2, %tid.y;
\tmov.u32 \t%r3, %tid.z;
\tmov.u32 \t%r4, %ntid.x;
\tmov.u32 \t%r5, %ntid.y;
\tmov.u32 \t%r6, %ntid.z;
\tmov.u32 \t%r7, %ctaid.x;
\tmov.u32 \t%r8, %ctaid.y;
\tmov.u32 \t%r9, %ctaid.z;
\tmov.u32 \t%r10, %nctaid.x;
\tmov.u32 \t%r11, %nctaid.y;
\tmov.u32 \t%r12, %nctaid.z;
\tmad.lo.u32 \t%r13, %r3, %r5, %r2;
\tmad.lo.u32 \t%r13, %r13, %r4, %r1;
\tmad.lo.u32 \t%r14, %r9, %r11, %r8;
\tmad.lo.u32 \t%r14, %r14, %r10, %r7;
\tmul.lo.u32 \t%r15, %r4, %r5;
\tmul.lo.u32 \t%r15, %r15, %r6;
\tmad.lo.u32 \t%r16, %r14, %r15, %r13;
\tmul.wide.u32 \t%rd2, %r16, 64;
\tadd.s64 \t%rd3, %rd1, %rd2;
\tst.global.v4.u32 \t[%rd3], {%r1, %r2, %r3, %r4};
\tst.global.v4.u32 \t[%rd3+16], {%r5, %r6, %r7, %r8};
\tst.global.v4.u32 \t[%rd3+32], {%r9, %r10, %r11, %r12};
\tadd.u32 \t%r20, %tid.y, 1000;
\tcvt.u64.u32 \t%rd4, %ctaid.z;
\tcvt.u32.u64 \t%r21, %rd4;
\tsetp.eq.u32 \t%p1, %r1, 0;
\tmov.u32 \t%r22, 99;
\t@%p1 mov.u32 \t%r22, %tid.z;
\tmov.u32 \t%r23, 0;
\tmov.u32 \t%r24, 3;
$L_loop:
\tadd.u32 \t%r23, %r23, %nctaid.y;
\tsub.u32 \t%r24, %r24, 1;
\tsetp.ne.u32 \t%p2, %r24, 0;
\t@%p2 bra \t$L_loop;
\tst.global.v4.u32 \t[%rd3+48], {%r20, %r21, %r22, %r23};
\tret;
"""


@pytest.mark.parametrize("grid, block", [
    ((3, 5, 2), (5, 3, 7)), ((7, 1, 3), (1, 6, 1)), ((1, 1, 5), (6, 1, 1)), ((2, 1, 1), (3, 1, 4)),
    ((1, 3, 1), (32, 1, 1)), ((5, 3, 1), (12, 10, 1)), ((1, 1, 1), (1, 1, 17)), ((6, 1, 1), (3, 11, 1)),
])
def test_every_shape_register_reads_as_in_the_original_launch(grid, block):
    kernel = parse_ptx(kernel_ptx(IDS)).kernel()
    n = int(np.prod(grid) * np.prod(block))
    flat = _same_launch(kernel, grid, block, [np.zeros(16 * n, np.uint32)])
    assert flat.labels["$L_loop"] < len(flat.instructions)
    assert str(flat.instructions[flat.labels["$L_loop"] - 1]) == "mov.u32 %r24, 3"
    temps = set(flat.reg_types()) - set(kernel.reg_types())
    code = flat.instructions
    made = {k for k, i in enumerate(code) if i.operands and str(i.operands[0]) in temps}
    assert all(code[k].guard is None for k in made)     # only the reads stay guarded (a plain mov of
    # a dimension reads its number itself: flatten._plain_mov)
    assert all(sum(isinstance(o, Imm) for o in code[k].operands) <= 1 for k in made)
    for k in made:                                      # made code carries the line of its reader
        assert code[k].line == code[min(j for j in range(k, len(code)) if j not in made)].line


def test_a_one_dimensional_launch_returns_the_same_kernel():
    kernel = parse_ptx(kernel_ptx(IDS)).kernel()
    assert flatten_launch(kernel, 4, (32,)) == (kernel, (4, 1, 1), (32, 1, 1))
    assert flatten_launch(kernel, (4, 1, 1), [32, 1, 1])[0] is kernel


def test_reqntid_names_the_thread_count_of_the_flat_block():
    ptx = kernel_ptx(IDS).replace(".entry k(\n\t.param .u64 out\n)",
                                  ".entry k(\n\t.param .u64 out\n)\n.reqntid 4, 2, 1")
    kernel = parse_ptx(ptx).kernel()
    flat = _same_launch(kernel, (1, 2, 1), (4, 2, 1), [np.zeros(16 * 16, np.uint32)])
    assert [t for _, t in flat.directives] == [".reqntid 8"]
    with pytest.raises(LaunchError, match="reqntid"):
        flatten_launch(kernel, 1, (2, 4, 1))


def test_cluster_registers_are_refused_by_name():
    kernel = parse_ptx(kernel_ptx(IDS.replace("%tid.z;", "%clusterid.x;", 1))).kernel()
    with pytest.raises(UnsupportedPTX, match="clusterid"):
        flatten_launch(kernel, 1, (4, 2, 1))


def test_machine_code_is_not_flattened():
    kernel = parse_ptx(kernel_ptx(IDS)).kernel()
    with pytest.raises(ValueError, match="before lowering"):
        flatten_launch(replace(kernel, calls=[(0, 1, 2)]), 1, (4, 2, 1))


@pytest.mark.parametrize("n, ds", [(1 << 11, range(1, 65)), (1 << 20, (3, 7, 10, 63, 641, 1000, 65535))])
def test_magic_division_is_exact_over_the_whole_range(n, ds):
    t = np.arange(n, dtype=np.uint64)
    for d in ds:
        m, s = _magic(d, n)
        assert m == -(-(1 << s) // d)
        assert np.array_equal((t * np.uint64(m)) >> np.uint64(s), t // np.uint64(d)), d
        if n <= 1 << 11:
            assert (n - 1) * m < 1 << 32, d                 # ids below 2^11: 32-bit products


def _division_kernel(ds, n):
    """A kernel storing x / d and x mod d for each d, x = inp[global thread id] < n, by the
    flattening's code; and that code."""
    em = _FlatEmitter(Kernel("k"))
    body = []
    for i, d in enumerate(ds):
        start = len(em.code)
        q, r = _div(em, "%r1", d, n), _rem(em, "%r1", d, n)
        body += [f"\t{ins};" for ins in em.code[start:]]
        body.append(f"\tst.global.v2.u32 \t[%rd9+{8 * i}], {{{q}, {r}}};")
    head = f"""\tld.param.u64 \t%rd1, [out];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tld.param.u64 \t%rd2, [inp];
\tcvta.to.global.u64 \t%rd2, %rd2;
\tmov.u32 \t%r2, %ctaid.x;
\tmov.u32 \t%r3, %ntid.x;
\tmov.u32 \t%r4, %tid.x;
\tmad.lo.u32 \t%r5, %r2, %r3, %r4;
\tmul.wide.u32 \t%rd3, %r5, 4;
\tadd.s64 \t%rd4, %rd2, %rd3;
\tld.global.u32 \t%r1, [%rd4];
\tmul.wide.u32 \t%rd5, %r5, {8 * len(ds)};
\tadd.s64 \t%rd9, %rd1, %rd5;
"""
    decls = "".join(f"\t.reg .{d.type} \t{', '.join(d.names)};\n" for d in em.decls())
    ptx = kernel_ptx(head + "\n".join(body) + "\n\tret;\n", params=[("out", "u64"), ("inp", "u64")],
                     decls=decls)
    return parse_ptx(ptx).kernel(), em.code


@pytest.mark.parametrize("n, ds", [(1 << 11, range(1, 65)), (1 << 20, (3, 7, 10, 63, 641, 1000))])
def test_emitted_division_and_modulo_are_exact(n, ds):
    # the bottom and the top of the range (where an inexact multiplier would fail first)
    xs = np.r_[np.arange(256), n - 256 + np.arange(256)]
    kernel, code = _division_kernel(list(ds), n)
    assert not any(ins.opcode in ("mul", "mad", "div", "rem") for ins in code)
    wide = any(ins.name == "cvt.u64.u32" for ins in code)
    assert wide == (n > 1 << 11)                  # 64-bit products only for large block counts
    xs = xs.astype(np.uint32)
    out = np.zeros(2 * len(ds) * len(xs), np.uint32)
    out = launch(kernel, len(xs) // 256, 256, [out, xs]).buffers[0]
    got = out.reshape(len(xs), len(ds), 2)
    for i, d in enumerate(ds):
        assert np.array_equal(got[:, i, 0], xs // d) and np.array_equal(got[:, i, 1], xs % d), d


def test_launch_constants_turn_the_index_multiply_into_shifts():
    """%ntid.x / %nctaid.x read as the launch's numbers: the same outputs, and the lowered
    blockIdx.x * blockDim.x (a register holding %ntid.x) is a shift, not a multiply loop."""
    from gpu_layers.machine.flatten import launch_constants

    body = ("\tld.param.u64 \t%rd1, [out];\n\tcvta.to.global.u64 \t%rd1, %rd1;\n"
            "\tmov.u32 \t%r1, %ctaid.x;\n\tmov.u32 \t%r2, %ntid.x;\n\tmov.u32 \t%r3, %tid.x;\n"
            "\tmad.lo.s32 \t%r4, %r1, %r2, %r3;\n\tmul.wide.s32 \t%rd2, %r4, 4;\n"
            "\tadd.s64 \t%rd3, %rd1, %rd2;\n\tmul.lo.s32 \t%r5, %r4, %nctaid.x;\n"
            "\tst.global.u32 \t[%rd3], %r5;\n\tret;\n")
    k = parse_ptx(kernel_ptx(body)).kernel()
    kc = launch_constants(k, (3, 1, 1), (32, 1, 1))
    assert "%ntid.x" not in str(kc.instructions) and "%nctaid.x" not in str(kc.instructions)
    assert launch_constants(kc, (3, 1, 1), (32, 1, 1)) is kc
    want = launch(k, 3, 32, [np.zeros(96, np.uint32)]).buffers[0]
    got = launch(lower(kc), 3, 32, [np.zeros(96, np.uint32)]).buffers[0]
    assert want.tobytes() == got.tobytes()
    assert not any(i.opcode == "bra" for i in lower(kc).instructions)        # no multiply loop
    assert any(i.opcode == "bra" for i in lower(k).instructions)
