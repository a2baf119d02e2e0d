"""The compiled SIMT machine's program side (design: docs/machine.md).

    lower(kernel) -> Kernel      PTX -> machine code: a subset of PTX in which every instruction is
                                 one machine step (`MACHINE_KINDS`); everything else is expanded
                                 into sequences of such steps, or refused by name
    machine_problems(kernel)     what the machine cannot run yet, by line (empty: all of it)
    allocate(kernel)             (kernel on machine registers, Allocation): one pool per width,
                                 registers sharing a machine register never live at once
                                 (gpu_layers/machine/regalloc.py)

Machine code is PTX, so the reference interpreter runs it as it runs the original: the lowering is
checked by running both and comparing outputs bit for bit (tests/test_lowering.py).
"""
from gpu_layers.machine.lower import MACHINE_KINDS, lower, machine_problems  # noqa: F401
from gpu_layers.machine.regalloc import Allocation, allocate  # noqa: F401,E402
