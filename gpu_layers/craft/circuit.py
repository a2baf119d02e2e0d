"""Circuits: a graph of primitive stages over named fields, grouped into readable blocks.

Two primitive stages exist, one per half of a decoder layer:

* `MLPStage` (a SwiGLU MLP): a list of `Step`s. A step is a threshold test `t > 0` on a linear form
  `t` of fields (margin m: |t| >= m on every valid input) that adds `out[d]` to residual dim d when
  true. It costs 2 neurons: (silu(G t/m + K) - silu(G t/m)) / K is exactly 0 when false and 1 (up
  to rounding) when true, whatever the input's analog error inside the margin, so every stage
  re-digitizes. Constant outputs come from one shared bias neuron per layer. A stage may also
  hold `Linear` neurons (one each: an exact-identity silu adding a multiple of a linear form, in
  fp32 only), which the recycle pass uses to subtract dead fields.
* `MixerStage` (a Gated DeltaNet mixer): `MemoryPort`s. A port is a DeltaNet memory of `slots`
  words of `wbits` bits per lane (one value head per lane, or several for wide words), stored
  dual-rail; one-hot keys address it; per-lane beta is the write enable; z the read enable; the
  gate a reset. Its read lands in a `rail3` field whose norm is constant whether the read hit a
  written cell or not, thanks to one compensating constant head per layer.

A `Block` (what the block library returns) is a named group of stages with input and output
fields, its cost, and a Python reference (`ref`) the tests compare against bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Callable

from .fields import Field, Layout, Lin


class CircuitError(ValueError):
    """A circuit that cannot compile: bad wiring, a stage too big for any layer, a cycle."""


BF16_SAFE_RANGE = 32.0   # measured: threshold steps with max|t|/margin <= 33 decode exactly in bf16, 49 do not


@dataclass
class Step:
    t: Lin
    margin: float
    out: dict[int, float]

    def range(self, maxabs: dict[int, float]) -> float:
        """Upper bound of |t| / margin over valid inputs (maxabs: largest |value| of each dim).
        bf16 rounds the gate pre-activation G t / m to 8 bits, so a step is exact in bf16 only when
        this is small (<= BF16_SAFE_RANGE)."""
        b = abs(self.t.const) + sum(abs(v) * maxabs.get(d, 1.0) for d, v in self.t.coef.items())
        return b / self.margin


@dataclass
class Linear:
    """A linear output: adds out[d] * t to dim d. One neuron, silu(t + lift) * one, on silu's
    exact identity (t + lift >= 17 on every valid input), and the bias neuron's -lift * out[d];
    exact up to fp32 rounding at the scale of lift (about 1e-6 for lift ~ 20), in fp32 only. The
    recycle pass subtracts dead fields with these: the result does not depend on how far off its
    code the dead value was."""
    t: Lin
    lift: float
    out: dict[int, float]


@dataclass
class MLPStage:
    name: str
    steps: list[Step]
    bias: dict[int, float]
    outputs: list[Field]
    kind: str = "mlp"
    linear: list[Linear] = dc_field(default_factory=list)

    @property
    def neurons(self) -> int:
        return 2 * len(self.steps) + len(self.linear)

    def input_dims(self) -> set[int]:
        s = set()
        for st in [*self.steps, *self.linear]:
            s |= st.t.dims()
        return s


@dataclass
class MemoryPort:
    """A DeltaNet memory: `lanes` lanes x `slots` words of `wbits` bits.

    Per token, in this order: reset (wipe every lane), write data[l] at waddr for each lane whose
    we[l] is 1, read raddr into out[l] when re is 1 (else out[l] is absent). Fields:
      waddr, raddr: onehot(<= key head dim) or binary (bits / rail3, 2**n <= key head dim) fields;
                    an int = a constant slot; None = slot 0
      data: per lane a field (or list of fields, concatenated) of wbits bits: bits, dual or rail3
      we: one 0/1 Lin per lane (margin 0.5), or None = always write
      re: an exact-zero flag Lin (Field.flag()) or None = always read
      reset: a 0/1 Lin or None
      out: one rail3 field of wbits per lane
      blank: one 0/1 Lin per lane or None: a write whose blank is 1 stores an unwritten word (both
             rails of every bit are driven to 0 or below, so SiLU gives 0 and the delta rule
             replaces the slot with zeros): the slot reads as never written (poison)
      offset: per lane, whether this port's read dims get the constant head's -0.5 (None: all):
             a read field several ports share (each read enabled on its own, so their reads add
             up) takes it once, from the earliest-placed of them (set by assemble.schedule)
    """

    name: str
    slots: int
    wbits: int
    lanes: int
    waddr: object
    raddr: object
    data: list
    we: list[Lin | None]
    re: Lin | None
    reset: Lin | None
    out: list[Field]
    blank: list[Lin | None] | None = None
    offset: list[bool] | None = None

    def data_bits(self, lane: int) -> list[tuple[Lin, Lin]]:
        """(bit, not-bit) Lins of the lane's data word, low bit first (fields concatenated); with a
        blank Lin, both rails minus 2 blank (-1 or -2 when blank is 1: both values' pre-activations
        are <= -KEY_L, so both rails store an exact 0 even when the data rails come from memory
        reads a little off 0 or 1; minus 1 left a rail that read 1 - 4e-7 at -4e-5, and the read's
        per-head RMSNorm blows such a near-blank column up to a visible error)."""
        d = self.data[lane]
        out = []
        for f in (d if isinstance(d, list) else [d]):
            for i in range(f.n):
                out.append((f.bit(i), f.nbit(i)) if f.enc != "bits" else (f.pm(i), -f.pm(i)))
        bl = self.blank[lane] if self.blank is not None else None
        if bl is not None:
            if any(f.enc == "bits" for f in (d if isinstance(d, list) else [d])):
                raise CircuitError(f"memory {self.name}: a blank write needs dual or rail3 data (0/1 rails)")
            out = [(a - 2.0 * bl, b - 2.0 * bl) for a, b in out]
        return out

    def input_dims(self) -> set[int]:
        s = set()
        fields = [f for f in (self.waddr, self.raddr) if isinstance(f, Field)]
        for d in self.data:
            fields += d if isinstance(d, list) else [d]
        for f in fields:
            s |= set(range(f.start, f.stop))
        for lin in [*self.we, self.re, self.reset, *(self.blank or [])]:
            if lin is not None:
                s |= lin.dims()
        return s


@dataclass
class MixerStage:
    name: str
    ports: list[MemoryPort]
    outputs: list[Field]
    kind: str = "mixer"

    def input_dims(self) -> set[int]:
        s = set()
        for p in self.ports:
            s |= p.input_dims()
        return s


@dataclass
class Cost:
    neurons: int = 0        # SwiGLU neurons (2 per threshold step, +1 bias neuron per stage that needs it)
    ports: int = 0          # memory ports (each needs its own key head group(s))
    value_dims: int = 0     # DeltaNet value dims (2 per stored bit per lane: dual rail)
    key_slots: int = 0      # address space (<= linear_key_head_dim)
    depth: int = 0          # sequential stages (each MLP stage or mixer stage is one half-layer)

    def row(self):
        return (self.neurons, self.ports, self.value_dims, self.key_slots, self.depth)


@dataclass
class Block:
    name: str
    kind: str
    inputs: list[Field]
    outputs: list[Field]
    stages: list
    ref: Callable | None = None     # ref(dict name -> logical value) -> dict name -> logical value
    cost: Cost = dc_field(default_factory=Cost)
    params: dict = dc_field(default_factory=dict)


class Circuit:
    """A graph of blocks over named fields, plus the machine vocabulary.

    Build with `c.input(field)` (fields every machine token carries), the block library
    (`gpu_layers.craft.blocks`) and `c.token(name, **values)` / `c.logit(token, lin)`; compile with
    `gpu_layers.craft.assemble.compile_circuit(c, config)`.
    """

    def __init__(self, name: str = "circuit"):
        self.name = name
        self.recycle = False        # whether the assembler reuses dead fields' residual dims (recycle.py)
        self.layout = Layout()
        self.inputs: list[Field] = []
        self.blocks: list[Block] = []
        self.stages: list = []
        self.producer: dict[str, object] = {}   # field name -> stage (the first, for a shared read)
        self.writers: dict[str, list] = {}      # field name -> every stage writing it (shared reads: several)
        self.tokens: list[tuple[str, dict]] = []
        self.logits: dict[str, Lin] = {}
        self.default_token_values: dict[str, object] = {}

    # ---- fields ---------------------------------------------------------------------------
    @property
    def one(self) -> Field:
        return self.layout.one

    def input(self, f: Field, default=None) -> Field:
        """A field every machine token carries (from the embedding). `default`: its value in tokens
        that do not name it (every token must carry a valid code: the norm depends on it)."""
        self.layout.add(f, born=-1)
        self.inputs.append(f)
        if default is not None:
            self.default_token_values[f.name] = default
        return f

    def new_field(self, f: Field) -> Field:
        """A field some stage of this circuit will write (its depth is set by the scheduler)."""
        self.layout.add(f)
        return f

    def field(self, name: str) -> Field:
        return self.layout.fields[name]

    def unique(self, base: str) -> str:
        if base not in self.layout.fields:
            return base
        k = 1
        while f"{base}_{k}" in self.layout.fields:
            k += 1
        return f"{base}_{k}"

    # ---- stages and blocks ----------------------------------------------------------------
    def add_stage(self, stage):
        for f in stage.outputs:
            if f.name in self.producer and not (_shared_read(self.producer[f.name], f)
                                                and _shared_read(stage, f)):
                raise CircuitError(f"field {f.name!r} is written by two stages "
                                   f"({self.producer[f.name].name}, {stage.name}); fields are written once "
                                   f"(but a rail3 read field by memory ports that all have a read enable)")
            if f.name not in self.layout.fields:
                raise CircuitError(f"stage {stage.name}: output field {f.name!r} not in the layout")
            self.producer.setdefault(f.name, stage)
            self.writers.setdefault(f.name, []).append(stage)
        self.stages.append(stage)
        return stage

    def add_block(self, block: Block) -> Block:
        self.blocks.append(block)
        return block

    # ---- vocabulary -------------------------------------------------------------------------
    def token(self, name: str, **values) -> int:
        """Add a machine token whose embedding row carries these input-field values."""
        unknown = [k for k in values if k not in {f.name for f in self.inputs}]
        if unknown:
            raise CircuitError(f"token {name}: {unknown} are not input fields")
        self.tokens.append((name, values))
        return len(self.tokens) - 1

    def logit(self, token: str, lin: Lin):
        """The machine token's LM-head row: the logit is `lin` of the final residual."""
        self.logits[token] = lin


def _shared_read(stage, f: Field) -> bool:
    """Whether `stage` may share writing field f with other stages: a rail3 read of memory ports
    whose every read of it is enabled by an exact-zero flag (the caller enables one at a time, so
    the reads add up to the enabled one's: craft.blocks.memory)."""
    if getattr(stage, "kind", None) != "mixer" or f.enc != "rail3":
        return False
    ports = [p for p in stage.ports if any(o.name == f.name for o in p.out)]
    return bool(ports) and all(p.re is not None for p in ports)
