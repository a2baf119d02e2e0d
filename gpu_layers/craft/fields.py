"""Named residual fields, linear forms over them, and the layout that allocates their dims.

Every value the compiled layers carry lives in a *field*: a named group of residual dims with an
encoding. Encodings (raw values in the residual, which every RMSNorm returns unchanged because the
compiler sets each norm's weight to the residual's known RMS):

  one      1 dim, always 1.0: the only source of biases
  ballast  1 dim, always BALLAST, read by no weight: it makes the residual's sum of squares large
           (BALLAST^2), so the small errors that fp32 leaves in the other fields' values move each
           norm's scale by that much less (docs/machine.md section 37); opt-in (Layout.add_ballast)
  bits     n dims, each +-1 (bit b is 2b-1)
  dual     2n dims, rails (1,0) for b=1, (0,1) for b=0; the zero rail is an exact 0
  onehot   n dims, exactly one is 1, the rest exact 0
  rail3    2n dims, a memory read: (+.5,-.5) b=1, (-.5,+.5) b=0, (-.5,-.5) absent (unwritten /
           read disabled); every state has sum of squares 0.5 per bit; bit(i) = A + .5 reads an
           absent word as 0
  scalar   n dims of analog values: allowed to be declared, refused in any layout whose norm must be
           known (its sum of squares depends on data)

Each encoding has a data-independent sum of squares (`Field.sumsq`), so the compiler knows every
RMSNorm's scale at compile time; `Layout.sumsq_at` adds up the fields alive at a point in depth.

A `Lin` is a linear form over residual dims plus a constant (which the compiler reads from the
`one` field): the only thing a weight row can compute. Blocks build their weights from the `Lin`s
that fields hand out (`Field.bit(i)`: the 0/1 value of logical bit i, etc.).
"""
from __future__ import annotations

from dataclasses import dataclass, field as dc_field

import numpy as np

ENCODINGS = ("one", "ballast", "bits", "dual", "onehot", "rail3", "scalar")
CONSTANT_ENCODINGS = ("one", "ballast")   # written by every token's embedding, alive to the end
MARGIN = 0.25  # a decoded dim must lie within this distance of its code value
BALLAST = 1024.0  # 2^20 of sum of squares: a power of two, so its square and sums of codes stay exact


class LayoutError(ValueError):
    """The layout is invalid: unknown field, double write, or a norm that would depend on data."""


@dataclass
class Lin:
    """sum(coef[d] * x[d]) + const, over residual dims d (const rides on the `one` field)."""

    coef: dict[int, float] = dc_field(default_factory=dict)
    const: float = 0.0

    def __add__(self, other):
        if isinstance(other, (int, float)):
            return Lin(dict(self.coef), self.const + other)
        c = dict(self.coef)
        for d, v in other.coef.items():
            c[d] = c.get(d, 0.0) + v
        return Lin(c, self.const + other.const)

    __radd__ = __add__

    def __neg__(self):
        return Lin({d: -v for d, v in self.coef.items()}, -self.const)

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, k: float):
        return Lin({d: v * k for d, v in self.coef.items()}, self.const * k)

    __rmul__ = __mul__

    def dims(self) -> set[int]:
        return {d for d, v in self.coef.items() if v != 0.0}

    def eval(self, x: np.ndarray) -> np.ndarray:
        """Evaluate on raw residual rows x[..., W] (for the Python side of tests)."""
        out = np.full(x.shape[:-1], self.const, dtype=np.float64)
        for d, v in self.coef.items():
            out = out + v * x[..., d]
        return out


def lsum(items) -> Lin:
    out = Lin()
    for it in items:
        out = out + it
    return out


@dataclass
class Field:
    """A named group of residual dims. `start` is set by the Layout."""

    name: str
    enc: str
    n: int = 1
    start: int = -1
    doc: str = ""

    def __post_init__(self):
        if self.enc not in ENCODINGS:
            raise LayoutError(f"field {self.name}: unknown encoding {self.enc!r}")
        if self.enc in CONSTANT_ENCODINGS and self.n != 1:
            raise LayoutError(f"the {self.enc} field has one dim")
        if self.n < 1:
            raise LayoutError(f"field {self.name}: n must be >= 1")

    # ---- geometry -------------------------------------------------------------------------
    @property
    def dims(self) -> int:
        return 2 * self.n if self.enc in ("dual", "rail3") else self.n

    @property
    def stop(self) -> int:
        return self.start + self.dims

    @property
    def sumsq(self) -> float | None:
        """Sum of squares of the field's raw values; the same for every valid code (None: data)."""
        return {"one": 1.0, "ballast": BALLAST ** 2, "bits": float(self.n), "dual": float(self.n), "onehot": 1.0,
                "rail3": 0.5 * self.n, "scalar": None}[self.enc]

    def _d(self, k: int) -> int:
        if self.start < 0:
            raise LayoutError(f"field {self.name} has no dims yet (add it to a Layout)")
        return self.start + k

    # ---- linear read-outs (what weights see) ------------------------------------------------
    def bit(self, i: int) -> Lin:
        """Logical bit i as a 0/1 linear form (bits, dual, rail3 when present)."""
        self._check_index(i)
        if self.enc == "bits":
            return Lin({self._d(i): 0.5}, 0.5)
        if self.enc == "dual":
            return Lin({self._d(2 * i): 1.0})
        if self.enc == "rail3":                      # A + 0.5: 1, 0, and 0 when absent
            return Lin({self._d(2 * i): 1.0}, 0.5)
        if self.enc == "onehot":
            return self.hot(i)
        raise LayoutError(f"field {self.name} ({self.enc}) has no bits")

    def nbit(self, i: int) -> Lin:
        """1 - bit(i); for dual it is the other rail (an exact 0 when the bit is 1)."""
        if self.enc == "dual":
            self._check_index(i)
            return Lin({self._d(2 * i + 1): 1.0})
        return 1.0 - self.bit(i)

    def pm(self, i: int) -> Lin:
        """Logical bit i as a +-1 form."""
        return 2.0 * self.bit(i) - 1.0

    def hot(self, j: int) -> Lin:
        if self.enc != "onehot":
            raise LayoutError(f"field {self.name} ({self.enc}) is not one-hot")
        self._check_index(j)
        return Lin({self._d(j): 1.0})

    def present(self, i: int) -> Lin:
        """rail3: 1 when bit i was read from a written cell, 0 when absent."""
        if self.enc != "rail3":
            raise LayoutError(f"field {self.name} is not a memory read")
        return Lin({self._d(2 * i): 1.0, self._d(2 * i + 1): 1.0}, 1.0)

    def flag(self) -> Lin:
        """An enable that is an *exact* 0 when off (a single rail): dual bit 0's rail or a 1-dim one-hot."""
        if self.enc == "dual" and self.n == 1:
            return Lin({self._d(0): 1.0})
        if self.enc == "one":
            return Lin({self._d(0): 1.0})
        raise LayoutError(f"field {self.name}: an exact-zero flag needs a 1-bit dual field")

    def word(self) -> list[Lin]:
        return [self.bit(i) for i in range(self.n)]

    def _check_index(self, i):
        if not 0 <= i < self.n:
            raise LayoutError(f"field {self.name}: index {i} out of range [0, {self.n})")

    # ---- codes (what tokens carry / tests decode) -------------------------------------------
    def encode(self, value) -> np.ndarray:
        """Raw dims for one logical value: int word (bits/dual), index (onehot), int or None (rail3)."""
        v = np.zeros(self.dims, dtype=np.float64)
        if self.enc == "one":
            v[0] = 1.0
        elif self.enc == "ballast":
            v[0] = BALLAST
        elif self.enc == "bits":
            for i in range(self.n):
                v[i] = 1.0 if (int(value) >> i) & 1 else -1.0
        elif self.enc == "dual":
            for i in range(self.n):
                b = (int(value) >> i) & 1
                v[2 * i], v[2 * i + 1] = (1.0, 0.0) if b else (0.0, 1.0)
        elif self.enc == "onehot":
            if not 0 <= int(value) < self.n:
                raise LayoutError(f"{self.name}: one-hot index {value} out of range")
            v[int(value)] = 1.0
        elif self.enc == "rail3":
            for i in range(self.n):
                if value is None:
                    v[2 * i], v[2 * i + 1] = -0.5, -0.5
                else:
                    b = (int(value) >> i) & 1
                    v[2 * i], v[2 * i + 1] = (0.5, -0.5) if b else (-0.5, 0.5)
        else:
            v[:] = np.asarray(value, dtype=np.float64)
        return v

    def encode_many(self, values) -> np.ndarray:
        """Vectorized encode of an array of logical values (bits/dual words, one-hot indices) -> (N, dims)."""
        v = np.asarray(values, dtype=np.int64)
        N = v.shape[0]
        if self.enc in CONSTANT_ENCODINGS:
            return np.full((N, 1), self.encode(None)[0])
        if self.enc == "onehot":
            if (v < 0).any() or (v >= self.n).any():
                raise LayoutError(f"{self.name}: one-hot index out of range")
            return np.eye(self.n)[v]
        b = ((v[:, None] >> np.arange(self.n)) & 1).astype(np.float64)
        if self.enc == "bits":
            return 2.0 * b - 1.0
        if self.enc == "dual":
            return np.stack([b, 1.0 - b], -1).reshape(N, 2 * self.n)
        if self.enc == "rail3":                      # -1 (or None) = absent
            pair = np.stack([b - 0.5, 0.5 - b], -1).reshape(N, 2 * self.n)
            pair[v < 0] = -0.5
            return pair
        raise LayoutError(f"{self.name}: encode_many does not handle {self.enc}")

    def decode(self, raw: np.ndarray):
        """raw[..., dims] -> (values, ok): logical values (ints; rail3 absent = -1) and whether every
        dim lies within MARGIN of its code value (a strict re-digitization check)."""
        raw = np.asarray(raw, dtype=np.float64)
        sh = raw.shape[:-1]
        if self.enc == "bits":
            b = raw > 0
            val = (b.astype(np.int64) << np.arange(self.n)).sum(-1)
            ok = (np.abs(np.abs(raw) - 1.0) <= MARGIN).all(-1)
            return val, ok
        if self.enc == "dual":
            r = raw.reshape(*sh, self.n, 2)
            b = r[..., 0] > r[..., 1]
            val = (b.astype(np.int64) << np.arange(self.n)).sum(-1)
            ideal = np.stack([b, ~b], -1).astype(np.float64)
            ok = (np.abs(r - ideal) <= MARGIN).all((-1, -2))
            return val, ok
        if self.enc == "onehot":
            val = raw.argmax(-1)
            ideal = np.eye(self.n)[val]
            ok = (np.abs(raw - ideal) <= MARGIN).all(-1)
            return val, ok
        if self.enc == "rail3":
            r = raw.reshape(*sh, self.n, 2)
            present = (r[..., 0] + r[..., 1]) > -0.5
            b = r[..., 0] > r[..., 1]
            val = (b.astype(np.int64) << np.arange(self.n)).sum(-1)
            allp, nonep = present.all(-1), (~present).all(-1)
            val = np.where(allp, val, -1)
            ideal = np.where(present[..., None], np.stack([b, ~b], -1) - 0.5, -0.5)
            ok = (np.abs(r - ideal) <= MARGIN).all((-1, -2)) & (allp | nonep)
            return val, ok
        if self.enc in CONSTANT_ENCODINGS:
            c = self.encode(None)[0]
            return raw[..., 0], (np.abs(raw[..., 0] - c) <= MARGIN)
        return raw, np.ones(sh, dtype=bool)


# Factories: readable circuit code (`bits("a", 32)`).
def one() -> Field:
    return Field("one", "one", 1)


def bits(name: str, n: int, doc: str = "") -> Field:
    return Field(name, "bits", n, doc=doc)


def dual(name: str, n: int = 1, doc: str = "") -> Field:
    return Field(name, "dual", n, doc=doc)


def onehot(name: str, n: int, doc: str = "") -> Field:
    return Field(name, "onehot", n, doc=doc)


def rail3(name: str, n: int, doc: str = "") -> Field:
    return Field(name, "rail3", n, doc=doc)


def scalar(name: str, n: int = 1, doc: str = "") -> Field:
    return Field(name, "scalar", n, doc=doc)


class Layout:
    """Allocates residual dims [0, W) to fields, in order, and knows when (in depth) each is born.

    Depth positions: -1 = the embedding; layer L's mixer writes at 2L, its MLP at 2L+1. A field is
    written exactly once (SSA); it is alive at every later position, or until the recycle pass
    subtracts it (`dies`). The norm before position p sees every field born at a position < p and
    not subtracted before p.
    """

    def __init__(self):
        self.fields: dict[str, Field] = {}
        self.born: dict[str, int] = {}
        self.dies: dict[str, int] = {}          # field -> the MLP position that subtracts it (recycle)
        self.width = 0
        self.add(one(), born=-1)

    @property
    def one(self) -> Field:
        return self.fields["one"]

    def add_ballast(self) -> Field:
        """The ballast field (see the module docstring): born in the embedding, never read."""
        return self.add(Field("ballast", "ballast", 1, doc="norm ballast"), born=-1)

    @property
    def constants(self) -> list[Field]:
        """The fields every embedding row writes with a fixed value (one, and ballast if added)."""
        return [f for f in self.fields.values() if f.enc in CONSTANT_ENCODINGS]

    def add(self, f: Field, born: int | None = None) -> Field:
        if f.name in self.fields:
            raise LayoutError(f"field {f.name!r} declared twice (fields are written once)")
        f.start = self.width
        self.width += f.dims
        self.fields[f.name] = f
        if born is not None:
            self.born[f.name] = born
        return f

    def set_born(self, name: str, pos: int):
        if name in self.born and self.born[name] != pos:
            raise LayoutError(f"field {name!r} written twice (at {self.born[name]} and {pos})")
        self.born[name] = pos

    def alive_before(self, pos: int) -> list[Field]:
        return [self.fields[n] for n, b in self.born.items() if b < pos and self.dies.get(n, pos) >= pos]

    def sumsq_at(self, pos: int) -> float:
        """The residual's sum of squares seen by the norm in front of depth position `pos`."""
        bad = [f.name for f in self.alive_before(pos) if f.sumsq is None]
        if bad:
            raise LayoutError(f"the norm before depth position {pos} would depend on data: "
                              f"fields {bad} have no fixed sum of squares (re-digitize them first)")
        return float(sum(f.sumsq for f in self.alive_before(pos)))

    def encode(self, values: dict, base: np.ndarray | None = None) -> np.ndarray:
        """One residual row from {field name: logical value} (plus the constants: one = 1, ballast)."""
        x = np.zeros(self.width, dtype=np.float64) if base is None else base.copy()
        for f in self.constants:
            x[f.start:f.stop] = f.encode(None)
        for name, v in values.items():
            f = self.fields[name]
            x[f.start:f.stop] = f.encode(v)
        return x

    def decode(self, name: str, raw: np.ndarray):
        f = self.fields[name]
        return f.decode(raw[..., f.start:f.stop])
