import inspect
import json
import textwrap

import pytest
import torch

from gpu_layers.hosts import (QWEN35_VOCAB, TINY_HOSTS, HostLoadError, calibration_ids, load_host,
                              map_weight_name, tiny_host, tiny_tokenizer)
from splice_fixtures import fake_vl_checkpoint


@pytest.fixture(scope="module")
def host():
    return tiny_host()


def test_tiny_host_structure(host):
    c = host.config
    assert c.vocab_size == QWEN35_VOCAB == 248_320
    assert c.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert (c.hidden_size, c.intermediate_size, c.linear_num_key_heads, c.linear_num_value_heads,
            c.linear_key_head_dim, c.linear_value_head_dim, c.linear_conv_kernel_dim,
            c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (128, 1536, 8, 8, 32, 64, 4, 4, 2, 32)
    assert c.tie_word_embeddings and host.lm_head.weight is host.model.embed_tokens.weight
    assert type(host).__name__ == "Qwen3_5ForCausalLM"


def test_tiny_host_is_deterministic(host):
    again = tiny_host(seed=0)
    other = tiny_host(seed=1)
    pa = dict(host.named_parameters())
    assert all(torch.equal(pa[n], p) for n, p in again.named_parameters())
    assert not torch.equal(pa["model.layers.0.mlp.up_proj.weight"], dict(other.named_parameters())["model.layers.0.mlp.up_proj.weight"])


def test_tiny_2b_layers_host_has_the_2b_layer_budgets():
    """tiny-2b-layers: Qwen3.5-2B's per-layer budgets (all the compiler reads), tiny elsewhere."""
    from gpu_layers.craft.assemble import SHAPE_KEYS
    from gpu_layers.hosts import LAYER_BUDGET_KEYS, REAL_2B_TEXT_CONFIG

    assert set(LAYER_BUDGET_KEYS) == set(SHAPE_KEYS)
    c = load_host("tiny-2b-layers", dtype=torch.float32).config
    assert {k: getattr(c, k) for k in SHAPE_KEYS} == {k: REAL_2B_TEXT_CONFIG[k] for k in SHAPE_KEYS}
    assert (c.intermediate_size, c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
            c.linear_value_head_dim, c.linear_conv_kernel_dim) == (6144, 16, 16, 128, 128, 4)
    assert (c.hidden_size, c.num_hidden_layers, c.vocab_size) == (128, 4, QWEN35_VOCAB)


@pytest.mark.parametrize("name", ["tiny", "tiny-2b-layers"])
def test_tiny_host_scales_are_realistic(host, name):
    if name != "tiny":
        host = load_host(name, dtype=torch.float32)  # the same tiny_host draw (seeded) at other shapes
    tok = tiny_tokenizer()
    ids = torch.tensor([tok.encode(inspect.getsource(textwrap))[:256]])
    with torch.no_grad():
        out = host(ids, output_hidden_states=True)
    hs = out.hidden_states[:-1]  # residual entering each layer and after the last one (pre-norm)
    for h in hs:
        rms = h[0].pow(2).mean(-1).sqrt()
        assert 0.7 < float(rms.mean()) < 2.0, float(rms.mean())
    logits = out.logits[0]
    assert 3.0 < float(logits.std(-1).mean()) < 10.0
    top = logits.softmax(-1).max(-1).values.mean()
    assert 0.1 < float(top) < 0.9  # neither flat nor degenerate
    for n, p in host.named_parameters():
        if n.endswith("layernorm.weight"):
            assert float(p.detach().std()) > 0.05  # non-trivial gains


def test_small_residual_host_is_the_tiny_host_at_a_small_scale(host, one_torch_thread):
    """tiny-small-residual: the same draw with the residual stream x 0.05 (embedding and writers)
    and the final-norm gains / 0.05: residual rms 0.05-0.08 like a trained model's, the same
    logits up to the norms' eps (eps / rms^2 ~ 4e-4 instead of 1e-6)."""
    small = load_host("tiny-small-residual", dtype=torch.float32)
    assert TINY_HOSTS["tiny-small-residual"].residual_scale == 0.05
    ids = torch.tensor([tiny_tokenizer().encode(inspect.getsource(textwrap))[:256]])
    with torch.no_grad():
        a = host(ids, output_hidden_states=True)
        b = small(ids, output_hidden_states=True)
    for ha, hb in zip(a.hidden_states[:-1], b.hidden_states[:-1]):  # residual entering each layer
        ra, rb = ha[0].pow(2).mean(-1).sqrt(), hb[0].pow(2).mean(-1).sqrt()
        assert 0.04 < float(rb.mean()) < 0.1
        assert torch.allclose(rb, 0.05 * ra, rtol=2e-3)
    pa, pb = a.logits[0].double().log_softmax(-1), b.logits[0].double().log_softmax(-1)
    kl = (pa.exp() * (pa - pb)).sum(-1)
    assert 0 < float(kl.max()) < 1e-4  # eps matters at this scale: measurably, not much
    assert torch.equal(small.model.layers[0].mlp.up_proj.weight, host.model.layers[0].mlp.up_proj.weight)
    with pytest.raises(ValueError):
        tiny_host(residual_scale=0.0)


def test_calibration_ids():
    ids = calibration_ids(QWEN35_VOCAB)
    assert len(ids) > 300 and max(ids) < QWEN35_VOCAB
    from gpu_layers.errors import QwenGPUError

    with pytest.raises(QwenGPUError, match="vocabulary"):
        calibration_ids(300)


def test_tokenizer_fits_vocabulary():
    tok = tiny_tokenizer()
    assert tok._tokenizer.n_vocab == 248_077 <= QWEN35_VOCAB
    assert tok.encode("def f(x):\n    return x") and max(tok.encode("héllo wörld")) < QWEN35_VOCAB


def test_weight_name_mapping():
    assert map_weight_name("model.language_model.layers.0.linear_attn.A_log") == "model.layers.0.linear_attn.A_log"
    assert map_weight_name("model.language_model.embed_tokens.weight") == "model.embed_tokens.weight"
    assert map_weight_name("language_model.model.norm.weight") == "model.norm.weight"
    assert map_weight_name("lm_head.weight") == "lm_head.weight"
    assert map_weight_name("model.layers.3.self_attn.q_proj.weight") == "model.layers.3.self_attn.q_proj.weight"
    for skip in ("model.visual.blocks.0.attn.qkv.weight", "mtp.fc.weight", "visual.merger.linear_fc1.bias"):
        assert map_weight_name(skip) is None


@pytest.mark.parametrize("tied", [True, False])
def test_load_host_fromfake_vl_checkpoint(tmp_path, tied):
    src, sd = fake_vl_checkpoint(tmp_path, tied=tied)
    m = load_host(str(tmp_path), dtype=torch.bfloat16)
    assert type(m).__name__ == "Qwen3_5ForCausalLM"
    assert m.config.hidden_size == 64 and m.config.tie_word_embeddings == tied
    assert (m.lm_head.weight is m.model.embed_tokens.weight) == tied
    got = dict(m.named_parameters())
    for key, t in sd.items():
        name = key.replace("model.language_model.", "model.")
        assert torch.equal(got[name], t), name
    # it computes what the source model computes at the same (bf16) weights
    ref = src.to(torch.bfloat16)
    ids = torch.tensor([[1, 5, 9, 33, 2, 250, 7]])
    with torch.no_grad():
        assert torch.equal(m(ids).logits, ref(ids).logits)
    assert not any("visual" in n or "mtp" in n for n in got)


def test_load_host_errors(tmp_path):
    with pytest.raises(HostLoadError):
        load_host(str(tmp_path / "nope"))
    fake_vl_checkpoint(tmp_path, tied=True)
    idx = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    # drop a shard from the index: weights go missing -> clear error
    keep = "model-00001-of-00002.safetensors"
    idx["weight_map"] = {k: v for k, v in idx["weight_map"].items() if v == keep}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(HostLoadError, match="missing"):
        load_host(str(tmp_path))


def test_real_2b_config_reads_and_has_the_confirmed_size(tmp_path):
    """The released VL config layout (text_config inside a qwen3_5 config) parses into the text
    model we splice; its parameter count matches the confirmed 2B text model (meta device, no weights)."""
    from transformers import Qwen3_5ForCausalLM

    from gpu_layers.hosts import REAL_2B_TEXT_CONFIG, REAL_2B_TEXT_PARAMS, read_text_config

    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "tie_word_embeddings": True, "text_config": REAL_2B_TEXT_CONFIG,
           "vision_config": {"model_type": "qwen3_5_vision", "depth": 24, "hidden_size": 1024,
                             "out_hidden_size": 2048}, "image_token_id": 248056}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    c = read_text_config(tmp_path)
    assert (c.hidden_size, c.num_hidden_layers, c.intermediate_size, c.vocab_size) == (2048, 24, 6144, 248_320)
    assert c.layer_types.count("full_attention") == 6 and c.layer_types[3] == "full_attention"
    assert c.tie_word_embeddings and c.rms_norm_eps == 1e-6
    with torch.device("meta"):
        m = Qwen3_5ForCausalLM(c)
    assert sum(p.numel() for p in m.parameters()) == REAL_2B_TEXT_PARAMS
