"""Hand-written PTX kernels for tests and experiments: wrap a body, run it.

    ptx = kernel_ptx(body, params=[("out", "u64"), ("n", "u32")])
    res = run_ptx(ptx, grid=1, block=32, args=[np.zeros(32, np.int32), 32])

Declared for every snippet: %p<32> (.pred), %rs<32> (.b16), %r<128> (.b32), %rd<64> (.b64),
%f<64> (.f32); `decls` adds more (.shared / .local variables, ...).
"""
from __future__ import annotations

from gpu_layers.interp.machine import launch
from gpu_layers.ptx.parser import parse_ptx

HEADER = ".version 9.5\n.target sm_75\n.address_size 64\n\n"
REGS = ("\t.reg .pred \t%p<32>;\n\t.reg .b16 \t%rs<32>;\n\t.reg .b32 \t%r<128>;\n"
        "\t.reg .b64 \t%rd<64>;\n\t.reg .f32 \t%f<64>;\n")


def kernel_ptx(body: str, params=(("out", "u64"),), name: str = "k", decls: str = "",
               module_decls: str = "") -> str:
    plist = ",\n".join(f"\t.param .{t} {n}" for n, t in params)
    return (f"{HEADER}{module_decls}\n.visible .entry {name}(\n{plist}\n)\n{{\n{decls}{REGS}\n"
            f"{body}\n}}\n")


def run_ptx(ptx: str, grid=1, block=32, args=(), dynamic_shared_bytes=0, **kw):
    return launch(parse_ptx(ptx).kernel(), grid, block, list(args), dynamic_shared_bytes, **kw)
