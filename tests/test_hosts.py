import json

import pytest
import torch
from safetensors.torch import save_file

from gpu_layers.hosts import (QWEN35_VOCAB, HostLoadError, load_host, map_weight_name, tiny_host,
                              tiny_tokenizer)


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


def test_tiny_host_scales_are_realistic(host):
    tok = tiny_tokenizer()
    import inspect, textwrap

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


def _fake_vl_checkpoint(tmp_path, tied=True, vocab=300):
    """A tiny checkpoint laid out like the Qwen3.5 vision-language release: config with text_config
    and vision_config, text weights under model.language_model., vision + MTP weights, 2 shards + index."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                layer_types=["linear_attention"] * 3 + ["full_attention"], linear_num_key_heads=2,
                linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
                num_attention_heads=2, num_key_value_heads=1, head_dim=32, tie_word_embeddings=tied,
                rms_norm_eps=1e-6, mtp_num_hidden_layers=1, attn_output_gate=True, model_type="qwen3_5_text",
                rope_parameters={"type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                                 "mrope_section": [2, 1, 1], "mrope_interleaved": True})
    torch.manual_seed(0)
    src = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**{k: v for k, v in text.items() if k != "model_type"})).eval()
    with torch.no_grad():
        for p in src.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    sd = {}
    for n, p in src.state_dict().items():
        if n == "lm_head.weight":
            if not tied:
                sd["lm_head.weight"] = p.detach().to(torch.bfloat16).clone()
            continue
        sd["model.language_model." + n[len("model."):]] = p.detach().to(torch.bfloat16).clone()
    names = sorted(sd)
    half = len(names) // 2
    shard1 = {n: sd[n] for n in names[:half]}
    shard2 = {n: sd[n] for n in names[half:]}
    shard1["model.visual.blocks.0.attn.qkv.weight"] = torch.randn(24, 8, dtype=torch.bfloat16)
    shard2["model.visual.merger.linear_fc2.weight"] = torch.randn(64, 16, dtype=torch.bfloat16)
    shard2["mtp.fc.weight"] = torch.randn(64, 128, dtype=torch.bfloat16)
    save_file(shard1, str(tmp_path / "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    save_file(shard2, str(tmp_path / "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    wm = {n: "model-00001-of-00002.safetensors" for n in shard1}
    wm.update({n: "model-00002-of-00002.safetensors" for n in shard2})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "tie_word_embeddings": tied, "text_config": text,
           "vision_config": {"model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 8, "out_hidden_size": 64},
           "image_token_id": vocab - 10, "video_token_id": vocab - 9}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return src, sd


@pytest.mark.parametrize("tied", [True, False])
def test_load_host_from_fake_vl_checkpoint(tmp_path, tied):
    src, sd = _fake_vl_checkpoint(tmp_path, tied=tied)
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
    _fake_vl_checkpoint(tmp_path, tied=True)
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
