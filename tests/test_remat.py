"""Constant rematerialization (gpu_layers.machine.remat): a kernel whose constants, live across
float routines' calls, overflow the register file runs once they are written again after each
call, computing what the original computes, bit for bit."""
import numpy as np

from gpu_layers.interp import launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import allocate, lower
from gpu_layers.machine.core import _slots_needed, launch_tokens, machine_kernel
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
