"""Helpers every block uses: build one MLP stage as boolean outputs of threshold steps."""
from __future__ import annotations

from ..circuit import Block, Circuit, CircuitError, Cost, MLPStage, Step
from ..fields import Field, Lin, LayoutError


class MLPBuilder:
    """Collects the steps of one MLP stage and writes each logical output in its field's encoding.

    A boolean output is `c0 + sum_k c_k [t_k > 0]` (a linear combination of threshold steps whose
    value is 0 or 1 on every valid input). Encodings: bits (+-1: 2*value - 1, via the shared bias
    neuron), dual (rail+ = value, rail- = 1 - value; a single-step output gets its rail- from the
    complementary step so both rails have exact zeros), onehot entries (value).
    """

    def __init__(self, c: Circuit, name: str):
        self.c, self.name = c, name
        self.steps: list[Step] = []
        self.bias: dict[int, float] = {}
        self.outputs: list[Field] = []

    def _out(self, f: Field):
        if f not in self.outputs:
            self.outputs.append(f)

    def _add(self, terms, dim: int, scale: float):
        for t, m, ck in terms:
            if ck != 0.0:
                self.steps.append(Step(t, m, {dim: scale * ck}))

    def _bias(self, dim: int, v: float):
        if v != 0.0:
            self.bias[dim] = self.bias.get(dim, 0.0) + v

    def boolean(self, f: Field, i: int, terms: list[tuple[Lin, float, float]], c0: float = 0.0):
        """Write logical bit/entry i of field f := c0 + sum(ck * [t > 0]) for (t, margin, ck) in terms."""
        self._out(f)
        if f.enc == "bits":
            d = f.start + i
            self._add(terms, d, 2.0)
            self._bias(d, 2.0 * c0 - 1.0)
        elif f.enc == "dual":
            dp, dn = f.start + 2 * i, f.start + 2 * i + 1
            self._add(terms, dp, 1.0)
            self._bias(dp, c0)
            if len(terms) == 1 and c0 == 0.0 and terms[0][2] == 1.0:
                t, m, _ = terms[0]
                self._add([(-t, m, 1.0)], dn, 1.0)
            elif len(terms) == 1 and c0 == 1.0 and terms[0][2] == -1.0:
                t, m, _ = terms[0]
                self._add([(t, m, 1.0)], dn, 1.0)
            else:
                self._add(terms, dn, -1.0)
                self._bias(dn, 1.0 - c0)
        elif f.enc == "onehot":
            d = f.start + i
            self._add(terms, d, 1.0)
            self._bias(d, c0)
        else:
            raise LayoutError(f"MLP outputs cannot be written in encoding {f.enc} ({f.name})")

    def threshold(self, f: Field, i: int, t: Lin, margin: float = 0.5):
        self.boolean(f, i, [(t, margin, 1.0)])

    def build(self) -> MLPStage:
        if not self.steps and not self.bias:
            raise CircuitError(f"stage {self.name} computes nothing")
        st = MLPStage(self.name, self.steps, self.bias, list(self.outputs))
        self.c.add_stage(st)
        return st


def symmetric_terms(s: Lin, table: list[int]) -> tuple[list[tuple[Lin, float, float]], float]:
    """A function of an integer sum s in [0, len(table)-1] as steps: table[0] + sum_k (table[k]-table[k-1]) [s >= k]."""
    terms = []
    for k in range(1, len(table)):
        dk = table[k] - table[k - 1]
        if dk:
            terms.append((s - (k - 0.5), 0.5, float(dk)))
    return terms, float(table[0])


def out_field(c: Circuit, name: str, enc: str, n: int) -> Field:
    return c.new_field(Field(c.unique(name), enc, n))


def finish(c: Circuit, name: str, kind: str, inputs, outputs, stages, ref, params=None, depth=None) -> Block:
    """Register a block with its cost (neurons: 2 per step, +1 when it needs the shared bias neuron)."""
    cost = Cost()
    for st in stages:
        if st.kind == "mlp":
            cost.neurons += st.neurons + (1 if st.bias else 0)
        else:
            for p in st.ports:
                cost.ports += 1
                cost.value_dims += 2 * p.wbits * p.lanes
                cost.key_slots = max(cost.key_slots, p.slots)
    cost.depth = depth if depth is not None else len(stages)
    b = Block(name, kind, list(inputs), list(outputs), list(stages), ref, cost, dict(params or {}))
    c.add_block(b)
    return b
