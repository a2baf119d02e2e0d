"""The fast executor (gpu_layers.craft.fast) gives stock transformers' tokens, token for token, on
every path: teacher-forced prefill (stock: the chunked delta rule), decode with the cache (stock:
the recurrent rule) and stock `generate` (greedy, with and without a carried cache and a stop token);
its recurrent state has the cache's layout and decodes to the same memories (every port of the
regfile demo; the v0 register file, against the stock cache and the stream's plain model). It
refuses machines it was not written for, by name."""
import dataclasses

import numpy as np
import pytest
import torch
from transformers.cache_utils import DynamicCache

from gpu_layers.craft.demo_regfile import build_regfile, random_program
from gpu_layers.craft.fast import FastMachine, FastMachineError
from gpu_layers.craft.state import max_rail_error, port_contents, recurrent_state
from gpu_layers.craft.testing import TINY
from gpu_layers.machine.inspect_state import read_registers, written
from gpu_layers.machine.rf_circuit import RF_PORT, build_rf_machine

from test_machine_rf import assert_states, full_state, hand_case

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def demo():
    d = build_regfile(TINY)
    return d, d.model(), FastMachine(d.compiled.machine)


@pytest.fixture(scope="module")
def rf():
    r = build_rf_machine(TINY)
    return r, r.model(), FastMachine(r.compiled.machine)


def port_names(comp):
    return [p.name for pl in comp.plans for st in pl.mixer for p in st.ports]


def stock_decode(model, ids):
    """Stock decode with the cache, one token per forward: (argmax per position, logits, cache)."""
    cache = DynamicCache(config=model.config)
    pred, logits = [], []
    with torch.no_grad():
        for t in ids:
            lg = model(torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1]
            pred.append(int(lg.argmax()))
            logits.append(lg)
    return pred, torch.stack(logits), cache


def assert_same_tokens(fast, stock, names=None):
    bad = [i for i, (a, b) in enumerate(zip(fast, stock)) if a != b]
    assert len(fast) == len(stock) and not bad, \
        f"{len(bad)} positions differ, first {bad[:5]}" + (f" ({[names[i] for i in bad[:5]]})" if names else "")


def assert_emissions_right(d, pred, toks, expect, mask):
    """The compared tokens are the machine's real output (not a vacuous agreement)."""
    got = d.decode(pred)
    bad = [i for i in range(len(toks)) if mask[i] and got[i] != expect[i]]
    assert not bad and sum(mask) >= 50, (len(bad), bad[:3])


# ---- what is skipped is exact --------------------------------------------------------------

def test_inert_attention_layer_adds_exact_zeros(demo):
    """The machine-only model's full-attention layer returns its input bit for bit (prefill and
    decode), so leaving it out changes nothing."""
    d, model, _ = demo
    layer = model.model.layers[-1]
    assert model.config.layer_types[-1] == "full_attention"
    seen = []
    h = layer.register_forward_hook(lambda mod, args, out: seen.append((args[0].clone(), out.clone())))
    toks, _, _ = random_program(np.random.default_rng(7), 20)
    ids = d.encode(toks)
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
            stock_decode(model, ids[:30])
    finally:
        h.remove()
    assert len(seen) == 31
    for x, y in seen:
        assert torch.equal(x, y)


def test_compaction_is_sparse(demo, rf):
    """The executor keeps a small part of the dense layers (the speed comes from this)."""
    for fm in (demo[2], rf[2]):
        kept = sum(m.w_in.size + m.w_out.size for L in fm.layers if (m := L.mixer) is not None) + \
            sum(p.w_gu.size + p.w_down.size for L in fm.layers if (p := L.mlp) is not None)
        dense = len(fm.layers) * fm.W * (2 * fm.Hk * fm.dk + 3 * fm.Hv * fm.dv + 2 * fm.Hv + 3 * fm.I)
        assert kept < 0.02 * dense, (kept, dense)


# ---- (a) the regfile demo: tokens -----------------------------------------------------------

def test_regfile_teacher_forced_prefill_tokens(demo):
    d, model, fm = demo
    toks, expect, mask = random_program(np.random.default_rng(0), 160)
    ids = d.encode(toks)
    with torch.no_grad():
        stock = model(torch.tensor([ids])).logits[0].argmax(-1).tolist()      # chunked delta rule
    fast = fm.teacher_forced(ids)
    assert_same_tokens(fast, stock, toks)
    assert_emissions_right(d, fast, toks, expect, mask)


def test_regfile_decode_with_cache_tokens_logits_and_state(demo):
    d, model, fm = demo
    toks, expect, mask = random_program(np.random.default_rng(1), 40)
    ids = d.encode(toks)
    stock, stock_logits, cache = stock_decode(model, ids)
    st = fm.new_state()
    fast_logits = torch.stack([fm.step(st, t, logits=True) for t in ids])
    fast = fast_logits.argmax(-1).tolist()
    assert_same_tokens(fast, stock, toks)
    assert_emissions_right(d, fast, toks, expect, mask)
    assert float((fast_logits - stock_logits).abs().max()) < 1e-3
    # the recurrent state: transformers' layout, close values, and the same decoded memories
    for L in range(d.compiled.num_layers):
        a, b = recurrent_state(cache, L), recurrent_state(st, L)
        assert a.shape == b.shape and float((a - b).abs().max()) <= 1e-4 * max(1.0, float(a.abs().max())), L
    comp = d.compiled
    for name in port_names(comp):
        assert port_contents(st, comp, name) == port_contents(cache, comp, name), name
    assert any(w is not None for lane in port_contents(st, comp, "rfa") for w in lane)


def test_regfile_generate_with_carried_state(demo):
    """The host loop of the demo: it appends write tokens; at each <sum> the model generates the four
    sum bytes and <end> (stock generate with a carried cache vs FastMachine.generate with a carried
    state), then the host drops <end> and goes on."""
    d, model, fm = demo
    toks, expect, _ = random_program(np.random.default_rng(2), 40)
    seq, cache, st = [], DynamicCache(config=model.config), fm.new_state()
    i = n_sums = 0
    while i < len(toks):
        seq.append(d.token_ids[toks[i]])
        if toks[i].startswith("<sum"):
            ids = torch.tensor([seq])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), cache=cache, max_new_tokens=5,
                                 do_sample=False)[0, len(seq):].tolist()
            new = fm.generate(seq, 5, state=st)
            assert new == out, (i, d.decode(new), d.decode(out))
            assert d.decode(new) == expect[i:i + 5]
            seq += new[:-1]
            i += 5
            n_sums += 1
        else:
            i += 1
    assert n_sums >= 10


def test_regfile_generate_past_end_and_stop_token(demo):
    """Plain generate from a fresh state, long enough to run past <end>, and with <end> as the stop
    token (stock: eos_token_id)."""
    d, model, fm = demo
    toks, _, _ = random_program(np.random.default_rng(3), 12)
    k = max(i for i, t in enumerate(toks) if t.startswith("<sum"))
    prompt = d.encode(toks[:k + 1])
    ids = torch.tensor([prompt])
    end = d.token_ids["<end>"]
    for n, stop in ((9, None), (9, end)):
        kw = {} if stop is None else {"eos_token_id": stop}
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                                 **kw)[0, len(prompt):].tolist()
        new = fm.generate(prompt, n, stop_ids=() if stop is None else (stop,))
        assert new == out and len(new) == (9 if stop is None else 5)


# ---- (b) the v0 register-file circuit: its state --------------------------------------------

def test_rf_registers_every_position_decode(rf):
    """Register file decoded from the fast state after every token == decoded from the stock cache
    (decode path) == the stream's plain model; tokens equal too (this circuit has no logits: its
    LM-head rows are all 0, so both pick token 0 everywhere)."""
    r, model, fm = rf
    ids, exp, names = hand_case(r, 0, 30)
    cache = DynamicCache(config=model.config)
    st = fm.new_state()
    fast, stock = [], []
    with torch.no_grad():
        for p, t in enumerate(ids):
            stock.append(int(model(torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1].argmax()))
            fast.append(fm.step(st, t))
            got = read_registers(st, r)
            assert got == read_registers(cache, r), (p, names[p])
            assert_states({p: got}, exp, names)
    assert_same_tokens(fast, stock, names)
    assert len(written(read_registers(st, r))) >= 40


def test_rf_registers_after_stock_prefill(rf):
    """The whole stream in one stock forward (chunked rule) vs the fast executor's loop: the same
    register file, and the fast state's rails are near-ideal."""
    r, model, fm = rf
    ids, exp, names = hand_case(r, 1, 110)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.tensor([ids]), cache=cache, use_cache=True)
    st = fm.new_state()
    fm.prefill(st, ids)
    got = read_registers(st, r)
    assert got == read_registers(cache, r) == full_state(exp[-1])
    place = r.compiled.port(RF_PORT)
    assert max_rail_error(recurrent_state(st, place.layer), place) < 1e-4


# ---- refusals -------------------------------------------------------------------------------

def _with_layer(m, i, key, value):
    layers = [dict(L) for L in m.layers]
    layers[i][key] = value
    return dataclasses.replace(m, layers=layers)


def test_refuses_what_it_cannot_run_exactly(demo):
    m = demo[0].compiled.machine
    bad_shape = _with_layer(m, 2, "linear_attn.in_proj_z.weight", torch.zeros(8, m.width))
    with pytest.raises(FastMachineError, match=r"layer 2 linear_attn.in_proj_z.weight: shape \(8, 799\)"):
        FastMachine(bad_shape)
    w = m.layers[1]["mlp.up_proj.weight"].clone()
    w[0, 0] = float("inf")
    with pytest.raises(FastMachineError, match="layer 1 mlp.up_proj.weight has non-finite"):
        FastMachine(_with_layer(m, 1, "mlp.up_proj.weight", w))
    no_alog = dataclasses.replace(m, layers=[{k: v for k, v in L.items() if k != "linear_attn.A_log"}
                                             for L in m.layers])
    with pytest.raises(FastMachineError, match=r"layer 0 lacks \['linear_attn.A_log'\]"):
        FastMachine(no_alog)
    with pytest.raises(FastMachineError, match="layer_shapes lacks"):
        FastMachine(dataclasses.replace(m, layer_shapes={k: v for k, v in m.layer_shapes.items()
                                                         if k != "linear_conv_kernel_dim"}))
    with pytest.raises(FastMachineError, match="float32 path only"):
        FastMachine(m, dtype=torch.bfloat16)
    with pytest.raises(FastMachineError, match="multiple of"):
        FastMachine(dataclasses.replace(m, layer_shapes=dict(m.layer_shapes, linear_num_key_heads=3)))
    fm = demo[2]
    st = fm.new_state()
    with pytest.raises(IndexError):
        fm.step(st, fm.V)
    fm.step(st, 0)
    with pytest.raises(ValueError, match="does not start with"):
        fm.generate([1, 2], 3, state=st)


def test_silu_shortcut_is_the_formula_bit_for_bit():
    """fast_kernels._silu skips exp where the float32 sigmoid is exactly 0 or 1: the same bits as
    x * (1 / (1 + exp(-x))) on every float32 around both bounds and on a wide random sweep."""
    import numba

    from gpu_layers.craft import fast_kernels as K

    @numba.njit
    def both(xs):
        out = np.empty((2, xs.shape[0]), dtype=np.float32)
        for i in range(xs.shape[0]):
            x = xs[i]
            out[0, i] = K._silu(x)
            out[1, i] = x * (np.float32(1.0) / (np.float32(1.0) + np.exp(-x)))
        return out

    def around(v, n=200_000):            # the n float32s on each side of v
        b = np.float32(v).view(np.int32)
        steps = np.arange(-n, n, dtype=np.int64)
        return (b + np.where(np.float32(v) < 0, -steps, steps)).astype(np.int32).view(np.float32)

    rng = np.random.default_rng(0)
    xs = np.concatenate([around(K.SILU_ZERO), around(K.SILU_ID), around(-88.7), around(17.0),
                         rng.uniform(-300, 300, 1_000_000).astype(np.float32),
                         np.float32([np.inf, -np.inf, 1e30, -1e30, 1e-40, -1e-40])])
    got, want = both(xs)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    assert (xs < K.SILU_ZERO).sum() > 100_000 and (xs > K.SILU_ID).sum() > 100_000


def test_mixer_silu_pass_is_silu_bit_for_bit():
    """mixer_step's SiLU over the conv outputs (branch-free for the saturated, _silu for the listed
    rest) gives _silu's bits on every input, and +0 for both zeros; the one-tap conv keeps
    0 + p w (a -0 input becomes +0)."""
    from gpu_layers.craft import fast_kernels as K

    rng = np.random.default_rng(1)
    p = np.concatenate([rng.uniform(-300, 300, 50_000), rng.uniform(-20, 20, 50_000),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, K.SILU_ZERO, K.SILU_ID, 1e-40, -1e-40]]).astype(np.float32)
    n = len(p)
    w = rng.choice(np.float32([1.0, -1.0, 0.5, 3.0]), n)
    ext = np.empty(n + 1, dtype=np.float32)
    K.mixer_step(p.copy(), n, 0, 0, np.zeros((0, n), np.float32), w.reshape(1, n), ext,
                 np.zeros((0, 2), np.int64), 1, np.float32(1.0), np.zeros((0, 1, 0), np.float32), False,
                 np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros(0, np.float32), True,
                 np.zeros(0, np.int64), np.zeros((0, 0), np.int64), np.zeros((0, 0), np.float32),
                 np.zeros(0, np.int64), 128.0, np.float32(1e-6))
    conv = np.float32(0.0) + p * w
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.array([np.float32(0.0) if x == 0 else K._silu(x) for x in conv], dtype=np.float32)
    assert ext[0] == 0 and np.array_equal(ext[1:].view(np.int32), want.view(np.int32))
    assert np.isnan(ext[1 + n - 5]) and not np.signbit(ext[1 + n - 8])
