"""The compiled machines available by name (`python -m gpu_layers kl --machine NAME`, the splice).

Each entry compiles a circuit for a host's layer budgets (its Qwen3.5 text config). A name that is
not here, or a machine that does not fit the host, is an error naming the choices: nothing falls
back to another machine.
"""
from __future__ import annotations

from gpu_layers.errors import QwenGPUError

from .circuit import CircuitError
from .compiled import CompiledMachine


class MachineError(QwenGPUError):
    """Unknown machine name, or the machine does not compile for this host's layer budgets."""


def _regfile(adder):
    def build(config) -> CompiledMachine:
        from .demo_regfile import build_regfile

        return build_regfile(config, adder=adder).compiled.machine
    return build


def _core(config) -> CompiledMachine:
    from gpu_layers.machine.core import core_circuit

    from .streamed import compile_streamed

    return compile_streamed(core_circuit(), config)


# name -> (description, builder(host text config) -> CompiledMachine)
MACHINES = {
    "regfile": ("4-lane register file of 4 x 32-bit registers with a carry-lookahead adder "
                "(gpu_layers.craft.demo_regfile; exact in fp32)", _regfile("lookahead")),
    "regfile-prefix": ("the same register file with a Kogge-Stone adder (exact in fp32 and bf16)",
                       _regfile("prefix")),
    "core": ("the SIMT machine core that runs CUDA kernels (gpu_layers.machine.core: 128 threads a block, "
             "registers, predicates, program and memories in DeltaNet state; exact in fp32); needs "
             "Qwen3.5-2B's layer budgets (host tiny-2b-layers or the 2B); compiled in a few minutes, "
             "its layers written one at a time", _core),
}


def build_machine(name: str, config) -> CompiledMachine:
    """The machine `name` compiled for `config`'s layer budgets."""
    if name not in MACHINES:
        raise MachineError(f"unknown machine {name!r}; available: {', '.join(sorted(MACHINES))}")
    try:
        return MACHINES[name][1](config)
    except CircuitError as e:
        raise MachineError(f"machine {name!r} does not fit this host's layer budgets: {e}") from e


def describe(name: str, m: CompiledMachine) -> str:
    return f"{name}: {MACHINES[name][0]}; {len(m.layers)} compiled layers, W={m.width}, {m.vocab_size} machine tokens"
