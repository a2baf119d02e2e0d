"""PTX front end: parser (text -> typed IR) and validator (what the machine supports).

    parse_ptx(text) -> Module                  PTXSyntaxError with a line number on bad input
    validate(module, kernel_name=None)         UnsupportedPTX(problems): every unsupported construct
    fusion_warnings(kernel) -> [str]           plain mul.f32 -> add.f32 chains ptxas may fuse
    SUPPORTED                                  the table of instruction forms the machine runs
"""
from gpu_layers.ptx.ir import (  # noqa: F401
    Addr, FImm, Guard, Imm, Instruction, Kernel, Module, Pair, Param, Reg, RegDecl, Sink, Sym,
    Vec, VarDecl,
)
from gpu_layers.ptx.parser import parse_ptx  # noqa: F401
from gpu_layers.ptx.validator import SUPPORTED, fusion_warnings, validate  # noqa: F401
