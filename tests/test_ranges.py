"""Register bounds (gpu_layers.machine.ranges) and the shorter multiplies they allow: a multiplier
known to be below 2^k takes k / 2 multiply steps, and the products stay bit for bit the
interpreter's (signed, unsigned, wide, low, by negative multiplicands)."""
import numpy as np
import pytest

from gpu_layers.interp import launch
from gpu_layers.interp.snippets import kernel_ptx
from gpu_layers.machine import lower
from gpu_layers.machine.ranges import bounds
from gpu_layers.ptx.parser import parse_ptx

HEAD = """\tld.param.u64 \t%rd9, [out];
\tcvta.to.global.u64 \t%rd9, %rd9;
\tmov.u32 \t%r1, %tid.x;
\tld.global.u32 \t%r2, [%rd9];
"""


def _kernel(body):
    return parse_ptx(kernel_ptx(HEAD + body + "\tret;\n")).kernel()


def test_what_gets_a_bound():
    body = """\tand.b32 \t%r3, %r2, 255;
\tshl.b32 \t%r4, %r1, 3;
\tmad.lo.u32 \t%r5, %r1, %r3, 7;
\trem.u32 \t%r6, %r2, 10;
\tcvt.u64.u32 \t%rd3, %r4;
\tshr.s32 \t%r7, %r2, 4;
\tadd.u32 \t%r8, %r1, 1;
\tadd.u32 \t%r8, %r8, 1;
\tsub.u32 \t%r9, %r1, 1;
\tor.b32 \t%r10, %r3, %r1;
"""
    b = bounds(_kernel(body), threads=64)
    assert b["%r1"] == 63 and b["%r3"] == 255 and b["%r4"] == 504 and b["%r5"] == 63 * 255 + 7
    assert b["%r6"] == 9 and b["%rd3"] == 504 and b["%r10"] == 255
    assert "%r2" not in b and "%r7" not in b            # a loaded value; shr.s of a maybe-negative one
    assert "%r8" not in b and "%r9" not in b            # written twice; a subtraction may wrap


@pytest.mark.parametrize("scale", [3, -77777, 0x7FFFFFFF, -1])
def test_bounded_multipliers_take_fewer_steps_and_the_same_products(scale):
    body = """\tshr.u32 \t%r3, %r1, 1;
\tmul.lo.s32 \t%r4, %r2, %r3;
\tmad.lo.s32 \t%r5, %r3, %r2, %r1;
\tmul.wide.s32 \t%rd4, %r2, %r3;
\tmul.wide.u32 \t%rd5, %r3, %r2;
\tmul.hi.s32 \t%r6, %r2, %r3;
\tmul.wide.u32 \t%rd6, %r2, %r2;
\tshl.b32 \t%r7, %r1, 5;
\tcvt.u64.u32 \t%rd7, %r7;
\tadd.s64 \t%rd8, %rd9, %rd7;
\tst.global.u32 \t[%rd8+4], %r4;
\tst.global.u32 \t[%rd8+8], %r5;
\tst.global.u64 \t[%rd8+16], %rd4;
\tst.global.u64 \t[%rd8+24], %rd5;
\tst.global.u32 \t[%rd8+32], %r6;
\tst.global.u64 \t[%rd8+40], %rd6;
"""
    k = _kernel(body)
    buf = np.zeros(32 * 8 + 16, np.uint32)
    buf[0] = scale & 0xFFFFFFFF
    want = launch(k, 1, 32, [buf.copy()]).buffers[0]
    short, full = lower(k, one_warp=True, threads=32), lower(k, one_warp=True)   # (full: no %tid.x bound)
    a, b = launch(short, 1, 32, [buf.copy()]), launch(full, 1, 32, [buf.copy()])
    assert a.buffers[0].tobytes() == want.tobytes() == b.buffers[0].tobytes()
    assert a.steps < b.steps - 50          # five products by a 4-bit multiplier: 2 steps each, not 16


def test_every_write_bounded_bounds_a_loop_register_and_its_64_bit_products():
    """A modular square in a loop (modpow): r is written by a widened 32-bit value and by rem.u64
    by a widened 32-bit modulus, so r < 2^32 and r * r is one 32 x 32 product, not three; the
    loop counter, which reads itself, gets no bound."""
    body = """\tcvt.u64.u32 \t%rd2, %r2;
\tor.b64 \t%rd6, %rd2, 3;
\tadd.u32 \t%r5, %r2, %r1;
\tcvt.u64.u32 \t%rd3, %r5;
\tmov.u32 \t%r6, 0;
$L:
\tmul.lo.s64 \t%rd4, %rd3, %rd3;
\trem.u64 \t%rd3, %rd4, %rd6;
\tadd.u32 \t%r6, %r6, 1;
\tsetp.lt.u32 \t%p1, %r6, 5;
\t@%p1 bra $L;
\tmul.lo.s64 \t%rd5, %rd3, %rd2;
\tshl.b32 \t%r7, %r1, 4;
\tcvt.u64.u32 \t%rd7, %r7;
\tadd.s64 \t%rd8, %rd9, %rd7;
\tst.global.u64 \t[%rd8+8], %rd3;
\tst.global.u64 \t[%rd8+16], %rd5;
"""
    k = _kernel(body)
    b = bounds(k, threads=32)
    assert b["%rd3"] == b["%rd6"] == (1 << 32) - 1 and "%r6" not in b
    buf = np.zeros(32 * 4 + 8, np.uint32)
    buf[0] = 0xFFFFFFF1
    want = launch(k, 1, 32, [buf.copy()]).buffers[0]
    got = launch(lower(k, one_warp=True, threads=32), 1, 32, [buf.copy()])
    assert got.buffers[0].tobytes() == want.tobytes() and want[2:].any()


def test_a_divisor_known_below_2_32_divides_in_one_part_or_in_32_bits():
    body = """\tcvt.u64.u32 \t%rd2, %r2;
\tor.b64 \t%rd3, %rd2, 1;
\tcvt.u64.u32 \t%rd4, %r1;
\tmul.lo.u64 \t%rd5, %rd4, 0x123456789ABCD;
\tdiv.u64 \t%rd6, %rd5, %rd3;
\trem.u64 \t%rd7, %rd5, %rd3;
\tadd.u64 \t%rd10, %rd4, 1000;
\tdiv.u64 \t%rd11, %rd10, %rd3;
\trem.u64 \t%rd12, %rd10, %rd3;
\tshl.b32 \t%r7, %r1, 5;
\tcvt.u64.u32 \t%rd13, %r7;
\tadd.s64 \t%rd8, %rd9, %rd13;
\tst.global.u64 \t[%rd8+8], %rd6;
\tst.global.u64 \t[%rd8+16], %rd7;
\tst.global.u64 \t[%rd8+24], %rd11;
\tst.global.u64 \t[%rd8+32], %rd12;
"""
    k = _kernel(body)
    mk = lower(k, one_warp=True, threads=32)
    for divisor in (7, 0xFFFFFFFF, 1, 123456):
        buf = np.zeros(32 * 8 + 16, np.uint32)
        buf[0] = divisor
        want = launch(k, 1, 32, [buf.copy()]).buffers[0]
        assert launch(mk, 1, 32, [buf.copy()]).buffers[0].tobytes() == want.tobytes()
    size_checks = [i for i in mk.instructions if i.opcode == "setp" and str(i).endswith(", 4294967295")]
    assert not size_checks                      # no branch on the divisor's size (_udivrem_branching)
