"""The demonstration circuit (a 4-lane register file of 32-bit registers with an adder) is exact on
random programs of 200+ operations: teacher-forced in one prefill, token by token with the cache,
and driven by stock `generate` (greedy), which emits every sum itself."""
import numpy as np
import pytest
import torch
from transformers.cache_utils import DynamicCache

from gpu_layers.craft.demo_regfile import build_regfile, random_program
from gpu_layers.craft.testing import LAYERS_2B

N_OPS = 200


@pytest.fixture(scope="module")
def demo():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    d = build_regfile(LAYERS_2B)  # the "regfile" machine as a Qwen3.5-2B build contains it
    yield d, d.model()
    torch.set_num_threads(n)


def _check(pred, expect, mask, toks):
    bad = [(i, toks[i], expect[i], pred[i]) for i in range(len(toks)) if mask[i] and pred[i] != expect[i]]
    assert not bad, f"{len(bad)} wrong emissions, first: {bad[:3]}"


def test_layout_and_costs(demo):
    d, _ = demo
    comp = d.compiled
    assert comp.num_layers == 6
    assert comp.machine.vocab_size == 16 + 1024 + 64 + 1024 + 1
    assert "mix:rfa" in comp.report()


def test_prefill_teacher_forced(demo):
    d, model = demo
    toks, expect, mask = random_program(np.random.default_rng(0), N_OPS)
    with torch.no_grad():
        logits = model(torch.tensor([d.encode(toks)])).logits[0]
    _check(d.decode(logits.argmax(-1)), expect, mask, toks)
    assert sum(mask) >= 5 * 60


def test_decode_token_by_token_with_cache(demo):
    """The recurrent path from an empty cache (the first 20 ops token by token), then after a long
    teacher-forced prefill has filled the register file (ops 20..139 in one forward continuing the
    cache), token by token again (ops 140..179): sums of registers written long before. (At
    Qwen3.5-2B's dense layer budgets one decode step costs ~0.1 s on a CPU core, so the stream is
    decoded in two windows instead of all 900 tokens.)"""
    d, model = demo
    toks, expect, mask = random_program(np.random.default_rng(1), 180)
    ids = d.encode(toks)
    windows, pre = [(0, 100), (700, 900)], (100, 700)
    cache = DynamicCache(config=model.config)
    pred = {}
    with torch.no_grad():
        for a, b in windows[:1]:
            for t in range(a, b):
                pred[t] = int(model(torch.tensor([[ids[t]]]), cache=cache, use_cache=True).logits[0, -1].argmax())
        model(torch.tensor([ids[pre[0]:pre[1]]]), cache=cache, use_cache=True)
        for a, b in windows[1:]:
            for t in range(a, b):
                pred[t] = int(model(torch.tensor([[ids[t]]]), cache=cache, use_cache=True).logits[0, -1].argmax())
    pos = sorted(pred)
    assert sum(mask[t] for t in pos) >= 5 * 20
    _check(d.decode([pred[t] for t in pos]), [expect[t] for t in pos], [mask[t] for t in pos],
           [toks[t] for t in pos])


@pytest.mark.filterwarnings("error::FutureWarning")
def test_generate_emits_every_sum(demo):
    """The host appends write tokens; at each <sum> the model generates the 4 sum bytes and <end>
    greedily (stock generate, the cache carried across calls as `cache=`: transformers 5.24's
    keyword; the deprecated `past_key_values` would raise a FutureWarning, an error here)."""
    d, model = demo
    rng = np.random.default_rng(2)
    toks, expect, mask = random_program(rng, 80)   # 2B layer budgets: ~0.1 s per decode step on a CPU core
    seq = []
    cache = DynamicCache(config=model.config)
    i = n_sums = 0
    while i < len(toks):
        if toks[i].startswith("<sum"):
            seq.append(d.token_ids[toks[i]])
            ids = torch.tensor([seq])       # with the full attention mask, generate feeds only the uncached tokens
            out = model.generate(ids, attention_mask=torch.ones_like(ids), cache=cache, max_new_tokens=5,
                                 do_sample=False)
            new = d.decode(out[0, len(seq):])
            assert new == expect[i:i + 5], (i, toks[i], new, expect[i:i + 5])
            seq = out[0, :-1].tolist()               # keep the emitted bytes, drop <end> (not yet run)
            i += 5
            n_sums += 1
        else:
            seq.append(d.token_ids[toks[i]])
            i += 1
    assert n_sums >= 25


def test_prefix_adder_variant_is_exact_in_bf16_too():
    """With the Kogge-Stone adder (every threshold of small range) the whole demo is exact in bf16
    (CPU, both paths, teacher forced); the default lookahead adder is fp32-only (see the bf16 table)."""
    d = build_regfile(LAYERS_2B, adder="prefix")   # "regfile-prefix", as for Qwen3.5-2B
    assert d.compiled.num_layers == 10
    toks, expect, mask = random_program(np.random.default_rng(3), 120)   # bf16 matmuls are slow on a CPU
    ids = d.encode(toks)
    model = d.model(dtype=torch.bfloat16)
    with torch.no_grad():
        _check(d.decode(model(torch.tensor([ids])).logits[0].argmax(-1)), expect, mask, toks)
        cache, pred = DynamicCache(config=model.config), []
        for t in ids[:48]:           # the recurrent path in bf16 (the prefill covers all 120)
            pred.append(int(model(torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1].argmax()))
    assert sum(mask[:48]) >= 8                   # emissions checked on the recurrent path
    _check(d.decode(pred), expect[:48], mask[:48], toks[:48])
