"""The assembler: a pipeline of named passes from a `Circuit` to a `CompiledMachine`.

    validate -> schedule -> recycle -> track_norms -> write_layers -> vocabulary -> machine

* validate: every stage reads only fields that exist and fits one layer; addresses fit the key
  head; read enables are exact-zero flags; tokens carry every input field.
* schedule: list scheduling in dependency order at half-layer granularity (layer L's mixer is
  depth position 2L, its MLP 2L+1); a stage goes to the earliest position of its kind after all its
  producers where the layer's budget (neurons; key head groups) still has room.
* recycle (circuits with `recycle` set; recycle.py): physical dims for the circuit's dims, a dead
  field's dims carrying a later field once linear neurons (circuit.Linear) have subtracted the
  dead value.
* track_norms: the sum of squares of the residual at each of the 2 norms of each layer and at the
  final norm, from the fields alive there (refuses data-dependent norms).
* write_layers: the Qwen3.5 tensors (LAYER_KEYS) of every layer, each weight written from fields to
  fields; RMSNorm weights are set so every norm returns the raw residual values.
* vocabulary: machine-token embedding rows (input fields) and LM-head rows (circuit logits).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field as dc_field

import numpy as np
import torch

from . import physics as P
from .circuit import Circuit, CircuitError, MemoryPort, MLPStage
from .compiled import LAYER_KEYS, CompiledMachine
from .fields import Lin
from .recycle import Recycling, recycle

SHAPE_KEYS = ("intermediate_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
              "linear_value_head_dim", "linear_conv_kernel_dim", "rms_norm_eps")


@dataclass
class Shapes:
    intermediate_size: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    rms_norm_eps: float

    @classmethod
    def of(cls, config) -> "Shapes":
        if isinstance(config, dict):
            get = config.__getitem__
        else:
            get = lambda k: getattr(config, k)  # noqa: E731
        s = cls(**{k: get(k) for k in SHAPE_KEYS})
        if s.linear_num_value_heads % s.linear_num_key_heads:
            raise CircuitError("linear_num_value_heads must be a multiple of linear_num_key_heads")
        return s

    @property
    def group(self) -> int:       # value heads per key head
        return self.linear_num_value_heads // self.linear_num_key_heads

    def asdict(self) -> dict:
        return {k: getattr(self, k) for k in SHAPE_KEYS}


def port_heads(p: MemoryPort, s: Shapes) -> tuple[int, int]:
    """(value heads, key head groups) a port needs: lanes x ceil(wbits / (dv/2)) value heads."""
    bph = s.linear_value_head_dim // 2
    hpw = -(-p.wbits // bph)
    vh = p.lanes * hpw
    return vh, -(-vh // s.group)


def mixer_heads(pl: "LayerPlan", s: Shapes) -> list[tuple[MemoryPort, list[int], list[int]]]:
    """(port, key head groups, value heads) of every port of a layer's mixer, as write_layer places
    them: key group 0 (and its first value head) is the constant head, then the ports in order, each
    on its own key groups; a port's value heads are lane-major (lane l: heads[l*hpw:(l+1)*hpw])."""
    out, next_group = [], 1
    for st in pl.mixer:
        for p in st.ports:
            nvh, ngr = port_heads(p, s)
            groups = list(range(next_group, next_group + ngr))
            next_group += ngr
            heads = [h for g in groups for h in range(g * s.group, (g + 1) * s.group)][:nvh]
            out.append((p, groups, heads))
    return out


@dataclass
class PortPlacement:
    """Where a memory port lives in the compiled layers: for reading its recurrent state."""
    layer: int
    port: MemoryPort
    heads: list[list[int]]          # per lane: the value heads holding its word, low bits first
    bits_per_head: int              # a head holds bits [k * bits_per_head, (k+1) * bits_per_head)


@dataclass
class LayerPlan:
    mixer: list = dc_field(default_factory=list)
    mlp: list = dc_field(default_factory=list)

    def neurons(self) -> int:
        n = sum(st.neurons for st in self.mlp)
        return n + (1 if any(st.bias or st.linear for st in self.mlp) else 0)

    def groups(self, s: Shapes) -> int:
        g = sum(port_heads(p, s)[1] for st in self.mixer for p in st.ports)
        return g + (1 if g else 0)    # + the constant head's group

    def value_heads(self, s: Shapes) -> int:
        v = sum(port_heads(p, s)[0] for st in self.mixer for p in st.ports)
        return v + (1 if v else 0)


@dataclass
class Compiled:
    """The result of compiling a circuit: the machine plus everything needed to read it."""

    circuit: Circuit
    shapes: Shapes
    plans: list[LayerPlan]
    position: dict[str, int]
    machine: CompiledMachine
    sumsq: dict[str, float]
    recycling: Recycling

    def dims(self, name: str) -> np.ndarray:
        """The physical residual dims of a field (the recycle pass may scatter and share them: a
        recycled field's value is only there while it lives)."""
        f = self.layout.fields[name]
        return self.recycling.dmap[f.start:f.stop]

    @property
    def layout(self):
        return self.circuit.layout

    @property
    def num_layers(self) -> int:
        return len(self.plans)

    def encode(self, values: dict) -> np.ndarray:
        """One physical residual row (width without the text flag) from {field: value}."""
        x = np.zeros(self.recycling.width)
        for f in self.layout.constants:
            x[self.dims(f.name)] = f.encode(None)
        for name, v in values.items():
            x[self.dims(name)] = self.layout.fields[name].encode(v)
        return x

    def decode(self, name, raw):
        return self.layout.fields[name].decode(np.asarray(raw)[..., self.dims(name)])

    def port(self, name: str) -> PortPlacement:
        """The layer and value heads of the memory port `name` (its recurrent state: gpu_layers.craft.state)."""
        for L, pl in enumerate(self.plans):
            for p, _, heads in mixer_heads(pl, self.shapes):
                if p.name == name:
                    hpw = len(heads) // p.lanes
                    return PortPlacement(L, p, [heads[l * hpw:(l + 1) * hpw] for l in range(p.lanes)],
                                         self.shapes.linear_value_head_dim // 2)
        raise KeyError(f"no memory port named {name!r}")

    def step_ranges(self) -> dict[str, float]:
        """Per MLP stage: the largest max|t|/margin of its steps (see Step.range); inf for a stage with
        linear neurons (exact at the scale of their lift in fp32 only)."""
        maxabs = {}
        for f in self.layout.fields.values():
            for d in range(f.start, f.stop):
                maxabs[d] = 0.5 if f.enc == "rail3" else 1.0
        return {st.name: (math.inf if st.linear else max((x.range(maxabs) for x in st.steps), default=0.0))
                for pl in self.plans for st in pl.mlp}

    def bf16_unsafe(self) -> list[str]:
        """MLP stages whose thresholds are too wide to stay exact in bf16 (fp32 is exact regardless)."""
        from .circuit import BF16_SAFE_RANGE
        return [n for n, r in self.step_ranges().items() if r > BF16_SAFE_RANGE]

    def report(self) -> str:
        s = self.shapes
        ranges = self.step_ranges()
        lines = [f"machine {self.circuit.name!r}: width W={self.machine.width} (text flag dim "
                 f"{self.machine.text_flag_dim}), {self.num_layers} layers, vocabulary {self.machine.vocab_size}",
                 f"{'layer':>5} {'neurons':>14} {'neur%':>6} {'v-heads':>9} {'vh%':>5} {'k-heads':>9} "
                 f"{'|t|/m':>6}  stages"]
        for i, pl in enumerate(self.plans):
            n, v, g = pl.neurons(), pl.value_heads(s), pl.groups(s)
            names = [f"mix:{st.name}" for st in pl.mixer] + [f"mlp:{st.name}" for st in pl.mlp]
            rg = max([ranges[st.name] for st in pl.mlp], default=0.0)
            lines.append(f"{i:>5} {n:>6}/{s.intermediate_size:<7} {100 * n / s.intermediate_size:>5.1f}% "
                         f"{v:>3}/{s.linear_num_value_heads:<5} {100 * v / s.linear_num_value_heads:>4.0f}% "
                         f"{g:>3}/{s.linear_num_key_heads:<5} {rg:>6.0f}  {', '.join(names)}")
        bad = self.bf16_unsafe()
        lines.append("bf16: " + ("every threshold is narrow enough (exact in bf16 as measured)" if not bad else
                                 f"stages too wide for bf16 (fp32 only): {', '.join(bad)}"))
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# passes

def _field_of_dim(c: Circuit):
    owner = {}
    for f in c.layout.fields.values():
        for d in range(f.start, f.stop):
            owner[d] = f
    return owner


def validate(c: Circuit, s: Shapes) -> None:
    """Fail fast with the list of every problem."""
    problems = []
    owner = _field_of_dim(c)
    inputs = {f.name for f in c.inputs} | {f.name for f in c.layout.constants}
    for st in c.stages:
        for d in st.input_dims():
            f = owner.get(d)
            if f is None:
                problems.append(f"{st.name}: reads dim {d}, which no field owns")
            elif f.name not in inputs and f.name not in c.producer:
                problems.append(f"{st.name}: reads field {f.name}, which nothing writes")
            elif f.enc == "scalar":
                problems.append(f"{st.name}: reads analog field {f.name}")
        if isinstance(st, MLPStage):
            if st.neurons + 1 > s.intermediate_size:
                problems.append(f"{st.name}: {st.neurons} neurons exceed intermediate_size {s.intermediate_size}")
        else:
            g = sum(port_heads(p, s)[1] for p in st.ports) + 1
            if g > s.linear_num_key_heads:
                problems.append(f"{st.name}: needs {g} key heads (with the constant head), "
                                f"only {s.linear_num_key_heads}")
            for p in st.ports:
                if p.slots > s.linear_key_head_dim:
                    problems.append(f"{p.name}: {p.slots} slots > linear_key_head_dim {s.linear_key_head_dim}")
                if p.re is not None:
                    dims = p.re.dims()
                    if (p.re.const != 0.0 or len(dims) != 1
                            or owner[next(iter(dims))].enc not in ("dual", "onehot", "one")):
                        problems.append(f"{p.name}: read enable must be one exact-zero rail (Field.flag())")
    for f in c.layout.fields.values():
        if f.name not in inputs and f.name not in c.producer:
            problems.append(f"field {f.name} is declared but nothing writes it")
    names = {f.name for f in c.inputs}
    for tname, vals in c.tokens:
        missing = names - set(vals) - set(c.default_token_values)
        if missing:
            problems.append(f"token {tname} carries no value for input fields {sorted(missing)}")
    for t in c.logits:
        if t not in [n for n, _ in c.tokens]:
            problems.append(f"logit for unknown token {t}")
    if problems:
        raise CircuitError("circuit does not compile:" + "".join("\n  " + p for p in problems))


def schedule(c: Circuit, s: Shapes) -> tuple[list[LayerPlan], dict[str, int]]:
    """Place every stage in a half-layer (position 2L: layer L's mixer, 2L + 1: its MLP): a list
    scheduler over positions in order. At each position the stages whose inputs are all placed
    below it take the layer's heads or neurons by priority, the longest chain of stages still
    depending on them first (ties in circuit order), so short side chains (prompt registers, the
    dump) never push the long control chain up. A stage too big for any layer gets one alone."""
    owner = _field_of_dim(c)
    deps = {}
    users = {id(st): [] for st in c.stages}
    for st in c.stages:
        ds = set()
        for d in st.input_dims():
            f = owner[d]
            for w in c.writers.get(f.name, ()):
                ds.add(id(w))
        deps[id(st)] = ds
        for d in ds:
            users[d].append(id(st))
    height: dict[int, int] = {}
    for st in reversed(_topological(c.stages, deps)):
        height[id(st)] = 1 + max((height[u] for u in users[id(st)]), default=0)
    order = {id(st): i for i, st in enumerate(c.stages)}
    pos: dict[int, int] = {}
    plans: list[LayerPlan] = []
    remaining = list(c.stages)
    p = 0
    while remaining:
        kind = "mixer" if p % 2 == 0 else "mlp"
        ready = [st for st in remaining if (st.kind == "mixer") == (kind == "mixer")
                 and all(d in pos and pos[d] < p for d in deps[id(st)])]
        ready.sort(key=lambda st: (-height[id(st)], order[id(st)]))
        L = p // 2
        while len(plans) <= L:
            plans.append(LayerPlan())
        pl = plans[L]
        for st in ready:
            if kind == "mlp":
                fits = LayerPlan([], pl.mlp + [st]).neurons() <= s.intermediate_size
                if fits or not pl.mlp:
                    pl.mlp.append(st)
                    pos[id(st)] = p
            else:
                trial = LayerPlan(pl.mixer + [st], [])
                if trial.groups(s) <= s.linear_num_key_heads or not pl.mixer:
                    pl.mixer.append(st)
                    pos[id(st)] = p
        remaining = [st for st in remaining if id(st) not in pos]
        p += 1
        if p > 4 * len(c.stages) + 4:
            raise CircuitError("the circuit has a cycle: " + ", ".join(st.name for st in remaining))
    while plans and not plans[-1].mixer and not plans[-1].mlp:
        plans.pop()
    position = {}
    for st in c.stages:
        position[st.name] = pos[id(st)]
    for name, ws in c.writers.items():          # a shared read is there from its first writer on
        c.layout.set_born(name, min(pos[id(w)] for w in ws))
    _designate_offsets(c, pos)
    return plans, position


def _designate_offsets(c: Circuit, pos: dict):
    """Every read field takes the constant head's -0.5 once, from the earliest-placed port writing it:
    before that port's layer the field is all zeros, which is its norm-invisible 'not born' state,
    and from it on (-.5, -.5) until the enabled read's (+-.5 + .5) arrives: the same sum of squares."""
    first = {}
    for st in sorted((st for st in c.stages if st.kind == "mixer"), key=lambda st: pos[id(st)]):
        for p in st.ports:
            p.offset = [first.setdefault(f.name, (id(p), lane)) == (id(p), lane) for lane, f in enumerate(p.out)]


def _topological(stages, deps) -> list:
    """The stages in an order where every stage comes after the stages it reads."""
    by_id = {id(st): st for st in stages}
    done, out = set(), []
    for st in stages:
        stack = [(id(st), False)]
        while stack:
            k, expanded = stack.pop()
            if k in done:
                continue
            if expanded:
                done.add(k)
                out.append(by_id[k])
                continue
            stack.append((k, True))
            stack.extend((d, False) for d in deps[k] if d not in done)
    return out


def track_norms(c: Circuit, nlayers: int) -> dict[str, float]:
    """Sum of squares at every norm: 'L.input', 'L.post' and 'final'. Raises on a data-dependent one."""
    out = {}
    for L in range(nlayers):
        out[f"{L}.input"] = c.layout.sumsq_at(2 * L)
        out[f"{L}.post"] = c.layout.sumsq_at(2 * L + 1)
    out["final"] = c.layout.sumsq_at(2 * nlayers)
    return out


def _row(lin: Lin, one: int, W: int, dmap, scale: float = 1.0, extra: float = 0.0) -> np.ndarray:
    """A weight row over physical dims (dmap: circuit dim -> physical dim)."""
    r = np.zeros(W)
    for d, v in lin.coef.items():
        r[dmap[d]] += scale * v
    r[dmap[one]] += scale * lin.const + extra
    return r


def _norm_weight(ss: float, W: int, eps: float) -> np.ndarray:
    return np.full(W, math.sqrt(ss / W + eps) - 1.0)


def _addr_rows(f, slots: int, one: int, W: int, dmap) -> list[np.ndarray]:
    """Key/query pre-activations, one row per slot: KEY_L at the addressed slot, <= -KEY_L or 0 elsewhere."""
    rows = []
    for j in range(slots):
        if f is None or isinstance(f, int):
            k = 0 if f is None else f
            rows.append(_row(Lin({}, 1.0 if j == k else 0.0), one, W, dmap, P.KEY_L))
        elif f.enc == "onehot":
            rows.append(_row(f.hot(j), one, W, dmap, P.KEY_L) if j < f.n else np.zeros(W))
        else:
            if j >= (1 << f.n):
                rows.append(np.zeros(W))
                continue
            m = Lin()
            for i in range(f.n):
                m = m + (f.bit(i) if (j >> i) & 1 else 1.0 - f.bit(i))
            rows.append(_row(m - (f.n - 0.5), one, W, dmap, 2.0 * P.KEY_L))
    return rows


def write_layer(c: Circuit, s: Shapes, pl: LayerPlan, ss_in: float, ss_post: float, W: int,
                as_numpy: bool = False, dmap=None) -> dict:
    """One layer's weights, computed in float64 and rounded once to float32: torch tensors, or
    numpy arrays (as_numpy, for the fast executor: the same bits without a round trip). dmap: the
    recycle pass's circuit dim -> physical dim (None: the same)."""
    if dmap is None:
        dmap = np.arange(c.layout.width)
    one = c.layout.one.start
    po = int(dmap[one])

    def row(lin, scale=1.0, extra=0.0):
        return _row(lin, one, W, dmap, scale, extra)
    I, nk, nv = s.intermediate_size, s.linear_num_key_heads, s.linear_num_value_heads
    dk, dv, K = s.linear_key_head_dim, s.linear_value_head_dim, s.linear_conv_kernel_dim
    kd, vd = nk * dk, nv * dv
    qkv = np.zeros((2 * kd + vd, W))
    z = np.zeros((vd, W))
    bb = np.zeros((nv, W))
    aa = np.zeros((nv, W))
    out_proj = np.zeros((W, vd))
    conv = np.zeros((2 * kd + vd, 1, K))
    conv[:, 0, K - 1] = 1.0
    gate = np.zeros((I, W))
    up = np.zeros((I, W))
    down = np.zeros((W, I))

    # ---- mixer: memory ports + the constant head ---------------------------------------------
    if pl.mixer:
        g0, vh0 = 0, 0                               # constant head: key group 0, its first value head
        qkv[g0 * dk + 0, po] = P.KEY_L
        qkv[kd + g0 * dk + 0, po] = P.KEY_L
        qkv[2 * kd + vh0 * dv + 0, po] = P.KEY_L
        bb[vh0, po] = P.BETA_G
        z[vh0 * dv + 0, po] = P.Z_GAIN
        comp = -0.5 / (math.sqrt(dv) * P.Z_GAIN)
        bph = dv // 2
        for p, groups, heads in mixer_heads(pl, s):
            nvh = len(heads)
            qrows = _addr_rows(p.raddr, dk, one, W, dmap)
            krows = _addr_rows(p.waddr, dk, one, W, dmap)
            for g in groups:
                for j in range(dk):
                    qkv[g * dk + j] = qrows[j]
                    qkv[kd + g * dk + j] = krows[j]
            hpw = nvh // p.lanes
            for lane in range(p.lanes):
                dbits, outf = p.data_bits(lane), (p.out[lane] if p.out else None)
                for h in range(hpw):
                    vh = heads[lane * hpw + h]
                    lo, hi = h * bph, min(p.wbits, (h + 1) * bph)
                    nbh = hi - lo
                    kappa = 1.0 / (math.sqrt(dv / nbh) * P.Z_GAIN)
                    for i in range(lo, hi):
                        ip = i - lo
                        rp, rn = 2 * kd + vh * dv + 2 * ip, 2 * kd + vh * dv + 2 * ip + 1
                        # bits: +-100 x -> silu -> (100, -0); dual / rail3: 100 * (bit, not-bit)
                        qkv[rp] = row(dbits[i][0], P.KEY_L)
                        qkv[rn] = row(dbits[i][1], P.KEY_L)
                        if outf is None:         # write-only port: z = 0, the head's output is exactly 0
                            continue
                        zr = row(p.re, P.Z_GAIN) if p.re is not None else row(Lin({}, 1.0), P.Z_GAIN)
                        z[vh * dv + 2 * ip] = zr
                        z[vh * dv + 2 * ip + 1] = zr
                        A, B = dmap[outf.start + 2 * i], dmap[outf.start + 2 * i + 1]
                        out_proj[A, vh * dv + 2 * ip] += kappa
                        out_proj[B, vh * dv + 2 * ip + 1] += kappa
                        if p.offset is None or p.offset[lane]:      # once per read field (schedule)
                            out_proj[A, vh0 * dv] += comp
                            out_proj[B, vh0 * dv] += comp
                    we = p.we[lane]
                    bb[vh] = row(we - 0.5, 2 * P.BETA_G) if we is not None else row(Lin({}, 1.0), P.BETA_G)
                    if p.reset is not None:
                        aa[vh] = row(p.reset, P.RESET_A)

    # ---- MLP: threshold steps + one bias neuron ---------------------------------------------
    k = 0
    bias = {}
    for st in pl.mlp:
        for step in st.steps:
            sc = P.STEP_G / step.margin
            gate[k] = row(step.t, sc, P.STEP_K)
            up[k, po] = 1.0 / P.STEP_K
            gate[k + 1] = row(step.t, sc)
            up[k + 1, po] = 1.0 / P.STEP_K
            for d, v in step.out.items():
                down[dmap[d], k] += v
                down[dmap[d], k + 1] -= v
            k += 2
        for ln in st.linear:                         # silu(t + lift) * one, on silu's identity
            gate[k] = row(ln.t, 1.0, ln.lift)
            up[k, po] = 1.0
            for d, v in ln.out.items():
                down[dmap[d], k] += v
                bias[d] = bias.get(d, 0.0) - v * ln.lift
            k += 1
        for d, v in st.bias.items():
            bias[d] = bias.get(d, 0.0) + v
    if bias:
        gate[k, po] = P.BIAS_K
        up[k, po] = 1.0 / P.BIAS_K
        for d, v in bias.items():
            down[dmap[d], k] += v
        k += 1
    assert k <= I

    if as_numpy:
        t = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731
    else:
        t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    eps = s.rms_norm_eps
    return {
        "input_layernorm.weight": t(_norm_weight(ss_in, W, eps)),
        "linear_attn.in_proj_qkv.weight": t(qkv),
        "linear_attn.conv1d.weight": t(conv),
        "linear_attn.in_proj_z.weight": t(z),
        "linear_attn.in_proj_b.weight": t(bb),
        "linear_attn.in_proj_a.weight": t(aa),
        "linear_attn.dt_bias": t(np.full(nv, P.DT_BIAS)),
        "linear_attn.A_log": t(np.full(nv, P.A_LOG)),
        "linear_attn.norm.weight": t(np.ones(dv)),
        "linear_attn.out_proj.weight": t(out_proj),
        "post_attention_layernorm.weight": t(_norm_weight(ss_post, W, eps)),
        "mlp.gate_proj.weight": t(gate),
        "mlp.up_proj.weight": t(up),
        "mlp.down_proj.weight": t(down),
    }


@dataclass
class SparseRows:
    """A (rows, W) float32 matrix kept as its nonzero entries, row by row (CSR): the machine
    vocabulary's embedding and LM-head rows have a few dozen nonzeros of W, and at the core's
    width the dense pair would be about 12 GB of fp32 at once (compile_fast's memory peak)."""

    ptr: np.ndarray          # (rows + 1,) int64 row starts
    idx: np.ndarray          # int32 column indices, increasing within a row
    val: np.ndarray          # float32 values (no explicit zeros)
    shape: tuple

    @classmethod
    def from_dense_chunks(cls, chunks, W: int) -> "SparseRows":
        ptrs, idxs, vals, n = [np.zeros(1, dtype=np.int64)], [], [], 0
        for M in chunks:
            r, col = np.nonzero(M)
            counts = np.bincount(r, minlength=M.shape[0])
            ptrs.append(ptrs[-1][-1] + np.cumsum(counts))
            idxs.append(col.astype(np.int32))
            vals.append(np.ascontiguousarray(M[r, col], dtype=np.float32))
            n += M.shape[0]
        return cls(np.concatenate(ptrs), np.concatenate(idxs), np.concatenate(vals), (n, W))


_VOCAB_CHUNK = 2048


def vocabulary(c: Circuit, W: int, sparse: bool = False, dmap=None):
    """(token names, embedding rows, LM-head rows): torch float32 matrices, or SparseRows with
    sparse=True (the same float32 values: each row computed in float64 and rounded once)."""
    names = [n for n, _ in c.tokens] or ["<m:nop>"]
    toks = c.tokens or [("<m:nop>", {})]
    one = c.layout.one.start
    if dmap is None:
        dmap = np.arange(c.layout.width)
    src = np.array([d for f in [*c.layout.constants, *c.inputs] for d in range(f.start, f.stop)], dtype=np.int64)
    dst = dmap[src]                  # the embedding writes the inputs and constants: born first, never shared

    def embed_rows(a, b):
        M = np.zeros((b - a, W), dtype=np.float32)
        for i in range(a, b):
            v = dict(c.default_token_values)
            v.update(toks[i][1])
            if not c.tokens:
                v = {f.name: 0 for f in c.inputs}
            M[i - a, dst] = c.layout.encode(v)[src]
        return M

    def unembed_rows(a, b):
        M = np.zeros((b - a, W), dtype=np.float32)
        for i in range(a, b):
            if names[i] in c.logits:
                M[i - a] = _row(c.logits[names[i]], one, W, dmap)
        return M

    n = len(toks)
    if sparse:
        spans = [(a, min(a + _VOCAB_CHUNK, n)) for a in range(0, n, _VOCAB_CHUNK)]
        return (names, SparseRows.from_dense_chunks((embed_rows(a, b) for a, b in spans), W),
                SparseRows.from_dense_chunks((unembed_rows(a, b) for a, b in spans), W))
    return names, torch.from_numpy(embed_rows(0, n)), torch.from_numpy(unembed_rows(0, n))


def _passes(c: Circuit, s: Shapes, check: bool = True, sparse_vocab: bool = False):
    """validate (unless check=False), schedule, norms, the vocabulary and the final norm: what
    compile_circuit and compile_fast share. Returns (plans, position, sumsq, W, names, embed,
    unembed, final); W includes the text flag dim, which no weight reads."""
    if check:
        validate(c, s)
    plans, position = schedule(c, s)
    if not plans:
        plans = [LayerPlan()]
    rec = (recycle(c, plans, position, s.intermediate_size) if c.recycle
           else Recycling.identity(c.layout.width))
    sumsq = track_norms(c, len(plans))
    W = rec.width + 1
    names, embed, unembed = vocabulary(c, W, sparse=sparse_vocab, dmap=rec.dmap)
    final = torch.tensor(_norm_weight(sumsq["final"], W, s.rms_norm_eps), dtype=torch.float32)
    return plans, position, sumsq, rec, names, embed, unembed, final


def _layers(c: Circuit, s: Shapes, plans, sumsq, rec, as_numpy=False):
    """The compiled layers, one at a time."""
    return (write_layer(c, s, pl, sumsq[f"{L}.input"], sumsq[f"{L}.post"], rec.width + 1, as_numpy, rec.dmap)
            for L, pl in enumerate(plans))


def compile_fast(c: Circuit, config, check: bool = True):
    """The compiled circuit straight into the fast executor (gpu_layers.craft.fast), for machines
    whose dense layers would not fit in memory: each layer is written, compacted and dropped
    before the next. The weights are the ones compile_circuit writes (the same passes, the same
    float64 arithmetic rounded once to float32). Returns (FastMachine, token names).
    check=False skips the validator's exactness pass (minutes on wide circuits; compile_circuit
    always runs it): only for a circuit that validated before."""
    from .fast import FastMachine

    s = Shapes.of(config)
    plans, _, sumsq, rec, names, embed, unembed, final = _passes(c, s, check, sparse_vocab=True)
    layers = _layers(c, s, plans, sumsq, rec, as_numpy=True)
    return FastMachine.streamed(s.asdict(), rec.width + 1, layers, embed, unembed, final), names


def compile_circuit(c: Circuit, config) -> Compiled:
    """Run every pass; `config` is a Qwen3.5 text config (or a dict with its SHAPE_KEYS)."""
    s = Shapes.of(config)
    plans, position, sumsq, rec, names, embed, unembed, final = _passes(c, s)
    W = rec.width + 1
    flag = W - 1
    layers = list(_layers(c, s, plans, sumsq, rec))
    for L, lay in enumerate(layers):                  # the text flag dim is never read
        for key in ("linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight", "linear_attn.in_proj_b.weight",
                    "linear_attn.in_proj_a.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight"):
            assert not lay[key][:, flag].any(), (L, key)
    m = CompiledMachine(width=W, layers=layers, embed=embed, unembed=unembed, final_norm=final,
                        token_names=names, text_flag_dim=flag,
                        fields={f.name: (int(rec.dmap[f.start]), int(rec.dmap[f.start]) + f.dims)
                                for f in c.layout.fields.values()
                                if np.array_equal(rec.dmap[f.start:f.stop], rec.dmap[f.start] + np.arange(f.dims))},
                        layer_shapes=s.asdict())
    m.check()
    assert set(layers[0]) == set(LAYER_KEYS)
    return Compiled(c, s, plans, position, m, sumsq, rec)
