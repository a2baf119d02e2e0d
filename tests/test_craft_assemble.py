"""Fields, norm tracking, validation, scheduling, the CompiledMachine contract and the machine model."""
import math

import numpy as np
import pytest
import torch

from gpu_layers.craft import blocks as B
from gpu_layers.craft.assemble import compile_circuit
from gpu_layers.craft.circuit import Circuit, CircuitError
from gpu_layers.craft.compiled import LAYER_KEYS
from gpu_layers.craft.fields import Layout, LayoutError, bits, dual, onehot, rail3, scalar
from gpu_layers.craft.machine_model import build_machine_model
from gpu_layers.craft.testing import TINY, compare_outputs, encode_rows, random_values, run_paths


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("f,vals", [(bits("a", 7), [0, 5, 127]), (dual("b", 5), [0, 31, 9]),
                                    (onehot("c", 6), [0, 5, 2]), (rail3("r", 4), [None, 0, 15, 6])])
def test_field_codes_roundtrip_with_constant_sumsq(f, vals):
    L = Layout()
    L.add(f, born=-1)
    for v in vals:
        raw = f.encode(v)
        assert math.isclose(float((raw ** 2).sum()), f.sumsq)
        got, ok = f.decode(raw)
        assert ok and got == (-1 if v is None else v)
        for i in range(f.n if f.enc != "onehot" else 0):        # the bit read-outs are exact on codes
            x = np.zeros(L.width)
            x[f.start:f.stop] = raw
            want = 0.5 if v is None else (v >> i) & 1
            if v is not None:
                assert f.bit(i).eval(x) == want
    assert scalar("s", 3).sumsq is None


def test_lin_algebra():
    f = bits("a", 2)
    Layout().add(f)
    t = 2 * f.bit(0) - f.bit(1) + 1.5
    x = np.zeros(4)
    x[0] = 1.0
    x[f.start:f.stop] = [1.0, -1.0]
    assert t.eval(x) == 2 * 1 - 0 + 1.5
    assert (-t).eval(x) == -t.eval(x)


def test_norm_tracking_refuses_data_dependent_norms():
    c = Circuit("bad")
    c.input(scalar("s", 2))
    a = c.input(bits("a", 4))
    B.bitwise(c, "NOT", a)
    with pytest.raises(LayoutError, match="depend on data"):
        compile_circuit(c, TINY)


def test_norm_is_tracked_and_constant_in_every_layer():
    """The residual's mean square entering every norm equals the compiler's constant, on every token."""
    c = Circuit("norms")
    a, b = c.input(bits("a", 32)), c.input(bits("b", 32))
    s = B.adder(c, a, b, name="s")
    m = B.memory(c, "m", 16, 32, c.input(bits("wa", 4)), c.input(onehot("ra", 16)), s.outputs[0],
                 we=c.input(dual("we", 1)).bit(0), re=c.input(dual("re", 1)).flag())
    B.read_bits(c, m.outputs[0], name="rd")
    comp = compile_circuit(c, TINY)
    W = comp.machine.width
    model = build_machine_model(comp.machine)
    rng = np.random.default_rng(0)
    vals = {f.name: random_values(f, rng, 600) for f in c.inputs}
    X = torch.tensor(encode_rows(comp, vals), dtype=torch.float32).reshape(6, 100, W)
    seen = {}
    hooks = []
    for L, layer in enumerate(model.model.layers[:comp.num_layers]):
        for nm in ("input_layernorm", "post_attention_layernorm"):
            hooks.append(getattr(layer, nm).register_forward_hook(
                lambda mod, inp, out, key=(L, nm): seen.__setitem__(key, inp[0])))
    with torch.no_grad():
        model.model(inputs_embeds=X)
    for h in hooks:
        h.remove()
    for L in range(comp.num_layers):
        for nm, tag in (("input_layernorm", "input"), ("post_attention_layernorm", "post")):
            ms = seen[(L, nm)].pow(2).sum(-1)
            want = comp.sumsq[f"{L}.{tag}"]
            assert torch.allclose(ms, torch.full_like(ms, want), rtol=1e-5), (L, nm)
            w = comp.machine.layers[L][f"{nm}.weight"]
            assert torch.allclose(w, torch.full_like(w, math.sqrt(want / W + 1e-6) - 1.0))


def test_fields_are_written_once_and_validation_lists_problems():
    c = Circuit("ssa")
    a = c.input(bits("a", 4))
    with pytest.raises(LayoutError):
        c.input(bits("a", 4))
    B.bitwise(c, "NOT", a, name="n")
    blk = B.bitwise(c, "NOT", a, name="m")
    blk.stages[0].outputs[0] = c.field("n")
    with pytest.raises(CircuitError, match="written by two stages"):
        c.add_stage(blk.stages[0])

    c = Circuit("toobig")
    x = c.input(bits("x", 64))
    B.shift(c, x, c.input(onehot("k", 64)))                  # 2080 steps = 4160 neurons in one stage
    ghost = c.new_field(bits("ghost", 3))
    c.token("<t>", x=1)
    with pytest.raises(CircuitError) as e:
        compile_circuit(c, TINY)
    msg = str(e.value)
    assert "exceed intermediate_size" in msg and "ghost" in msg and "no value for input fields" in msg

    c = Circuit("enable")
    f = c.input(bits("e", 1))
    with pytest.raises(CircuitError, match="exact-zero"):
        B.memory(c, "m", 8, 4, c.input(bits("wa", 3)), c.input(bits("ra", 3)), c.input(bits("d", 4)),
                 re=f.bit(0))
        compile_circuit(c, TINY)
    with pytest.raises(CircuitError, match="slots"):
        c2 = Circuit("slots")
        B.memory(c2, "m", 8, 4, c2.input(bits("wa", 4)), None, c2.input(bits("d", 4)))


def test_scheduler_respects_budget_and_dependencies():
    cfg = dict(TINY, intermediate_size=300)
    c = Circuit("sched")
    a, b = c.input(bits("a", 32)), c.input(bits("b", 32))
    m1 = B.mux(c, c.input(onehot("s", 2)), [a, b], name="m1")     # 64 steps = 128 neurons (+ bias)
    m2 = B.mux(c, c.field("s"), [b, a], name="m2")
    m3 = B.mux(c, c.field("s"), [a, a], name="m3")                # does not fit with m1, m2
    s = B.adder(c, m1.outputs[0], m3.outputs[0], name="sum")
    comp = compile_circuit(c, cfg)
    pos = comp.position
    # the adder's inputs are on the longest chain: they take layer 0's MLP; m2 (read by nothing)
    # waits for layer 1's
    assert pos["m1"] == pos["m3"] == 1 and pos["m2"] == 3
    assert pos["sum_gp"] > pos["m3"] and pos["sum_carry"] > pos["sum_gp"] and pos["sum"] > pos["sum_carry"]
    for pl in comp.plans:
        assert pl.neurons() <= 300
    rep = comp.report()
    assert "neurons" in rep and "mlp:m3" in rep and f"/{300}" in rep


def test_compiled_machine_contract_and_text_flag_unread():
    c = Circuit("contract")
    x = c.input(bits("x", 8))
    B.memory(c, "m", 8, 8, c.input(bits("wa", 3)), c.input(bits("ra", 3)), x)
    B.bitwise(c, "NOT", x)
    comp = compile_circuit(c, TINY)
    mc = comp.machine
    mc.check()
    assert mc.text_flag_dim == mc.width - 1
    for layer in mc.layers:
        assert set(layer) == set(LAYER_KEYS)
        for k in ("linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight", "linear_attn.in_proj_b.weight",
                  "linear_attn.in_proj_a.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight"):
            assert not layer[k][:, mc.text_flag_dim].any()
    assert mc.fields["x"] == (c.field("x").start, c.field("x").stop)
    assert mc.layer_shapes["intermediate_size"] == TINY["intermediate_size"]


def test_machine_model_generates_greedily():
    """A toggle machine: token <b=v> makes the model emit <b=1-v>; stock generate, greedy, both
    a long prompt (prefill) and generated tokens (decode)."""
    c = Circuit("toggle")
    x = c.input(dual("x", 1))
    nx = B.gate(c, "NOT", [x], name="nx", enc="dual")
    c.token("<b=0>", x=0)
    c.token("<b=1>", x=1)
    c.logit("<b=0>", 10.0 * nx.outputs[0].nbit(0))
    c.logit("<b=1>", 10.0 * nx.outputs[0].bit(0))
    comp = compile_circuit(c, TINY)
    model = build_machine_model(comp.machine)
    prompt = torch.tensor([[0, 1, 1, 0, 1]])
    out = model.generate(prompt, max_new_tokens=6, do_sample=False)
    assert out[0, 5:].tolist() == [0, 1, 0, 1, 0, 1]


def _norm_exposed(ballast: bool):
    """A stage of 48 wide-range steps on memory reads (max|t|/margin ~ 82,000: fp32 leaves ~1e-4
    in each output),
    a re-digitizer of one of them, and a reader that weighs the re-digitized bit 60,000 margins per
    unit. The re-digitizer's output is off its code by its layer's norm error, which the wide
    stage's errors set (docs/machine.md section 37)."""
    from gpu_layers.craft.blocks.base import MLPBuilder
    from gpu_layers.craft.fields import lsum
    c = Circuit("exposed")
    if ballast:
        c.layout.add_ballast()
    a, b, en = c.input(bits("a", 12)), c.input(bits("b", 12)), c.input(dual("en", 1))
    rd = B.memory(c, "ab", 1, 24, None, None, [[a, b]]).outputs[0]   # analog reads, as the core's
    av, bv = (lsum((1 << i) * rd.bit(12 * k + i) for i in range(12)) for k in (0, 1))
    wide, y, z = c.new_field(dual("wide", 48)), c.new_field(dual("y", 1)), c.new_field(dual("z", 1))
    m = MLPBuilder(c, "wide")
    for i in range(48):
        m.threshold(wide, i, av - bv + 0.5 + 16384.0 * (en.bit(0) - 1.0))
    m.build()
    m = MLPBuilder(c, "redigitize")
    m.threshold(y, 0, wide.bit(0) - 0.5)
    m.build()
    m = MLPBuilder(c, "reader")
    m.threshold(z, 0, 30000.0 * (y.bit(0) - 1.0) + 0.5)
    m.build()
    return c


def test_ballast_keeps_norms_exact_under_wide_gates():
    """fp32's errors in a wide stage's outputs move the next norm; with the ballast field the
    re-digitized bit stays within 1e-6 of its code and the 60,000-margin reader decodes exactly in
    the stock fp32 prefill; without it the bit is off by more than 1e-5 (the reader's band)."""
    rng = np.random.default_rng(0)
    dev = {}
    for ballast in (False, True):
        c = _norm_exposed(ballast)
        comp = compile_circuit(c, TINY)
        assert comp.num_layers == 3
        vals = {"a": rng.integers(0, 4096, 1024), "b": rng.integers(0, 4096, 1024), "en": rng.integers(0, 2, 1024)}
        vals["en"][:768] = 1
        X = encode_rows(comp, vals).reshape(8, 128, -1)
        h = run_paths(comp, X, paths=("prefill",))["prefill"].reshape(1024, -1)
        want = ((vals["a"] >= vals["b"]) & (vals["en"] == 1)).astype(np.int64)
        y = h[:, comp.dims("y")]
        dev[ballast] = float(np.abs(y - np.stack([want, 1 - want], -1)).max())
        if ballast:
            assert "ballast" in comp.layout.fields and comp.sumsq["0.input"] >= 1024.0 ** 2
            assert compare_outputs(comp, h, {"wide": ((vals["a"] >= vals["b"]) & (vals["en"] == 1)) * (2 ** 48 - 1),
                                             "y": want, "z": want}) == {"wide": (0, 0), "y": (0, 0), "z": (0, 0)}
    assert dev[True] <= 1e-6, dev
    assert dev[False] >= 1e-5, dev          # measured 9.9e-4 without, 1.2e-7 with the ballast
