import inspect
import json
import math
import textwrap

import pytest
import torch

from gpu_layers.craft.compiled import LAYER_KEYS, CompiledMachine
from gpu_layers.craft.machine_model import build_machine_model
from gpu_layers.hosts import load_host, peak_rss_bytes, reset_peak_rss, tiny_host, tiny_tokenizer
from gpu_layers.splice import (SPLICE_JSON, SpliceError, estimate_spliced_bytes, load_spliced,
                               measure_residual, save_spliced, size_text_flag, splice)
from splice_fixtures import fake_vl_checkpoint, memory_machine, memory_program, stdlib_text


@pytest.fixture(scope="module")
def host(one_torch_thread):
    return tiny_host()


@pytest.fixture(scope="module")
def machine(host):
    return memory_machine(host.config)


@pytest.fixture(scope="module", params=["compiled", "leading"])
def spliced(request, host, machine):
    return splice(host, machine, flag_layer=request.param)


@pytest.fixture(scope="module")
def mref(machine):
    return build_machine_model(machine)


@pytest.fixture(scope="module")
def text_ids():
    return tiny_tokenizer().encode(inspect.getsource(textwrap))[:300]


@pytest.fixture(scope="module")
def program(machine):
    return memory_program(machine, 160, seed=1)


def _layers_out(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]), output_hidden_states=True)


def test_structure(host, machine, spliced):
    info = spliced.splice_info
    c = spliced.config
    H, W = host.config.hidden_size, machine.width
    assert c.hidden_size == H + W and c.vocab_size == host.config.vocab_size + machine.vocab_size
    assert c.layer_types[: info.n_prefix_layers] == ["linear_attention"] * info.n_prefix_layers
    assert c.layer_types[info.n_prefix_layers:] == host.config.layer_types
    assert not c.tie_word_embeddings and spliced.lm_head.weight is not spliced.model.embed_tokens.weight
    assert c.qwengpu["text_flag_dim"] == H + machine.text_flag_dim
    assert info.token_id("<m:r0>") == host.config.vocab_size + machine.token_names.index("<m:r0>")
    # default norm_mode "scale_residual": host gains unchanged, host residual (embedding, writers)
    # scaled by sqrt(H'/H); machine part by sqrt(H'/W)
    w = host.model.layers[0].input_layernorm.weight
    w2 = spliced.model.layers[info.n_prefix_layers].input_layernorm.weight
    assert torch.allclose(1 + w2[:H].double(), (1 + w.double()) * math.sqrt(H / (H + W)), atol=1e-6)
    assert torch.all(w2[H:] == -1)
    s_h, s_m = math.sqrt((H + W) / H), math.sqrt((H + W) / W)
    assert info.host_residual_scale == s_h and info.machine_residual_scale == s_m
    e, e2 = host.model.embed_tokens.weight, spliced.model.embed_tokens.weight
    assert torch.allclose(e2[: info.host_vocab, :H], e * s_h) and torch.all(e2[: info.host_vocab, H:] == 0)
    o, o2 = host.model.layers[0].mlp.down_proj.weight, spliced.model.layers[info.n_prefix_layers].mlp.down_proj.weight
    assert torch.allclose(o2[:H], o * s_h) and torch.all(o2[H:] == 0)
    assert torch.equal(spliced.lm_head.weight[: info.host_vocab, :H], host.lm_head.weight)
    # DESIGN's recipe (gains only, residual not scaled), still available
    g = splice(host, machine, norm_mode="rescale_gains", flag_layer=info.flag_location.split("_")[0]
               if info.flag_location == "leading_layer" else "compiled")
    w3 = g.model.layers[info.n_prefix_layers].input_layernorm.weight.double()
    assert torch.allclose(1 + w3[:H], (1 + w.double()) * math.sqrt(H / (H + W)), atol=1e-6)
    assert torch.equal(g.model.embed_tokens.weight[: info.host_vocab, :H], e)


def test_pure_machine_context_host_dims_stay_zero(host, spliced, program):
    info = spliced.splice_info
    toks, _ = program
    ids = [info.host_vocab + t for t in toks]
    out = _layers_out(spliced, ids)
    H = info.host_hidden
    for i, h in enumerate(out.hidden_states):
        assert torch.all(h[0, :, :H] == 0), f"host dims nonzero after layer {i}"
    assert torch.all(out.hidden_states[-1][0, :, info.text_flag_dim] == 0)
    assert torch.all(out.logits[0, :, : info.host_vocab] == 0)


def test_ordinary_text_machine_dims_zero_except_flag(host, spliced, text_ids):
    info = spliced.splice_info
    out = _layers_out(spliced, text_ids)
    H, fd = info.host_hidden, info.text_flag_dim
    first_with_flag = info.first_compiled_layer + 1 if info.flag_location == "compiled_layer_0" else 1
    for i, h in enumerate(out.hidden_states[:-1]):
        m = h[0, :, H:].clone()
        flag = m[:, fd - H].clone()
        m[:, fd - H] = 0
        assert torch.all(m == 0), f"machine dims nonzero on text after layer {i}"
        if i >= first_with_flag:
            assert torch.allclose(flag, torch.full_like(flag, info.flag_value), rtol=1e-4)
        else:
            assert torch.all(flag == 0)
    # machine tokens get no probability on ordinary text
    probs = out.logits[0].double().softmax(-1)
    assert float(probs[:, info.host_vocab:].sum(-1).max()) == 0.0


def _read_positions(expect):
    return [t for t, e in enumerate(expect) if e is not None]


def test_machine_part_matches_machine_only_model_prefill(spliced, mref, machine, program):
    info = spliced.splice_info
    toks, expect = program
    with torch.no_grad():
        lo = mref(torch.tensor([toks]), output_hidden_states=True)
        ls = spliced(torch.tensor([[info.host_vocab + t for t in toks]]), output_hidden_states=True)
    names = machine.token_names
    for t in _read_positions(expect):
        want = f"<m:v={expect[t]}>"
        assert names[int(lo.logits[0, t].argmax())] == want
        assert names[int(ls.logits[0, t, info.host_vocab:].argmax())] == want
        assert int(ls.logits[0, t].argmax()) == info.token_id(want)  # over the full vocabulary too
    # decoded machine fields: same signs, magnitudes equal to ~1e-5 (shared rms eps, see splice doc)
    H = info.host_hidden
    a, b = machine.fields["dig"]
    mo = lo.hidden_states[len(machine.layers)][0]
    so = ls.hidden_states[info.n_prefix_layers][0, :, H:] / info.machine_residual_scale
    assert torch.equal(mo[:, a:b] > 0.5, so[:, a:b] > 0.5)
    assert torch.allclose(mo, so, rtol=1e-4, atol=1e-4)
    assert torch.allclose(lo.logits[0], ls.logits[0, :, info.host_vocab:], rtol=1e-4, atol=1e-4)


def test_machine_part_matches_on_decode_path(spliced, mref, machine, program):
    """Token-by-token decoding with the stock cache (recurrent delta rule) agrees with prefill."""
    info = spliced.splice_info
    toks, expect = program
    toks, expect = toks[:24], expect[:24]
    assert len(_read_positions(expect)) >= 5
    names = machine.token_names

    def decode(model, ids):
        past, outs = None, []
        with torch.no_grad():
            for t in ids:
                r = model(torch.tensor([[t]]), cache=past, use_cache=True)
                past = r.cache
                outs.append(r.logits[0, -1])
        return torch.stack(outs)

    ds = decode(spliced, [info.host_vocab + t for t in toks])
    dm = decode(mref, toks)
    for t in _read_positions(expect):
        want = f"<m:v={expect[t]}>"
        assert names[int(dm[t].argmax())] == want
        assert int(ds[t].argmax()) == info.token_id(want)
    assert torch.allclose(dm, ds[:, info.host_vocab:], rtol=1e-4, atol=1e-4)
    assert torch.all(ds[:, : info.host_vocab] == 0)


def test_stock_generate_emits_the_value_read(spliced, machine):
    info = spliced.splice_info
    prompt = [info.token_id("<m:w2=11>"), info.token_id("<m:w1=6>"), info.token_id("<m:r2>")]
    with torch.no_grad():
        out = spliced.generate(torch.tensor([prompt]), max_new_tokens=1, do_sample=False)
    assert int(out[0, -1]) == info.token_id("<m:v=11>")


def test_save_and_load_with_stock_transformers(tmp_path, machine, text_ids, program):
    spliced = splice(tiny_host(dtype=torch.bfloat16), machine)  # bf16: the dtype a real build ships in
    info = spliced.splice_info
    save_spliced(spliced, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and "auto_map" not in cfg
    from transformers import AutoModelForCausalLM

    back = AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()  # stock, no trust_remote_code
    assert type(back).__name__ == "Qwen3_5ForCausalLM"
    mixed = text_ids[:40] + [info.host_vocab + t for t in program[0][:40]]
    with torch.no_grad():
        for ids in (text_ids, mixed):
            x = torch.tensor([ids])
            assert torch.equal(back(x).logits, spliced(x).logits)
    saved = json.loads((tmp_path / SPLICE_JSON).read_text())
    assert saved["token_ids"]["<m:r0>"] == info.token_id("<m:r0>")
    again = load_spliced(tmp_path)
    assert again.splice_info.token_names == info.token_names


def test_bad_machines_are_refused(host, machine):
    fd = machine.text_flag_dim
    layers = [dict(l) for l in machine.layers]
    layers[0]["mlp.down_proj.weight"] = layers[0]["mlp.down_proj.weight"].clone()
    layers[0]["mlp.down_proj.weight"][fd, 0] = 1.0
    bad = CompiledMachine(width=machine.width, layers=layers, embed=machine.embed, unembed=machine.unembed,
                          final_norm=machine.final_norm, token_names=machine.token_names, text_flag_dim=fd)
    with pytest.raises(SpliceError, match="writes the text-flag dim"):
        splice(host, bad)
    layers = [dict(l) for l in machine.layers]
    layers[0]["mlp.gate_proj.weight"] = torch.zeros(10, machine.width)
    bad = CompiledMachine(width=machine.width, layers=layers, embed=machine.embed, unembed=machine.unembed,
                          final_norm=machine.final_norm, token_names=machine.token_names, text_flag_dim=fd)
    with pytest.raises(SpliceError, match="host budget"):
        splice(host, bad)


def test_mixed_context_effect_is_only_at_the_logits(host, machine, spliced, text_ids, program):
    """Text then machine tokens: host full attention at machine positions averages text values
    into host dims (documented limitation). The compiled layers come first, so the machine fields
    are untouched; only the final norm's scale and host logits change. Measured, not hidden."""
    info = spliced.splice_info
    toks, expect = program
    toks, expect = toks[:80], expect[:80]
    ids = text_ids[:100] + [info.host_vocab + t for t in toks]
    out = _layers_out(spliced, ids)
    pure = _layers_out(spliced, [info.host_vocab + t for t in toks])
    n = len(toks)
    H = info.host_hidden
    k = info.n_prefix_layers
    assert torch.equal(out.hidden_states[k][0, -n:, H:], pure.hidden_states[k][0, :, H:])
    names = machine.token_names
    for t in _read_positions(expect):  # argmax among machine tokens is unchanged (positive rescale)
        assert names[int(out.logits[0, 100 + t, info.host_vocab:].argmax())] == f"<m:v={expect[t]}>"
    host_leak = out.hidden_states[-1][0, -n:, :H].pow(2).mean().sqrt()  # after the last (full-attention) layer, normed
    assert float(host_leak) > 0  # the limitation is real: reported in the splice report


def test_memory_estimates(host, machine):
    est = estimate_spliced_bytes(host.config, machine.width, len(machine.layers), machine.vocab_size, 4)
    assert reset_peak_rss()      # the peak of this splice, not of whatever ran before in the process
    sp = splice(host, machine, flag_layer="leading")
    real = sum(p.numel() * 4 for p in sp.parameters())
    assert abs(est["total"] - real) / real < 1e-3
    assert peak_rss_bytes() < 8 * 2 ** 30


def test_free_host_builds_the_same_model(host, machine):
    import copy

    ref = splice(host, machine)
    donor, spent = tiny_host(), copy.deepcopy(machine)
    lean = splice(donor, spent, free_host=True, free_machine=True)
    assert all(p.numel() == 0 for p in donor.parameters())  # the host's memory was handed back
    assert all(t.numel() == 0 for L in spent.layers for t in L.values())    # and the compiled layers'
    got = dict(lean.named_parameters())
    assert all(torch.equal(got[n], p) for n, p in ref.named_parameters())


def test_bf16_splice_machine_reads_and_host_zeros(machine, program):
    hb = tiny_host(dtype=torch.bfloat16)
    sp = splice(hb, machine)
    assert sp.lm_head.weight.dtype == torch.bfloat16
    info = sp.splice_info
    toks, expect = program
    out = _layers_out(sp, [info.host_vocab + t for t in toks])
    for h in out.hidden_states:
        assert torch.all(h[0, :, : info.host_hidden] == 0)
    for t in _read_positions(expect):
        assert int(out.logits[0, t].argmax()) == info.token_id(f"<m:v={expect[t]}>")
    ids = tiny_tokenizer().encode("def main():\n    return 0\n") * 4
    with torch.no_grad():
        p = sp(torch.tensor([ids])).logits[0].float().softmax(-1)
    assert float(p[:, info.host_vocab:].sum(-1).max()) == 0.0


def test_compiler_output_splices_exactly(host):
    """A machine from the layer compiler (gpu_layers.craft: a memory circuit compiled for this
    host's budgets), driven through the spliced model by input rows: its decoded outputs are right
    on the prefill and decode paths and match the machine-only model; host dims stay exact 0."""
    from gpu_layers.craft import testing
    import numpy as np
    from transformers.cache_utils import DynamicCache

    from gpu_layers.craft.assemble import compile_circuit

    c, blk, rbs = testing.memory_circuit(slots=8, wbits=8)
    comp = compile_circuit(c, host.config)
    rng = np.random.default_rng(0)
    B, T = 3, 48
    vals, exp = testing.memory_program(c, blk, rng, B, T)
    for l, rb in enumerate(rbs):
        e = exp[blk.outputs[l].name]
        exp[rb.outputs[0].name] = np.where(e < 0, 0, e)
        exp[rb.outputs[1].name] = (e >= 0).astype(np.int64)
    X = testing.encode_rows(comp, vals).reshape(B, T, -1)
    ref = testing.run_paths(comp, X)
    sp = splice(host, comp.machine)
    H = sp.splice_info.host_hidden
    x = torch.zeros(B, T, sp.config.hidden_size)
    x[..., H:] = torch.tensor(X, dtype=torch.float32) * sp.splice_info.machine_residual_scale  # as its embedding rows
    with torch.no_grad():
        prefill = sp.model(inputs_embeds=x, use_cache=False).last_hidden_state
        cache, outs = DynamicCache(config=sp.config), []
        for t in range(T):
            outs.append(sp.model(inputs_embeds=x[:, t:t + 1], cache=cache, use_cache=True).last_hidden_state)
        decode = torch.cat(outs, 1)
    for path, h in (("prefill", prefill), ("decode", decode)):
        assert torch.all(h[..., :H] == 0)
        hm = h[..., H:].double().numpy()
        res = testing.compare_outputs(comp, hm, exp)
        assert all(w == 0 and m == 0 for w, m in res.values()), (path, res)
        assert np.abs(hm - ref[path]).max() < 1e-4


def test_compiler_demo_runs_token_by_token_in_the_spliced_checkpoint(one_torch_thread):
    """The compiler's demo (a 4-lane register file with an adder; 2129 machine tokens) compiled for
    and spliced into the tiny-2b-layers host (Qwen3.5-2B's layer budgets: 6 layers, the machine a 2B
    build holds): every token the machine must emit wins the argmax over the FULL spliced
    vocabulary, and stock greedy `generate` produces the sum bytes."""
    from gpu_layers.craft import demo_regfile as demo_mod
    import numpy as np

    host = load_host("tiny-2b-layers", dtype=torch.float32)
    demo = demo_mod.build_regfile(host.config)
    assert demo.compiled.num_layers == 6
    sp = splice(host, demo.compiled.machine)
    info = sp.splice_info
    toks, expect, mask = demo_mod.random_program(np.random.default_rng(1), 10)
    ids = [info.token_id(t) for t in toks]
    with torch.no_grad():
        ls = sp(torch.tensor([ids])).logits[0]
        lo = demo.model()(torch.tensor([demo.encode(toks)])).logits[0]
    emits = [t for t in range(len(ids)) if mask[t]]
    assert emits
    for t in emits:
        assert int(ls[t].argmax()) == info.token_id(expect[t])
    assert torch.allclose(lo, ls[:, info.host_vocab:], atol=1e-3)
    # generation: writes then a <sum>; the model emits 4 sum bytes and <end>
    prog = ["<w l1 r0>", "<b0:2a>", "<b1:00>", "<b2:00>", "<b3:80>",
            "<w l1 r3>", "<b0:ff>", "<b1:00>", "<b2:00>", "<b3:80>", "<sum l1 r0 r3>"]
    with torch.no_grad():
        out = sp.generate(torch.tensor([[info.token_id(t) for t in prog]]), max_new_tokens=5, do_sample=False)
    got = [info.token_names[int(i) - info.host_vocab] for i in out[0, len(prog):]]
    s = (0x8000002A + 0x800000FF) % 2 ** 32
    assert got == [f"<s{k}:{(s >> (8 * k)) & 0xFF:02x}>" for k in range(4)] + ["<end>"]


def _text_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("scale", [0.05, 3000.0])
def test_text_flag_is_sized_from_the_measured_residual(scale, one_torch_thread):
    """Hosts whose residual is 20x smaller / 3000x larger than the tiny host's: the flag follows
    the smallest measured residual (flag^2 = 2^-30 of its sum of squares) and the suppression the
    largest final residual, so on text (not the calibration text) every machine logit sits more
    than 104 below the top host logit at every position and machine-token probability is exactly
    0 in fp32. The old fixed sizing (flag 1e-3, suppression 1e5) leaks on the large residual."""
    h = tiny_host(residual_scale=scale)
    m = memory_machine(h.config)
    sp = splice(h, m)
    info = sp.splice_info
    r = info.residual
    assert 0.7 * scale < r["min_rms"] < r["max_final_rms"] < 2.0 * scale
    Hp = h.config.hidden_size + m.width
    assert info.flag_value == pytest.approx(math.sqrt(Hp) * r["min_rms"] * 2 ** -15, rel=1e-12)
    ids = tiny_tokenizer().encode(stdlib_text())[:256]
    lg = _text_logits(sp, ids)
    Vh = info.host_vocab
    gap = lg[:, :Vh].max(-1).values - lg[:, Vh:].max(-1).values
    assert float(gap.min()) > 104.0
    assert float(lg.float().softmax(-1)[:, Vh:].sum(-1).max()) == 0.0
    old = splice(h, m, flag_value=1e-3, suppression=1e5)
    mass_old = _text_logits(old, ids).float().softmax(-1)[:, Vh:].sum(-1).max()
    if scale > 1:
        assert float(mass_old) > 1e-20
    assert old.splice_info.residual is None  # nothing measured when both are given


def test_size_text_flag_formula():
    """The derivation of size_text_flag, checked on round numbers."""
    from gpu_layers.splice import FP32_EXP_UNDERFLOW, ResidualStats

    st = ResidualStats(min_rms=0.5, max_final_rms=2.0, logit_bound=100.0, positions=10)
    f, S = size_text_flag(st, 100, 400, 0.0, "scale_residual")
    assert f == pytest.approx(20 * 0.5 * 2 ** -15)                     # sqrt(H') r_min 2^-15
    assert S == pytest.approx(100 * (100 + FP32_EXP_UNDERFLOW) * math.sqrt(4.0 + f * f / 400))
    f2, _ = size_text_flag(st, 100, 400, 0.0, "rescale_gains")
    assert f2 == pytest.approx(10 * 0.5 * 2 ** -15)                    # sqrt(H) r_min 2^-15
    with pytest.raises(SpliceError):
        size_text_flag(ResidualStats(0.0, 1.0, 1.0, 1), 100, 400, 1e-6)


def test_measure_residual_matches_the_hosts_hidden_states(host):
    ids = tiny_tokenizer().encode("def f(x):\n    return x + 1\n" * 3)
    st = measure_residual(host, ids)
    with torch.no_grad():
        hs = host(torch.tensor([ids]), output_hidden_states=True).hidden_states
    embed_rms = hs[0][0].double().pow(2).mean(-1).sqrt()
    assert st.min_rms <= float(embed_rms.min()) and st.positions == len(ids)
    with torch.no_grad():
        logits = host(torch.tensor([ids])).logits
    assert float(logits.abs().max()) <= st.logit_bound


def test_weights_are_rounded_once_in_bf16(host, machine):
    """An fp32 host and machine spliced into bf16: every scaled weight is round(w * s) formed in
    float64 and rounded once (copying to bf16 and then scaling in bf16 rounds twice and differs);
    the machine-only model in bf16 holds round(w)."""
    sp = splice(host, machine, dtype=torch.bfloat16)
    info = sp.splice_info
    H, k, s_h, s_m = info.host_hidden, info.n_prefix_layers, info.host_residual_scale, info.machine_residual_scale

    def once(w, s):
        return (w.double() * s).to(torch.bfloat16)

    twice_differs = False
    for i, hl in enumerate(host.model.layers):
        src, dst = hl.mlp.down_proj.weight, sp.model.layers[k + i].mlp.down_proj.weight[:H]
        assert torch.equal(dst, once(src, s_h))
        twice_differs |= not torch.equal(dst, src.to(torch.bfloat16) * s_h)
    assert twice_differs  # the test can tell the two roundings apart
    assert torch.equal(sp.model.embed_tokens.weight[: info.host_vocab, :H], once(host.model.embed_tokens.weight, s_h))
    layer = sp.model.layers[info.first_compiled_layer]
    M = slice(H, H + machine.width)
    out_proj = machine.layers[0]["linear_attn.out_proj.weight"]
    assert torch.equal(layer.linear_attn.out_proj.weight[M], once(out_proj, s_m))
    down = layer.mlp.down_proj.weight[M].clone()
    if info.flag_location == "compiled_layer_0":  # the flag neurons write the flag dim of this layer
        down[machine.text_flag_dim] = 0
    assert torch.equal(down, once(machine.layers[0]["mlp.down_proj.weight"], s_m))
    assert torch.equal(layer.linear_attn.in_proj_qkv.weight[:, M],
                       machine.layers[0]["linear_attn.in_proj_qkv.weight"].to(torch.bfloat16))
    assert torch.equal(sp.model.embed_tokens.weight[info.host_vocab:, M], once(machine.embed, s_m))
    mb = build_machine_model(machine, dtype=torch.bfloat16)
    got = dict(mb.named_parameters())
    for key in LAYER_KEYS:
        assert torch.equal(got[f"model.layers.0.{key}"], machine.layers[0][key].to(torch.bfloat16)), key
    assert torch.equal(got["model.embed_tokens.weight"], machine.embed.to(torch.bfloat16))


def test_flag_in_several_leading_layers(tmp_path, one_torch_thread):
    """A host whose MLP is narrower than 2H (a VL-layout checkpoint on disk, H=64, 96 neurons):
    the flag takes two leading layers; with the host's own calibration ids (its vocabulary is 300,
    the built-in BPE text does not fit: a clear error) text leaks nothing and machine positions
    keep the host dims at exact 0."""
    fake_vl_checkpoint(tmp_path, tied=True, vocab=300)
    h = load_host(str(tmp_path), dtype=torch.float32)
    m = memory_machine(h.config)
    with pytest.raises(Exception, match="calibration"):
        splice(h, m)
    g = torch.Generator().manual_seed(0)
    cal = torch.randint(0, 300, (200,), generator=g).tolist()
    sp = splice(h, m, calibration_ids=cal)
    info = sp.splice_info
    assert info.flag_location == "leading_layers" and info.n_prefix_layers == 2 + 1
    text = torch.randint(0, 300, (120,), generator=g).tolist()
    assert float(_text_logits(sp, text).float().softmax(-1)[:, info.host_vocab:].sum(-1).max()) == 0.0
    toks, expect = memory_program(m, 40, seed=2)
    out = _layers_out(sp, [info.host_vocab + t for t in toks])
    assert all(torch.all(hs[0, :, : info.host_hidden] == 0) for hs in out.hidden_states)
    for t in _read_positions(expect):
        assert int(out.logits[0, t].argmax()) == info.token_id(f"<m:v={expect[t]}>")
