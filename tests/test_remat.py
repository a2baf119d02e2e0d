"""Constant rematerialization (gpu_layers.machine.remat): a kernel whose constants, live across
float routines' calls, overflow the register file runs once they are written again after each
call, computing what the original computes, bit for bit."""
import numpy as np

from gpu_layers.interp import launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import allocate, lower
from gpu_layers.machine.core import PCS, _slots_needed, launch_tokens, machine_kernel
from gpu_layers.machine.regfile import REGS
from gpu_layers.machine.remat import constants, rematerialize_constants
from gpu_layers.ptx.parser import parse_ptx

N_CONST = 20


def _kernel():
    """20 constants, four f32 additions (routine calls) while they are all live, then every
    constant summed into the output."""
    body = ["\tld.param.u64 \t%rd1, [out];", "\tcvta.to.global.u64 \t%rd1, %rd1;",
            "\tmov.u32 \t%r100, %tid.x;", "\tmul.wide.u32 \t%rd2, %r100, 4;",
            "\tadd.s64 \t%rd9, %rd1, %rd2;", "\tcvt.rn.f32.u32 \t%f1, %r100;"]
    body += [f"\tmov.u32 \t%r{k}, {7 * k + 3};" for k in range(N_CONST)]
    body += [f"\tadd.rn.f32 \t%f{k + 2}, %f{k + 1}, 0f3FC00000;" for k in range(4)]
    body += ["\tmov.b32 \t%r50, %f5;"]
    body += [f"\tadd.u32 \t%r50, %r50, %r{k};" for k in range(N_CONST)]
    body += ["\tst.global.u32 \t[%rd9], %r50;", "\tret;"]
    return parse_ptx(kernel_ptx("\n".join(body) + "\n")).kernel()


def test_constants_are_single_immediate_writes_read_after_them():
    k = lower(_kernel(), one_warp=True)
    found = constants(k)
    assert {f"%r{i}" for i in range(N_CONST)} <= set(found)
    assert "%r50" not in found and "%r100" not in found      # written twice / from %tid.x


def test_rematerialized_kernel_fits_and_computes_the_same():
    k = _kernel()
    code = lower(k, one_warp=True)
    assert _slots_needed(allocate(code)[0]) > REGS           # without it: too many slots
    remat, copies = rematerialize_constants(code)
    assert copies == 4 * N_CONST                             # every constant after every call
    assert _slots_needed(allocate(remat)[0]) <= REGS
    mk, grid, block = machine_kernel(k, (1, 1, 1), (32, 1, 1))
    want = launch(k, 1, 32, [np.zeros(32, np.uint32)]).buffers[0]
    got = launch(mk, 1, 32, [np.zeros(32, np.uint32)]).buffers[0]
    assert want.tobytes() == got.tobytes()
    launch_tokens(mk, grid, block, [np.zeros(32, np.uint32)], [0])   # the core accepts it


def test_invariants_are_single_writes_of_constants_parameters_fixed_specials_and_pure_chains():
    from gpu_layers.machine.remat import chain, invariants

    body = ["\tld.param.u64 \t%rd1, [out];", "\tcvta.to.global.u64 \t%rd3, %rd1;",
            "\tmov.u32 \t%r100, %tid.x;", "\tshl.b32 \t%r101, %r100, 2;", "\tcvt.u64.u32 \t%rd2, %r101;",
            "\tadd.s64 \t%rd9, %rd3, %rd2;", "\tld.global.u32 \t%r102, [%rd3];", "\tadd.u32 \t%r103, %r100, 1;",
            "\tadd.u32 \t%r103, %r103, 1;", "\tst.global.u32 \t[%rd9], %r102;", "\tst.global.u32 \t[%rd9+4], %r103;",
            "\tret;"]
    k = lower(parse_ptx(kernel_ptx("\n".join(body) + "\n")).kernel(), one_warp=True)
    inv = invariants(k)
    assert {"%rd1", "%rd3", "%r100", "%r101", "%rd2", "%rd9"} <= set(inv)
    assert "%r102" not in inv and "%r103" not in inv          # loaded from memory; written twice
    text = [str(k.instructions[i]) for i in chain(inv, ["%rd9"])]
    assert text[-1].startswith("add.s64 %rd9") and len(text) == 6   # operands first


def test_a_kernel_over_the_register_file_fits_by_computing_invariants_again():
    """f64_reduce (two warps, f64 routines, a warp reduction) needs 35 slots as lowered: its
    pointers, block offset and length are computed again where they are read (fewer copies than
    after each of the calls they are live across), so it fits the 32 slots and the program memory
    (1,920 PCs), and computes what the original computes."""
    from gpu_layers.interp import launch_args, module_for
    from gpu_layers.suite import load_suite

    c = {c.name: c for c in load_suite()}["f64_reduce"]
    k = module_for(c.ptx()).kernel(c.kernel)
    mk, grid, block = machine_kernel(k, c.grid, c.block, launch_args(c))
    assert _slots_needed(mk) <= REGS and len(mk.instructions) <= PCS
    want = launch(k, c.grid, c.block, launch_args(c)).buffers
    got = launch(mk, grid, block, launch_args(c)).buffers
    assert all(a is None or a.tobytes() == b.tobytes() for a, b in zip(want, got))
