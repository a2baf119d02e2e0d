"""The block library. Each function adds stages to a `Circuit` and returns a `Block` (inputs,
outputs, cost, a Python reference `ref`). See each module's docstring for the construction."""
from .alu import ALU_OPS, ALU_WIDTHS, alu, alu_ref
from .arith import adder, prefix_adder
from .base import MLPBuilder, symmetric_terms
from .logic import bitwise, compare, equal, gate, mux, shift, threshold_gate
from .memory import BankedMemoryModel, MemoryModel, bank_select, banked_memory, memory, read_bits

__all__ = ["alu", "alu_ref", "ALU_OPS", "ALU_WIDTHS", "adder", "prefix_adder", "bitwise", "compare", "equal", "gate", "mux", "shift", "threshold_gate",
           "memory", "banked_memory", "bank_select", "read_bits", "MemoryModel", "BankedMemoryModel", "MLPBuilder", "symmetric_terms"]
