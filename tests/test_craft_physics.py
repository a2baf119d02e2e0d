"""The fp32 facts the compiler relies on (DESIGN.md section 3), checked on the real transformers code."""
import math

import numpy as np
import torch
import torch.nn.functional as F
from transformers.models.qwen3_5 import modeling_qwen3_5 as Q

from gpu_layers.craft import physics as P


def test_silu_is_exact_identity_above_17_and_exact_zero_below_minus_88_8():
    hi = torch.cat([torch.tensor([17.0, 17.5, 32.0, 100.0, 200.0]), torch.rand(10000) * 1e5 + 17.0])
    assert torch.equal(F.silu(hi), hi)
    lo = torch.cat([torch.tensor([-88.8, -89.0, -100.0, -200.0]), -torch.rand(10000) * 1e5 - 88.8])
    assert (F.silu(lo) == 0).all()
    assert F.silu(torch.tensor(0.0)).item() == 0.0
    assert F.silu(torch.tensor(16.0)).item() != 16.0          # the threshold is real


def test_sigmoid_beta_exactly_one_or_zero():
    assert (torch.sigmoid(torch.tensor([17.0, P.BETA_G, 1e4])) == 1.0).all()
    assert (torch.sigmoid(torch.tensor([-88.8, -P.BETA_G, -1e4])) == 0.0).all()


def test_gate_open_and_reset():
    a = torch.zeros(1000) + torch.randn(1000) * 1e-4      # a ~ 0 (analog noise of a 0 flag)
    g = -torch.exp(torch.tensor(P.A_LOG)) * F.softplus(a + P.DT_BIAS)
    assert (torch.exp(g) == 1.0).all()
    g = -torch.exp(torch.tensor(P.A_LOG)) * F.softplus(torch.full((10,), P.RESET_A * 0.999) + P.DT_BIAS)
    assert (torch.exp(g) == 0.0).all()


def test_conv_last_tap_is_exact_identity_on_both_paths():
    C, K, T = 24, 4, 50
    w = torch.zeros(C, K)
    w[:, -1] = 1.0
    x = torch.randn(3, C, T) * 100
    y = Q.causal_conv1d_fn(x, w, None, activation=None)
    assert torch.equal(y, x)
    state = torch.randn(3, C, K)                       # whatever came before
    y1 = Q.causal_conv1d_update(x[:, :, :1].clone(), state, w, None, None)
    assert torch.equal(y1, x[:, :, :1])


def test_one_hot_key_stays_exactly_one_hot_after_silu_and_l2norm():
    dk, n = 32, 5
    for j in range(dk):
        pre = torch.zeros(dk)
        pre[j] = P.KEY_L * (1 + 1e-6 * (j - 16))       # the active entry carries analog noise
        k = Q.l2norm(F.silu(pre)[None])[0]
        assert (k[torch.arange(dk) != j] == 0).all() and abs(k[j].item() - 1) < 1e-6
    # a binary address decoded inside the projection: 200 (matches - n + 0.5) -> +100 / <= -100
    for addr in range(1 << n):
        pre = torch.tensor([2 * P.KEY_L * (sum(((addr >> i) & 1) == ((j >> i) & 1) for i in range(n)) - n + 0.5)
                            for j in range(1 << n)])
        k = Q.l2norm(F.silu(pre)[None])[0]
        assert (k[torch.arange(1 << n) != addr] == 0).all() and abs(k[addr].item() - 1) < 1e-6


def test_gated_norm_dual_rail_scale_is_data_independent_and_read_enable_exact():
    dv, nb = 64, 32
    norm = Q.Qwen3_5RMSNormGated(dv, eps=1e-6)
    words = torch.randint(0, 2, (1000, nb)).float()
    rails = torch.stack([words, 1 - words], -1).reshape(1000, dv) * (P.KEY_L / math.sqrt(32))
    z = torch.full((1000, dv), P.Z_GAIN)
    out = norm(rails, z)
    on = out[rails > 0]
    assert (on == on[0]).all() and (out[rails == 0] == 0).all()       # one exact magnitude
    assert F.silu(torch.tensor(P.Z_GAIN)).item() == P.Z_GAIN
    assert (norm(rails, torch.zeros_like(z)) == 0).all()               # z = 0: read disabled, exact 0
    assert (norm(torch.zeros(4, dv), z[:4]) == 0).all()                # unwritten cell: exact 0


def test_unwritten_cell_reads_exact_zero_in_a_real_layer():
    from gpu_layers.craft.machine_model import build_machine_model
    from gpu_layers.craft.testing import encode_rows, memory_circuit, TINY
    from gpu_layers.craft.assemble import compile_circuit
    c, blk, _ = memory_circuit(slots=16, wbits=32, with_read_bits=False)
    comp = compile_circuit(c, TINY)
    m = build_machine_model(comp.machine)
    seen = []
    h = m.model.layers[0].linear_attn.norm.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    T = 6
    vals = {"wa": np.array([3] * T), "ra": np.array([5, 5, 3, 3, 5, 3]), "d0": np.arange(T) * 77777,
            "we0": np.array([0, 0, 1, 0, 0, 0]), "re": np.ones(T, dtype=int), "rs": np.zeros(T, dtype=int)}
    X = torch.tensor(encode_rows(comp, vals), dtype=torch.float32)[None]
    with torch.no_grad():
        out = m.model(inputs_embeds=X).last_hidden_state[0].numpy()
    h.remove()
    dv = TINY["linear_value_head_dim"]
    core = seen[0].reshape(T, -1, dv)                  # (tokens, value heads, dv) before the gated norm
    head = 1                                           # the port's first value head (head 0: constant head)
    assert (core[[0, 1, 4], head] == 0).all()          # reads of never-written slot 5: exact zeros
    assert (core[[2, 3, 5], head] != 0).any(-1).all()  # slot 3 after its write (write-then-read at t=2)
    val, ok = comp.decode("m_r", out)
    assert list(val) == [-1, -1, 2 * 77777, 2 * 77777, -1, 2 * 77777] and ok.all()
