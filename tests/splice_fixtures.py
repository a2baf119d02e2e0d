"""Helpers shared by the splice, KL and host tests: a hand-built one-layer memory machine (the
DESIGN probe's dual-rail DeltaNet memory), its random programs, a fake vision-language checkpoint
on disk, and real text. Test-only: nothing in gpu_layers uses them."""
import inspect
import json
import math
import string
import textwrap

import torch
from safetensors.torch import save_file

from gpu_layers.craft.compiled import CompiledMachine
from gpu_layers.splice import expected_layer_shapes


def stdlib_text() -> str:
    """Real text: Python standard-library source read from the running interpreter."""
    return inspect.getsource(textwrap) + inspect.getsource(string)


def memory_machine(host_cfg, slots: int = 4, bits: int = 4, width: int = 32) -> CompiledMachine:
    """A `slots` x `bits` memory in linear-attention head 0 of one compiled layer.

    Tokens: "<m:w{s}={v}>" writes value v to slot s; "<m:r{s}>" reads slot s (the read lands in field
    `out` as +-1-ish dual-rail differences in the same token); "<m:v={v}>" are output tokens whose
    unembed rows match the sign pattern of `out` (the next-token argmax after a read is the value
    read). The MLP re-digitises `out` into `dig` (silu gate, reads only machine dims). The last dim
    is the text-flag dim (nothing reads or writes it).
    """
    S, B = slots, bits
    f = {}
    pos = 0
    for name, n in (("one", 1), ("wa", S), ("ra", S), ("val", B), ("we", 1), ("out", B), ("dig", B)):
        f[name] = (pos, pos + n)
        pos += n
    if pos + 1 > width:
        raise ValueError(f"memory_machine needs width >= {pos + 1}")
    if S > host_cfg.linear_key_head_dim or 2 * B > host_cfg.linear_value_head_dim:
        raise ValueError("memory_machine: slots/bits exceed one linear-attention head")
    W = width
    flag = W - 1
    kd = host_cfg.linear_num_key_heads * host_cfg.linear_key_head_dim
    shapes = expected_layer_shapes(host_cfg, W)
    L = {k: torch.zeros(s) for k, s in shapes.items()}
    one, wa, ra, val, we, out, dig = (f[k][0] for k in ("one", "wa", "ra", "val", "we", "out", "dig"))
    G = 30.0
    qkv = L["linear_attn.in_proj_qkv.weight"]
    for j in range(S):
        qkv[j, ra + j] = G                   # q (head 0)
        qkv[kd + j, wa + j] = G              # k (head 0)
    for i in range(B):
        qkv[2 * kd + 2 * i, val + i] = G     # v rails (head 0): bit = +1
        qkv[2 * kd + 2 * i + 1, val + i] = -G  # bit = -1
    L["linear_attn.conv1d.weight"][:, 0, -1] = 1.0
    L["linear_attn.in_proj_b.weight"][0, we] = 200.0
    L["linear_attn.in_proj_b.weight"][0, one] = -25.0
    L["linear_attn.dt_bias"].fill_(-100.0)      # gate held open
    L["linear_attn.in_proj_z.weight"][: host_cfg.linear_value_head_dim, one] = 2.0
    L["linear_attn.norm.weight"].fill_(1.0)
    for i in range(B):
        L["linear_attn.out_proj.weight"][out + i, 2 * i] = 0.05
        L["linear_attn.out_proj.weight"][out + i, 2 * i + 1] = -0.05
    for i in range(B):  # dig_i = silu(4 out_i) * one
        L["mlp.gate_proj.weight"][i, out + i] = 4.0
        L["mlp.up_proj.weight"][i, one] = 1.0
        L["mlp.down_proj.weight"][dig + i, i] = 0.5
    names, emb, unemb = [], [], []

    def row(**fields):
        r = torch.zeros(W)
        r[one] = 4.0
        for k, v in fields.items():
            if k == "wa" or k == "ra":
                r[f[k][0] + v] = 1.0
            elif k == "val":
                for i in range(B):
                    r[val + i] = 1.0 if (v >> i) & 1 else -1.0
            elif k == "we":
                r[we] = 1.0
        return r

    for s in range(S):
        for v in range(2 ** B):
            names.append(f"<m:w{s}={v}>")
            emb.append(row(wa=s, val=v, we=1))
            unemb.append(torch.zeros(W))
    for s in range(S):
        names.append(f"<m:r{s}>")
        emb.append(row(ra=s))
        unemb.append(torch.zeros(W))
    for v in range(2 ** B):
        names.append(f"<m:v={v}>")
        emb.append(row())
        u = torch.zeros(W)
        for i in range(B):
            u[out + i] = 3.0 if (v >> i) & 1 else -3.0
        unemb.append(u)
    shapes_used = {k: getattr(host_cfg, k) for k in (
        "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
        "linear_conv_kernel_dim", "intermediate_size", "rms_norm_eps")}
    return CompiledMachine(width=W, layers=[L], embed=torch.stack(emb), unembed=torch.stack(unemb),
                           final_norm=torch.zeros(W), token_names=names, text_flag_dim=flag,
                           fields={**f, "text_flag": (flag, flag + 1)}, layer_shapes=shapes_used)


def memory_program(machine: CompiledMachine, n: int, seed: int = 0):
    """A random write/read program for `memory_machine`: (machine token indices, expected value
    after each token or None)."""
    g = torch.Generator().manual_seed(seed)
    names = machine.token_names
    S = sum(1 for x in names if x.startswith("<m:r"))
    B = int(math.log2(sum(1 for x in names if x.startswith("<m:v="))))
    mem, toks, expect = {}, [], []
    for _ in range(n):
        if not mem or torch.rand((), generator=g) < 0.5:
            s = int(torch.randint(S, (), generator=g))
            v = int(torch.randint(2 ** B, (), generator=g))
            mem[s] = v
            toks.append(names.index(f"<m:w{s}={v}>"))
            expect.append(None)
        else:
            s = sorted(mem)[int(torch.randint(len(mem), (), generator=g))]
            toks.append(names.index(f"<m:r{s}>"))
            expect.append(mem[s])
    return toks, expect


def fake_vl_checkpoint(tmp_path, tied=True, vocab=300, intermediate=96, linear_heads=(2, 16, 16)):
    """A tiny checkpoint laid out like the Qwen3.5 vision-language release: config with text_config
    and vision_config, text weights under model.language_model., vision + MTP weights, 2 shards + index.
    linear_heads: (heads, key head dim, value head dim) of its linear-attention layers. Returns
    (the source Qwen3_5ForCausalLM in fp32, the saved state dict in bf16)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    nh, dk, dv = linear_heads
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=intermediate, num_hidden_layers=4,
                layer_types=["linear_attention"] * 3 + ["full_attention"], linear_num_key_heads=nh,
                linear_num_value_heads=nh, linear_key_head_dim=dk, linear_value_head_dim=dv,
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
