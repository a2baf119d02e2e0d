"""Harness shared by the exactness tests and scripts/measure_blocks_bf16.py: drive a compiled circuit
through stock transformers (prefill = chunked path, decode = recurrent path with the cache) on
rows of input-field values, and compare the decoded outputs with independent references
(`INDEPENDENT_REFS`, plain expressions that share nothing with the blocks' own `ref`); the ALU
block's operands, rows and runs (`alu_rows`, `run_alu`: its reference is checked against the
interpreter in tests/test_craft_alu.py)."""
from __future__ import annotations

import numpy as np
import torch

from gpu_layers.hosts import LAYER_BUDGET_KEYS, TINY_2B_LAYERS_CONFIG, TINY_CONFIG

from .assemble import Compiled, compile_circuit
from .machine_model import as_inputs, build_machine_model, run_decode, run_prefill

# Layer budgets the tests compile for (the compiler reads only these keys of a host config):
# LAYERS_2B = Qwen3.5-2B's (the "tiny-2b-layers" host's): every machine the tests check (the
# MACHINES registry, the register-file commit circuit) is compiled for these, so CI tests the very
# machine a 2B build contains. TINY = the "tiny" host's small budgets (8 heads of 32/64, 1536
# neurons): for tests of blocks, memories and budget limits where small heads are the point
# (banking past a key head, several ports per layer, budget failures) or keep sweeps fast.
LAYERS_2B = {k: TINY_2B_LAYERS_CONFIG[k] for k in LAYER_BUDGET_KEYS}
TINY = {k: TINY_CONFIG[k] for k in LAYER_BUDGET_KEYS}


def random_values(f, rng, N):
    """N valid random logical values of an input field."""
    if f.enc == "onehot":
        return rng.integers(0, f.n, N)
    if f.enc in ("bits", "dual") and f.n <= 62:
        return rng.integers(0, 1 << f.n, N, dtype=np.int64)
    raise ValueError(f"no random values for {f.name} ({f.enc}, {f.n})")


def encode_rows(comp: Compiled, values: dict[str, np.ndarray]) -> np.ndarray:
    """(N, W) residual rows: the constants (`one` = 1, ballast), each input field encoded, the text flag dim 0."""
    N = len(next(iter(values.values())))
    missing = [f.name for f in comp.circuit.inputs if f.name not in values]
    if missing:
        raise ValueError(f"rows must carry every input field; missing {missing}")
    X = np.zeros((N, comp.machine.width))
    for f in comp.layout.constants:
        X[:, comp.dims(f.name)] = f.encode(None)
    for name, v in values.items():
        X[:, comp.dims(name)] = comp.layout.fields[name].encode_many(v)
    return X


def run_paths(comp: Compiled, X: np.ndarray, dtype=torch.float32, paths=("prefill", "decode"), model=None):
    """X (B, T, W) -> {path: hidden (B, T, W) as float64 numpy}."""
    model = model or build_machine_model(comp.machine, dtype=dtype)
    x = as_inputs(X, model)
    out = {}
    for p in paths:
        h = run_prefill(model, x) if p == "prefill" else run_decode(model, x)
        out[p] = h.float().numpy().astype(np.float64)
    return out


def compare_outputs(comp: Compiled, hidden: np.ndarray, expected: dict[str, np.ndarray]):
    """{field: (wrong values, margin failures)} over all rows."""
    res = {}
    flat = hidden.reshape(-1, hidden.shape[-1])
    for name, exp in expected.items():
        val, ok = comp.decode(name, flat)
        res[name] = (int((val != np.asarray(exp).reshape(-1)).sum()), int((~ok).sum()))
    return res


def expected_outputs(blocks, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run every block's Python reference on every row."""
    N = len(next(iter(values.values())))
    exp = {}
    cols = {n: [int(x) for x in v] for n, v in values.items()}
    for blk in blocks:
        for f in blk.outputs:
            exp[f.name] = np.zeros(N, dtype=np.int64)
        names = [f.name for f in blk.inputs]
        for k in range(N):
            r = blk.ref({n: cols[n][k] for n in names})
            for n, v in r.items():
                exp[n][k] = v
    return exp


def _mix_b(rng, av, bv):
    """b: equal to a, one bit off, close (+-300), ~a +- 2 (long carry/borrow chains), uniform."""
    N = len(av)
    kind = rng.integers(0, 5, N)
    return np.select([kind == 0, kind == 1, kind == 2, kind == 3],
                     [av, av ^ (1 << rng.integers(0, 32, N)), (av + rng.integers(-300, 300, N)) % 2 ** 32,
                      ((~av) + rng.integers(-2, 3, N)) % 2 ** 32], bv)


def _case_gate(op, n):
    def make(c):
        from . import blocks as B
        from .fields import dual
        xs = [c.input(dual(f"x{i}", 1)) for i in range(n)]
        return B.gate(c, op, xs, name="y"), None
    return make


def _two_words(c, enc_b="bits"):
    from .fields import bits, dual
    return c.input(bits("a", 32)), c.input(bits("b", 32) if enc_b == "bits" else dual("b", 32))


def _vals_ab(rng, N, v):
    v["b"] = _mix_b(rng, v["a"], v["b"])
    v["a"] = np.where(rng.random(N) < 0.05, 0xDEADBEEF, v["a"])
    return v


def _case(fn, vals=None):
    def make(c):
        return fn(c), vals
    return make


def _block_cases():
    from . import blocks as B
    from .fields import bits, dual, onehot, rail3
    cases = {}
    for op, n in [("AND", 3), ("OR", 4), ("XOR", 2), ("XOR", 5), ("NAND", 2), ("NOR", 3), ("XNOR", 3), ("NOT", 1)]:
        cases[f"gate_{op}{n}"] = _case_gate(op, n)
    cases["threshold6"] = _case(lambda c: B.threshold_gate(
        c, [c.input(bits(f"t{i}", 1)) for i in range(6)], [1, 2, -1, 3, 1, -2], 2, name="y"))
    for op in ("AND", "OR", "XOR"):
        cases[f"bitwise_{op}32"] = _case(lambda c, op=op: B.bitwise(c, op, *_two_words(c, "dual"), name="y"))
    cases["bitwise_NOT32"] = _case(lambda c: B.bitwise(c, "NOT", c.input(bits("a", 32)), name="y"))
    cases["equal32"] = _case(lambda c: B.equal(c, *_two_words(c), name="y"), _vals_ab)
    cases["equal32_const"] = _case(lambda c: B.equal(c, _two_words(c)[0], 0xDEADBEEF, name="y"), _vals_ab)
    cases["compare32_u"] = _case(lambda c: B.compare(c, *_two_words(c), name="y"), _vals_ab)
    cases["compare32_s"] = _case(lambda c: B.compare(c, *_two_words(c), signed=True, name="y"), _vals_ab)

    def mux(c, sel):
        words = [c.input(bits(f"w{k}", 32)) for k in range(4)]
        return B.mux(c, c.input(sel), words, name="y")
    cases["equal32_tree16"] = _case(lambda c: B.equal(c, *_two_words(c), fanin=16, name="y"), _vals_ab)
    cases["compare32_u_prefix"] = _case(lambda c: B.compare(c, *_two_words(c), mode="prefix", name="y"), _vals_ab)
    cases["compare32_s_prefix"] = _case(lambda c: B.compare(c, *_two_words(c), signed=True, mode="prefix",
                                                           name="y"), _vals_ab)
    cases["mux4x32_onehot"] = _case(lambda c: mux(c, onehot("s", 4)))
    cases["mux4x32_binary"] = _case(lambda c: mux(c, bits("s", 2)))
    cases["add32"] = _case(lambda c: B.adder(c, *_two_words(c), carry_out=True, name="y"), _vals_ab)
    cases["sub32"] = _case(lambda c: B.adder(c, *_two_words(c), sub=True, carry_out=True, name="y"), _vals_ab)
    cases["add32_chunk4"] = _case(lambda c: B.adder(c, *_two_words(c, "dual"), chunk=4, name="y"), _vals_ab)
    cases["add32_prefix"] = _case(lambda c: B.prefix_adder(c, *_two_words(c), name="y"), _vals_ab)
    cases["sub32_prefix"] = _case(lambda c: B.prefix_adder(c, *_two_words(c), sub=True, name="y"), _vals_ab)
    cases["add8_1stage"] = _case(lambda c: B.adder(c, c.input(bits("a", 8)), c.input(dual("b", 8)), name="y"))
    cases["shl32_binary"] = _case(lambda c: B.shift(c, c.input(bits("a", 32)), c.input(bits("k", 5)), name="y"))
    cases["shr32_binary"] = _case(lambda c: B.shift(c, c.input(bits("a", 32)), c.input(bits("k", 5)),
                                                   left=False, name="y"))
    cases["sar32_binary"] = _case(lambda c: B.shift(c, c.input(bits("a", 32)), c.input(bits("k", 5)),
                                                   left=False, fill="sign", name="y"))
    cases["shl16_onehot"] = _case(lambda c: B.shift(c, c.input(bits("a", 16)), c.input(onehot("k", 16)), name="y"))

    def rb_vals(rng, N, v):
        v["r"] = np.where(rng.random(N) < 0.3, -1, rng.integers(0, 2 ** 16, N))   # -1: absent
        return v
    cases["read_bits16"] = _case(lambda c: B.read_bits(c, c.input(rail3("r", 16)), name="y", with_present=True),
                                 rb_vals)
    return cases


BLOCK_CASES = _block_cases()


# Independent references for every block case: plain integer / boolean expressions over the input
# values, written from what each block is meant to compute. They share nothing with the blocks
# (no truth tables, no `Block.ref`), so a wrong table in a block cannot agree with them.
M32 = (1 << 32) - 1


def _s32(x):
    """Two's-complement value of 32-bit words (int64 arrays)."""
    return np.where(x >= 1 << 31, x - (1 << 32), x)


def _carries(a, b, sub):
    """Bit k-1 (k = 1..4): the carry out of the low 8k bits of a + b, or of a + ~b + 1 for a - b
    (no borrow: a's low 8k bits >= b's)."""
    out = np.zeros_like(a)
    for k in range(1, 5):
        lo = (1 << (8 * k)) - 1
        c = (a & lo) >= (b & lo) if sub else (a & lo) + (b & lo) > lo
        out |= c.astype(np.int64) << (k - 1)
    return out


INDEPENDENT_REFS = {
    "gate_AND3": lambda v: {"y": v["x0"] & v["x1"] & v["x2"]},
    "gate_OR4": lambda v: {"y": v["x0"] | v["x1"] | v["x2"] | v["x3"]},
    "gate_XOR2": lambda v: {"y": v["x0"] ^ v["x1"]},
    "gate_XOR5": lambda v: {"y": v["x0"] ^ v["x1"] ^ v["x2"] ^ v["x3"] ^ v["x4"]},
    "gate_NAND2": lambda v: {"y": 1 - (v["x0"] & v["x1"])},
    "gate_NOR3": lambda v: {"y": 1 - (v["x0"] | v["x1"] | v["x2"])},
    "gate_XNOR3": lambda v: {"y": 1 - (v["x0"] ^ v["x1"] ^ v["x2"])},
    "gate_NOT1": lambda v: {"y": 1 - v["x0"]},
    "threshold6": lambda v: {"y": (v["t0"] + 2 * v["t1"] - v["t2"] + 3 * v["t3"] + v["t4"] - 2 * v["t5"]
                                   >= 2).astype(np.int64)},
    "bitwise_AND32": lambda v: {"y": v["a"] & v["b"]},
    "bitwise_OR32": lambda v: {"y": v["a"] | v["b"]},
    "bitwise_XOR32": lambda v: {"y": v["a"] ^ v["b"]},
    "bitwise_NOT32": lambda v: {"y": M32 - v["a"]},
    "equal32": lambda v: {"y": (v["a"] == v["b"]).astype(np.int64)},
    "equal32_const": lambda v: {"y": (v["a"] == 0xDEADBEEF).astype(np.int64)},
    "compare32_u": lambda v: {"y": (v["a"] < v["b"]).astype(np.int64)},
    "compare32_s": lambda v: {"y": (_s32(v["a"]) < _s32(v["b"])).astype(np.int64)},
    "equal32_tree16": lambda v: {"y": (v["a"] == v["b"]).astype(np.int64)},
    "compare32_u_prefix": lambda v: {"y": (v["a"] < v["b"]).astype(np.int64)},
    "compare32_s_prefix": lambda v: {"y": (_s32(v["a"]) < _s32(v["b"])).astype(np.int64)},
    "mux4x32_onehot": lambda v: {"y": np.choose(v["s"], [v["w0"], v["w1"], v["w2"], v["w3"]])},
    "mux4x32_binary": lambda v: {"y": np.choose(v["s"], [v["w0"], v["w1"], v["w2"], v["w3"]])},
    "add32": lambda v: {"y": (v["a"] + v["b"]) % (1 << 32), "y_carry": _carries(v["a"], v["b"], False)},
    "sub32": lambda v: {"y": (v["a"] - v["b"]) % (1 << 32), "y_carry": _carries(v["a"], v["b"], True)},
    "add32_chunk4": lambda v: {"y": (v["a"] + v["b"]) % (1 << 32)},
    "add32_prefix": lambda v: {"y": (v["a"] + v["b"]) % (1 << 32)},
    "sub32_prefix": lambda v: {"y": (v["a"] - v["b"]) % (1 << 32)},
    "add8_1stage": lambda v: {"y": (v["a"] + v["b"]) % 256},
    "shl32_binary": lambda v: {"y": (v["a"] << v["k"]) % (1 << 32)},
    "shr32_binary": lambda v: {"y": v["a"] >> v["k"]},
    "sar32_binary": lambda v: {"y": (_s32(v["a"]) >> v["k"]) % (1 << 32)},
    "shl16_onehot": lambda v: {"y": (v["a"] << v["k"]) % (1 << 16)},
    "read_bits16": lambda v: {"y": np.where(v["r"] < 0, 0, v["r"]), "y_present": (v["r"] >= 0).astype(np.int64)},
}


def independent_expected(label: str, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The expected outputs of block case `label` on rows of input values (INDEPENDENT_REFS)."""
    v = {n: np.asarray(x, dtype=np.int64) for n, x in values.items()}
    return {n: np.asarray(x, dtype=np.int64) for n, x in INDEPENDENT_REFS[label](v).items()}


def lean_config(c) -> dict:
    """The smallest config that holds an MLP-only circuit's widest stage, with one tiny linear head
    (fast sweeps: the compiler reads any config; on CPU the chunked delta rule's batched triangular
    solves dominate, so fewer/smaller heads make the prefill path cheap)."""
    from .circuit import MLPStage
    widest = max([st.neurons for st in c.stages if isinstance(st, MLPStage)] + [1])
    I = -(-(widest + 1) // 64) * 64
    return dict(TINY, intermediate_size=I, linear_num_key_heads=1, linear_num_value_heads=1,
                linear_key_head_dim=4, linear_value_head_dim=4)


def block_case(label: str, config=None):
    """(Compiled, block, values(rng, N)) for one library block alone in its own circuit."""
    from .circuit import Circuit
    c = Circuit(label)
    blk, extra = BLOCK_CASES[label](c)
    comp = compile_circuit(c, config or lean_config(c))

    def values(rng, N):
        v = {}
        for f in c.inputs:
            v[f.name] = (np.full(N, -1) if f.enc == "rail3" else random_values(f, rng, N))
        return extra(rng, N, v) if extra else v
    return comp, blk, values


def run_block(label: str, N=10_240, dtype=torch.float32, seed=0, config=None,
              shapes={"prefill": 160, "decode": 512}):
    """Drive one block alone on N random inputs on both paths (prefill as 160 sequences of 64 tokens,
    one chunk each; decode as 512 sequences of 20 tokens) and compare with INDEPENDENT_REFS. Returns ({path: (wrong outputs, margin failures)}, block, comp)."""
    comp, blk, values = block_case(label, config)
    rng = np.random.default_rng(seed)
    nbits = sum(f.n for f in comp.circuit.inputs)
    if all(f.enc in ("bits", "dual") for f in comp.circuit.inputs) and (1 << nbits) <= N:
        # fewer inputs than N: all of them, once
        N = 1 << nbits
        allv = np.arange(N)
        v, sh = {}, 0
        for f in comp.circuit.inputs:
            v[f.name] = (allv >> sh) & ((1 << f.n) - 1)
            sh += f.n
        shapes = {"prefill": max(1, N // 64), "decode": max(1, N // 4)}
    else:
        v = values(rng, N)
    X = encode_rows(comp, v)
    exp = independent_expected(label, v)
    missing = {f.name for f in blk.outputs} - set(exp)
    if missing:
        raise ValueError(f"the independent reference of {label} lacks outputs {sorted(missing)}")
    model = build_machine_model(comp.machine, dtype=dtype)
    out = {}
    for p, B in shapes.items():
        h = run_paths(comp, X.reshape(B, N // B, -1), dtype, (p,), model=model)[p]
        res = compare_outputs(comp, h, exp)
        out[p] = (sum(w for w, _ in res.values()), sum(m for _, m in res.values()))
    out["N"] = N
    return out, blk, comp


def memory_circuit(slots=16, wbits=32, lanes=1, waddr_enc="bits", raddr_enc="onehot", data_enc="bits",
                   read_enable=True, reset=True, with_read_bits=True):
    """One memory port with its inputs as token fields: wa, ra, d0..d{lanes-1}, we0.., re, rs."""
    from . import blocks as B
    from .circuit import Circuit
    from .fields import bits, dual, onehot
    c = Circuit("memory")
    nb = max(1, (slots - 1).bit_length())
    wa = c.input(bits("wa", nb) if waddr_enc == "bits" else onehot("wa", slots))
    ra = c.input(bits("ra", nb) if raddr_enc == "bits" else onehot("ra", slots))
    data = [c.input((bits if data_enc == "bits" else dual)(f"d{l}", wbits)) for l in range(lanes)]
    we = [c.input(dual(f"we{l}", 1)) for l in range(lanes)]
    re = c.input(dual("re", 1)) if read_enable else None
    rs = c.input(dual("rs", 1)) if reset else None
    blk = B.memory(c, "m", slots, wbits, wa, ra, data, we=[w.bit(0) for w in we],
                   re=re.flag() if re is not None else None, reset=rs.bit(0) if rs is not None else None)
    rbs = [B.read_bits(c, f, name=f"w{l}", with_present=True) for l, f in enumerate(blk.outputs)] \
        if with_read_bits else []
    return c, blk, rbs


def memory_program(c, blk, rng, B, T, p_write=0.4, p_read=0.8, p_reset=0.02, p_same=0.3):
    """Random programs (B sequences of T tokens) of writes / reads / resets and the Python model's
    expected read of every token: (values {field: (B*T,)}, expected {rail3 field: (B*T,), -1 = absent})."""
    port = blk.stages[0].ports[0]
    slots = min(port.slots, 1 << port.waddr.n) if port.waddr.enc == "bits" else port.waddr.n
    lanes = port.lanes
    names = [f.name for f in c.inputs]
    vals = {n: np.zeros((B, T), dtype=np.int64) for n in names}
    exp = {f.name: np.zeros((B, T), dtype=np.int64) for f in port.out}
    for b in range(B):
        model = blk.ref.__class__(port)
        hot = rng.integers(0, slots, 3)          # a few hot addresses so reads often hit written cells
        for t in range(T):
            wa = int(rng.choice(hot)) if rng.random() < 0.5 else int(rng.integers(slots))
            ra = wa if rng.random() < p_same else (int(rng.choice(hot)) if rng.random() < 0.6 else int(rng.integers(slots)))
            v = {"wa": wa, "ra": ra}
            for l in range(lanes):
                v[f"d{l}"] = int(rng.integers(0, 1 << port.wbits)) if port.wbits < 63 else 0
                v[f"we{l}"] = int(rng.random() < p_write)
            v["re"] = int(rng.random() < p_read) if "re" in names else 1
            v["rs"] = int(rng.random() < p_reset) if "rs" in names else 0
            out = model.step({**v, "_we": [v[f"we{l}"] for l in range(lanes)], "_re": v["re"], "_reset": v["rs"]})
            for n in names:
                vals[n][b, t] = v[n]
            for n, o in out.items():
                exp[n][b, t] = -1 if o is None else o
    return {n: a.reshape(-1) for n, a in vals.items()}, {n: a.reshape(-1) for n, a in exp.items()}


def run_memory(config=None, B=40, T=256, seed=0, dtype=torch.float32, paths=("prefill", "decode"), **kw):
    """Compile a memory circuit, run random programs on both paths; returns
    ({path: {field: (wrong, margin failures)}}, Compiled)."""
    c, blk, rbs = memory_circuit(**kw)
    comp = compile_circuit(c, config or TINY)
    rng = np.random.default_rng(seed)
    vals, exp = memory_program(c, blk, rng, B, T)
    for l, rb in enumerate(rbs):
        e = exp[blk.outputs[l].name]
        exp[rb.outputs[0].name] = np.where(e < 0, 0, e)
        exp[rb.outputs[1].name] = (e >= 0).astype(np.int64)
    X = encode_rows(comp, vals).reshape(B, T, -1)
    hid = run_paths(comp, X, dtype, paths)
    return {p: compare_outputs(comp, h, exp) for p, h in hid.items()}, comp


# ---- the ALU block (gpu_layers.craft.blocks.alu): valid operands, rows, both paths -------------

_M64 = (1 << 64) - 1
_ALU_SHIFTS = ("shl", "shr_u", "shr_s")
_ALU_CONVS = ("mov_a", "zext", "sext8", "sext16", "sext32", "zext8", "zext16", "zext32")


def alu_edges(w):
    M, H = (1 << w) - 1, 1 << (w - 1)
    return [0, 1, 2, M, M - 1, H, H - 1, H + 1]          # 0, 1, 2, -1, -2, MIN, MAX, MIN + 1


def alu_amounts(w):
    return [0, 1, 2, w - 1, w, w + 1, 15, 16, 31, 32, 33, 63, 64, 65, 127, 128, 256, 1 << 31,
            (1 << 32) - 1, (1 << 32) - 64, 0x12345678]


def alu_operand_pairs(rng, op, w, n):
    """(a, b) pairs for op at width w: every edge pair (edges x edges; for the shifts edges x
    amounts), then n random ones biased toward the hard cases (b = a, one bit off, close, ~a +- 2:
    long carry and borrow chains; shift amounts around w, 32 and 64; for the conversions any
    64-bit a, also with bits above w)."""
    M = (1 << w) - 1
    E = alu_edges(w)
    pairs = [(x, k) for x in E for k in alu_amounts(w)] if op in _ALU_SHIFTS else [(x, y) for x in E for y in E]
    for _ in range(n):
        x = int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(0, 2))
        x &= M if rng.random() < 0.8 else (M >> int(rng.integers(0, w)))
        if op == "clz":                   # every count 0 .. w alike
            x = (x & M) >> int(rng.integers(0, w + 1))
        if op in _ALU_SHIFTS:
            y = int(rng.choice(alu_amounts(w))) if rng.random() < 0.3 else (
                int(rng.integers(0, w + 2)) if rng.random() < 0.8 else int(rng.integers(0, 1 << 32)))
        else:
            kind = rng.integers(0, 6)
            z = int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(0, 2))
            y = [x, x ^ (1 << int(rng.integers(0, w))), x + int(rng.integers(-300, 300)),
                 ~x + int(rng.integers(-2, 3)), z, int(rng.choice(E))][kind] & M
        pairs.append((x, y))
    if op in _ALU_CONVS:                  # a conversion's source register may be wider than w
        pairs = [(x | (int(rng.integers(0, 1 << 63)) << w) & _M64 if rng.random() < 0.5 else x, y)
                 for x, y in pairs]
    return [(x & _M64, y & _M64) for x, y in pairs]


def alu_circuit(a_enc="bits", b_enc="bits", enc="bits"):
    """One ALU alone: inputs op, width, a, b (encodings a_enc, b_enc), p; outputs in `enc`."""
    from . import blocks as B
    from .blocks.alu import ALU_OPS, ALU_WIDTHS
    from .circuit import Circuit
    from .fields import bits, dual, onehot, rail3
    c = Circuit("alu")
    op = c.input(onehot("op", len(ALU_OPS)))
    width = c.input(onehot("width", len(ALU_WIDTHS)))
    make = {"bits": bits, "dual": dual, "rail3": rail3}
    a = c.input(make[a_enc]("a", 64))
    b = c.input(make[b_enc]("b", 64))
    p = c.input(dual("p", 1))
    blk = B.alu(c, op, width, a, b, p, enc=enc)
    return c, blk


def alu_rows(rng, per_width):
    """Every op and width: its edge pairs + per_width random rows, shuffled, each with valid
    operands. Returns ({field: int64 array (64-bit words as int64 views)}, expected r, expected q)."""
    from .blocks.alu import ALU_OPS, ALU_WIDTHS, alu_ref
    cols = {"op": [], "width": [], "a": [], "b": [], "p": []}
    for k, op in enumerate(ALU_OPS):
        for wi, w in enumerate(ALU_WIDTHS):
            for x, y in alu_operand_pairs(rng, op, w, per_width):
                cols["op"].append(k)
                cols["width"].append(wi)
                cols["a"].append(x)
                cols["b"].append(y)
                cols["p"].append(int(rng.integers(0, 2)))
    perm = rng.permutation(len(cols["op"]))
    vals = {n: np.array(v, dtype=np.uint64 if n in "ab" else np.int64)[perm] for n, v in cols.items()}
    exp = [alu_ref(int(o), ALU_WIDTHS[int(w)], int(x), int(y), int(p))
           for o, w, x, y, p in zip(vals["op"], vals["width"], vals["a"], vals["b"], vals["p"])]
    vals["a"], vals["b"] = vals["a"].view(np.int64), vals["b"].view(np.int64)
    r = np.array([e[0] for e in exp], dtype=np.uint64).view(np.int64)
    q = np.array([e[1] for e in exp], dtype=np.int64)
    return vals, r, q


def run_alu(comp, blk, vals, r, q, shapes, dtype=torch.float32):
    """{path: (wrong rows, margin failures)}; shapes {path: (sequences, rows)}: the first rows of
    vals as that many sequences, one prefill or token by token with the cache. The first wrong
    row of each path is printed."""
    from .blocks.alu import ALU_OPS, ALU_WIDTHS
    rf, qf = blk.outputs
    model = build_machine_model(comp.machine, dtype=dtype)
    X = encode_rows(comp, {n: (np.zeros_like(v) if comp.layout.fields[n].enc == "rail3" else v)
                           for n, v in vals.items()})
    for f in comp.circuit.inputs:          # rail3 (a memory read): every 64-bit word present
        if f.enc == "rail3":
            bit = (vals[f.name].view(np.uint64)[:, None] >> np.arange(f.n, dtype=np.uint64)) & np.uint64(1)
            bit = bit.astype(np.float64)
            X[:, comp.dims(f.name)] = np.stack([bit - 0.5, 0.5 - bit], -1).reshape(len(bit), 2 * f.n)
    res = {}
    for path, (Bsz, n) in shapes.items():
        h = run_paths(comp, X[:n].reshape(Bsz, n // Bsz, -1), dtype, (path,), model=model)[path]
        flat = h.reshape(-1, h.shape[-1])
        rv, rok = comp.decode(rf.name, flat)
        qv, qok = comp.decode(qf.name, flat)
        bad = np.nonzero((rv != r[:n]) | (qv != q[:n]))[0]
        if bad.size:
            k = bad[0]
            print(f"{path}: {ALU_OPS[vals['op'][k]]} w={ALU_WIDTHS[vals['width'][k]]} "
                  f"a={int(vals['a'][k]) & _M64:#x} b={int(vals['b'][k]) & _M64:#x} p={vals['p'][k]}: "
                  f"r {int(rv[k]) & _M64:#x} q {qv[k]}, want r {int(r[k]) & _M64:#x} q {q[k]}")
        res[path] = (int(bad.size), int((~rok).sum() + (~qok).sum()))
    return res
