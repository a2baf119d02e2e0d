"""The state-inspection API: the register file read out of the model's recurrent state.

The v1 register file (gpu_layers.machine.regfile) keeps per lane J one value head of 128 slots: row
32 K + R holds machine-register slot R of thread 4 K + J (64 bits, dual rail); a register never
written, or written with an undefined value (poison: a blank write), is all zeros and reads None,
as the interpreter's undefined value does:

    prog = rf.program(kernel)                                # slots {machine register: slot}
    regs = read_registers(state, rf, names=prog)             # {(thread, "%md2"): int or None}
    states = registers_at(model, rf, ids, positions, names=prog)

state: the transformers cache, a model output carrying it, or the fast executor's FastState.

The machine core (gpu_layers.machine.core) holds a whole 32-thread warp: operand port a's copy
of the register file is two banks of heads per lane (bank K // 4, row 32 (K mod 4) + R), and
`core_registers` reads them from the core's state at any position of a run (after a `<wi>`,
every issue before it has committed):

    regs = core_registers(state, slots)                     # slots: {machine register: slot}
    mem = core_memory(state, "global")                      # {machine byte address: word or None}

The v0 register file (gpu_layers.machine.rf_circuit) is a write-only DeltaNet memory: per lane J a
value head whose state row 16 K + R holds register R of thread 4 K + J, dual rail (gpu_layers.craft.
state). Nothing in the model reads it yet; this module is how a host (or a test) sees it:

    regs = read_registers(cache, rf)                         # after the tokens fed so far
    regs[(thread, reg)]  -> int (the 32-bit value) or None (never written)
    states = registers_at(model, rf, ids, positions, path="prefill" | "decode")

Scope v0: 8 threads, 16 registers of 32 bits (see rf_circuit's docstring).
`registers_at` drives stock transformers; with the fast executor (gpu_layers.craft.fast) pass its
FastState to read_registers after each step.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache

from gpu_layers.craft.state import read_port_state, recurrent_state
from gpu_layers.machine.rf_circuit import GROUPS, LANES, REGS, RF_PORT


def _compiled(machine):
    return getattr(machine, "compiled", machine)


def _is_v1(machine) -> bool:
    from gpu_layers.machine.regfile import RegfileMachine

    return isinstance(machine, RegfileMachine)


def read_registers(source, machine, batch: int = 0, strict: bool = True, names=None) -> dict:
    """{(thread, register): value or None} for every thread and register of the register file.

    source: the transformers cache after the tokens of interest (a DynamicCache, a model output with
    `.cache`, the fast executor's FastState, or {layer: recurrent state tensor}); machine: the
    RFMachine v0 (or its Compiled) or the RegfileMachine v1. strict: raise
    gpu_layers.craft.state.StateDecodeError on any rail that is not a clean code.
    v1: names = the RegfileProgram (or {machine register name: slot}): keys (thread, name) for its
    registers; None: keys (thread, slot) for all 16 threads x 32 slots. None = unwritten or poison.
    v0: keys (thread, register index), names unused."""
    if _is_v1(machine):
        return _read_v1(source, machine, batch, strict, names)
    comp = _compiled(machine)
    place = comp.port(RF_PORT)
    words = read_port_state(recurrent_state(source, place.layer), place, batch, strict)
    out = {}
    for k in range(GROUPS):
        for j in range(LANES):
            for r in range(REGS):
                out[(LANES * k + j, r)] = words[j][REGS * k + r]
    return out


def _read_v1(source, machine, batch, strict, names):
    from gpu_layers.machine.regfile import GROUPS, LANES, REGS, RF_PORT

    place = machine.compiled.port(RF_PORT)
    words = read_port_state(recurrent_state(source, place.layer), place, batch, strict)
    slots = getattr(names, "slots", names)
    if slots is None:
        slots = {r: r for r in range(REGS)}
    out = {}
    for k in range(GROUPS):
        for j in range(LANES):
            w = words[j]
            for n, r in slots.items():
                out[(LANES * k + j, n)] = w[REGS * k + r]
    return out


def written(regs: dict) -> dict:
    """Only the registers that hold a value."""
    return {k: v for k, v in regs.items() if v is not None}


@torch.no_grad()
def registers_at(model, machine, ids: list[int], positions, path: str = "prefill",
                 strict: bool = True, names=None) -> dict[int, dict]:
    """The register file after each position in `positions` (0-based token indices into ids).

    path 'decode': one token per forward with the cache (the recurrent delta rule); 'prefill': the
    stream fed in segments ending at each position, each segment one multi-token forward continuing
    the cache (the chunked delta rule, with the previous segment's state as its initial state; the
    first segment is a plain prefill; a segment of one token takes the recurrent rule, as stock
    transformers does). model: a Qwen3_5ForCausalLM (its decoder stack runs; logits are not needed)."""
    want = sorted(set(int(p) for p in positions))
    if want and (want[0] < 0 or want[-1] >= len(ids)):
        raise IndexError("positions outside the token stream")
    dev = next(model.parameters()).device
    base = getattr(model, "model", model)       # the decoder stack: the state needs no LM head
    cache = DynamicCache(config=model.config)
    out = {}
    if path == "decode":
        wanted = set(want)
        for t in range(want[-1] + 1 if want else 0):
            base(input_ids=torch.tensor([[ids[t]]], device=dev), cache=cache, use_cache=True)
            if t in wanted:
                out[t] = read_registers(cache, machine, strict=strict, names=names)
    elif path == "prefill":
        start = 0
        for p in want:
            seg = torch.tensor([ids[start:p + 1]], device=dev)
            base(input_ids=seg, cache=cache, use_cache=True)
            out[p] = read_registers(cache, machine, strict=strict, names=names)
            start = p + 1
    else:
        raise ValueError(f"unknown path {path!r} (prefill or decode)")
    return out


def core_placements():
    """Where the machine core's memory ports live (layer, value heads) for Qwen3.5-2B's shapes:
    the scheduler's placement, the same one the compiled core has (scheduling is deterministic).
    Computed once per process (a few seconds)."""
    global _CORE_PLACES
    if _CORE_PLACES is None:
        from types import SimpleNamespace

        from gpu_layers.craft.assemble import Compiled, Shapes, schedule
        from gpu_layers.craft.testing import TINY
        from gpu_layers.hosts import REAL_2B_TEXT_CONFIG
        from gpu_layers.machine.core import core_circuit

        s = Shapes.of({k: REAL_2B_TEXT_CONFIG[k] for k in TINY})
        plans, _ = schedule(core_circuit(), s)
        _CORE_PLACES = SimpleNamespace(plans=plans, shapes=s, port=lambda name: Compiled.port(_CORE_PLACES, name))
    return _CORE_PLACES


_CORE_PLACES = None


def core_registers(source, slots: dict, strict: bool = True, port: str = "rfa") -> dict:
    """{(thread, machine register): value or None} for every thread of the core's register file
    (core.THREADS; None: never written, or poison), read from port `port`'s copy (rfa, rfb or rfq:
    every copy is written by the same commits) in `source` (the fast executor's FastState, or a
    transformers cache of a stock model of the core). slots: {machine register name: slot}
    (the register file program's, gpu_layers.machine.regfile.program_of(kernel).slots). Thread
    32 W + 4 K + J is lane J of group K of warp W: bank 2 W + K // 4, slot 32 (K mod 4) + R."""
    from gpu_layers.machine.core import GROUPS, WARPS
    from gpu_layers.machine.regfile import GROUPS as BANK_GROUPS
    from gpu_layers.machine.regfile import LANES, REGS

    places = core_placements()
    banks = []
    for b in range(WARPS * GROUPS // BANK_GROUPS):            # a head per lane: port {port}{b}_{j}
        lanes = []
        for j in range(LANES):
            place = places.port(f"{port}{b}_{j}")
            lanes += read_port_state(recurrent_state(source, place.layer), place, 0, strict)
        banks.append(lanes)
    out = {}
    for kw in range(WARPS * GROUPS):
        words = banks[kw // BANK_GROUPS]
        for j in range(LANES):
            for n, r in slots.items():
                out[(LANES * kw + j, n)] = words[j][REGS * (kw % BANK_GROUPS) + r]
    return out


def core_memory(source, space: str) -> dict:
    """{machine byte address: 32-bit word or None} of the core's global or shared memory (memory_map:
    global word x in bank (x >> 2) & 31, row x >> 7; shared in bank (x >> 2) & 3, row (x >> 4) & 127;
    None: never written; a global word of the buffers that is 0 is never sent, so it reads None
    too), read from the memory unit's heads in `source` (as core_registers)."""
    from gpu_layers.machine import memory_map as MM

    if space not in MM.SPACES:
        raise ValueError(f"space must be one of {MM.SPACES}, got {space!r}")
    places = core_placements()
    nb = MM.BANKS[space]
    shift = (nb - 1).bit_length() + 2            # the row's low address bit: 7 global, 4 shared
    out = {}
    for b in range(nb):
        place = places.port(f"{space[0]}mem{b}")
        words = read_port_state(recurrent_state(source, place.layer), place, 0)[0]
        for r, w in enumerate(words):
            out[(r << shift) | (b << 2)] = w
    return out


def blank_rails(source, port: str = "rfa") -> tuple[int, float]:
    """(slots that read as unwritten, the largest |rail| among them) over the core's register-
    file banks of port `port`: an unwritten or poisoned slot must hold exact zeros (a near-zero
    column would be blown up by the read's per-head RMSNorm)."""
    import numpy as np

    from gpu_layers.craft.state import _rails
    from gpu_layers.machine.core import GROUPS, WARPS
    from gpu_layers.machine.regfile import GROUPS as BANK_GROUPS
    from gpu_layers.machine.regfile import LANES

    places = core_placements()
    n, worst = 0, 0.0
    for b in range(WARPS * GROUPS // BANK_GROUPS):
        for j in range(LANES):
            place = places.port(f"{port}{b}_{j}")
            r = _rails(recurrent_state(source, place.layer), place, 0, place.port.slots)
            blank = (np.abs(r) < 1.0).all(axis=(-1, -2))          # every rail of the slot near 0
            n += int(blank.sum())
            if blank.any():
                worst = max(worst, float(np.abs(r[blank]).max()))
    return n, worst
