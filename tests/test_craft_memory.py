"""DeltaNet memory ports on random programs of writes / reads / resets (40 sequences x 256 tokens =
10,240 tokens, crossing the chunked path's 64-token chunk boundaries), compared with a Python model
of the memory on both paths. Covers: binary and one-hot addresses, write-then-read in one token,
reads of unwritten cells (absent, still constant norm), the read enable, resets, masked per-lane
writes (one value head per lane, keys shared), words wider than one head, grouped value heads."""
import pytest

from gpu_layers.craft.testing import TINY, run_memory


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _assert_exact(res):
    for path, per in res.items():
        for name, (wrong, margin) in per.items():
            assert wrong == 0, f"{path} {name}: {wrong} wrong reads"
            assert margin == 0, f"{path} {name}: {margin} reads outside the margin"


def test_one_lane_32bit_binary_write_onehot_read():
    res, comp = run_memory(slots=16, wbits=32, lanes=1)
    _assert_exact(res)
    assert comp.num_layers == 1          # the port in layer 0's mixer, read_bits in its MLP


def test_four_lanes_masked_writes_dual_data_onehot_write():
    res, comp = run_memory(slots=32, wbits=16, lanes=4, waddr_enc="onehot", raddr_enc="bits", data_enc="dual",
                           seed=1, T=192)
    _assert_exact(res)


def test_wide_word_spans_two_heads_no_enable_no_reset():
    res, _ = run_memory(slots=8, wbits=48, lanes=1, read_enable=False, reset=False, seed=2, T=192)
    _assert_exact(res)


def test_grouped_value_heads_share_keys():
    cfg = dict(TINY, linear_num_key_heads=4, linear_num_value_heads=8)     # 2 value heads per key head
    res, comp = run_memory(config=cfg, slots=16, wbits=32, lanes=3, seed=3, T=192)
    _assert_exact(res)


def _banked_circuit(slots, wbits, config, parts=None, shared=False):
    from gpu_layers.craft import blocks as B
    from gpu_layers.craft.assemble import compile_circuit
    from gpu_layers.craft.circuit import Circuit
    from gpu_layers.craft.fields import bits, dual
    nlo = config["linear_key_head_dim"].bit_length() - 1
    nhi = max(1, (-(-slots // (1 << nlo)) - 1).bit_length())
    c = Circuit("banked")
    f = {n: c.input(bits(n, k)) for n, k in (("wlo", nlo), ("whi", nhi), ("rlo", nlo), ("rhi", nhi), ("d", wbits))}
    we = c.input(dual("we", 1))
    rhi = B.bank_select(c, "rbank", f["rhi"]).outputs[0] if shared else f["rhi"]
    blk = B.banked_memory(c, "m", slots, wbits, (f["wlo"], f["whi"]), (f["rlo"], rhi), f["d"], we=we.bit(0),
                          parts=parts)
    return compile_circuit(c, config), blk, 1 << nlo


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("parts", [None, [("lo", 5), ("mid", 3), ("hi", 8)]])
def test_banked_memory_more_slots_than_a_key_head(parts, shared):
    """96 slots on 32-slot key heads: 3 banks (ports) in one mixer, the read selected by the bank
    bits in the MLP; or (shared) each bank's read enabled by a one-hot of the bank bits, the three
    reads landing in one field (a layer later: the one-hot is an MLP stage). Random writes/reads
    over 128 addresses (the fourth bank's reads as absent, 0), compared with a plain dict on both
    paths; with `parts`, the word comes out as three fields (low bits first)."""
    import numpy as np
    from gpu_layers.craft.testing import compare_outputs, encode_rows, run_paths
    comp, blk, bank = _banked_circuit(96, 16, TINY, parts, shared)
    assert bank == 32 and comp.num_layers == 1 + shared
    mixers = [st for pl in comp.plans for st in pl.mixer]
    assert sum(len(st.ports) for st in mixers) == 3 and len(mixers) == (1 if shared else 3)
    read_dims = sum(f.dims for f in comp.circuit.layout.fields.values() if f.enc == "rail3")
    assert read_dims == (1 if shared else 3) * 2 * 16
    rng = np.random.default_rng(7)
    Bn, T = 24, 160
    vals = {n: np.zeros((Bn, T), dtype=np.int64) for n in ("wlo", "whi", "rlo", "rhi", "d", "we")}
    exp = np.zeros((Bn, T), dtype=np.int64)
    for b in range(Bn):
        mem, model = {}, blk.ref.__class__(blk.ref.bank_slots, blk.ref.banks, blk.ref.waddr, blk.ref.raddr,
                                            blk.ref.data, blk.ref.outs, blk.ref.parts)
        hot = rng.integers(0, 96, 4)
        for t in range(T):
            wa = int(rng.choice(hot)) if rng.random() < 0.5 else int(rng.integers(96))
            ra = wa if rng.random() < 0.3 else (int(rng.choice(hot)) if rng.random() < 0.6 else int(rng.integers(128)))
            v = {"wlo": wa % 32, "whi": wa // 32, "rlo": ra % 32, "rhi": ra // 32,
                 "d": int(rng.integers(0, 1 << 16)), "we": int(rng.random() < 0.4)}
            if v["we"]:
                mem[wa] = v["d"]
            exp[b, t] = mem.get(ra, 0)
            got = model.step({**v, "_we": v["we"], "rbank": v["rhi"]})
            assert (got["m"] if parts is None else got["lo"] | got["mid"] << 5 | got["hi"] << 8) == exp[b, t]
            for n in vals:
                vals[n][b, t] = v[n]
    X = encode_rows(comp, {n: a.reshape(-1) for n, a in vals.items()}).reshape(Bn, T, -1)
    e = exp.reshape(-1)
    want = {"m": e} if parts is None else {"lo": e & 31, "mid": (e >> 5) & 7, "hi": e >> 8}
    for path, h in run_paths(comp, X).items():
        for name, (wrong, margin) in compare_outputs(comp, h, want).items():
            assert wrong == 0 and margin == 0, (path, name, wrong, margin)


def test_write_only_port_is_read_from_the_cache_state():
    """A write-only port (no read fields: the residual is not widened) holds exactly what a plain
    dict model holds, decoded from the recurrent state in the transformers cache after a prefill
    and after token-by-token decode (gpu_layers.craft.state)."""
    import numpy as np
    import torch
    from transformers.cache_utils import DynamicCache
    from gpu_layers.craft import blocks as B
    from gpu_layers.craft.assemble import compile_circuit
    from gpu_layers.craft.circuit import Circuit
    from gpu_layers.craft.fields import bits, dual
    from gpu_layers.craft.machine_model import as_inputs, build_machine_model
    from gpu_layers.craft.state import max_rail_error, port_contents
    from gpu_layers.craft.testing import encode_rows
    c = Circuit("wo")
    wa = c.input(bits("wa", 5))
    d = [c.input(bits(f"d{l}", 40)) for l in range(2)]
    we = [c.input(dual(f"we{l}", 1)) for l in range(2)]
    B.memory(c, "wo", 32, 40, wa, None, d, we=[w.bit(0) for w in we], read=False)
    comp = compile_circuit(c, TINY)
    assert comp.machine.width == 1 + 5 + 80 + 4 + 1          # no read dims
    place = comp.port("wo")
    assert place.layer == 0 and [len(h) for h in place.heads] == [2, 2]    # 40 bits: 2 heads per lane
    rng = np.random.default_rng(3)
    Bn, T = 6, 150
    vals = {n: rng.integers(0, 32, (Bn, T)) if n == "wa" else
            (rng.integers(0, 1 << 40, (Bn, T)) if n.startswith("d") else (rng.random((Bn, T)) < 0.3).astype(int))
            for n in ("wa", "d0", "d1", "we0", "we1")}
    want = [[{} for _ in range(2)] for _ in range(Bn)]
    for b in range(Bn):
        for t in range(T):
            for l in range(2):
                if vals[f"we{l}"][b, t]:
                    want[b][l][int(vals["wa"][b, t])] = int(vals[f"d{l}"][b, t])
    X = encode_rows(comp, {n: a.reshape(-1) for n, a in vals.items()}).reshape(Bn, T, -1)
    model = build_machine_model(comp.machine)
    x = as_inputs(X, model)
    with torch.no_grad():
        pre = DynamicCache(config=model.config)
        model.model(inputs_embeds=x, cache=pre, use_cache=True)
        dec = DynamicCache(config=model.config)
        for t in range(T):
            model.model(inputs_embeds=x[:, t:t + 1], cache=dec, use_cache=True)
    for cache in (pre, dec):
        for b in range(Bn):
            got = port_contents(cache, comp, "wo", batch=b)
            for l in range(2):
                assert {s: w for s, w in enumerate(got[l]) if w is not None} == want[b][l]
        st = cache.get_recurrent_state(0)
        assert max_rail_error(st, place, 0) < 1e-4


def test_blank_writes_make_a_slot_unwritten():
    """memory(blank=...): a write whose blank flag is 1 stores an unwritten word (how the register
    file keeps poison). A read port with per-lane writes and blanks, on random tokens: reads equal
    a dict model in which a blank write deletes the slot (absent reads), on both paths, and the
    recurrent state decodes to the same contents; bits data is refused."""
    import numpy as np
    import torch
    from transformers.cache_utils import DynamicCache
    from gpu_layers.craft import blocks as B
    from gpu_layers.craft.assemble import compile_circuit
    from gpu_layers.craft.circuit import Circuit, CircuitError
    from gpu_layers.craft.fields import bits, dual
    from gpu_layers.craft.machine_model import as_inputs, build_machine_model
    from gpu_layers.craft.state import port_contents
    from gpu_layers.craft.testing import compare_outputs, encode_rows, run_paths
    c = Circuit("blank")
    wa, ra = c.input(bits("wa", 3)), c.input(bits("ra", 3))
    d = [c.input(dual(f"d{l}", 12)) for l in range(2)]
    we = [c.input(dual(f"we{l}", 1)) for l in range(2)]
    bl = [c.input(dual(f"bl{l}", 1)) for l in range(2)]
    blk = B.memory(c, "m", 8, 12, wa, ra, d, we=[w.bit(0) for w in we], blank=[b.bit(0) for b in bl])
    comp = compile_circuit(c, TINY)
    rng = np.random.default_rng(5)
    Bn, T = 8, 150
    vals = {"wa": rng.integers(0, 8, (Bn, T)), "ra": rng.integers(0, 8, (Bn, T))}
    for l in range(2):
        vals[f"d{l}"] = rng.integers(0, 1 << 12, (Bn, T))
        vals[f"we{l}"] = (rng.random((Bn, T)) < 0.5).astype(int)
        vals[f"bl{l}"] = (rng.random((Bn, T)) < 0.3).astype(int)
    exp = {f"m_r{l}": np.zeros((Bn, T), dtype=np.int64) for l in range(2)}
    final = []
    for b in range(Bn):
        mem = [{}, {}]
        model = blk.ref.__class__(blk.ref.p)
        for t in range(T):
            v = {n: int(a[b, t]) for n, a in vals.items()}
            for l in range(2):
                if v[f"we{l}"] and v[f"bl{l}"]:
                    mem[l].pop(v["wa"], None)
                elif v[f"we{l}"]:
                    mem[l][v["wa"]] = v[f"d{l}"]
                exp[f"m_r{l}"][b, t] = mem[l].get(v["ra"], -1)
            got = model.step({**v, "_we": [v["we0"], v["we1"]], "_blank": [v["bl0"], v["bl1"]]})
            assert [-1 if got[f"m_r{l}"] is None else got[f"m_r{l}"] for l in range(2)] == \
                [exp[f"m_r{l}"][b, t] for l in range(2)]
        final.append(mem)
    assert (exp["m_r0"] == -1).mean() > 0.2 and (exp["m_r0"] >= 0).mean() > 0.2
    X = encode_rows(comp, {n: a.reshape(-1) for n, a in vals.items()}).reshape(Bn, T, -1)
    for path, h in run_paths(comp, X).items():
        for name, (wrong, margin) in compare_outputs(comp, h, {k: e.reshape(-1) for k, e in exp.items()}).items():
            assert wrong == 0 and margin == 0, (path, name, wrong, margin)
    model = build_machine_model(comp.machine)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model.model(inputs_embeds=as_inputs(X, model), cache=cache, use_cache=True)
    for b in range(Bn):
        got = port_contents(cache, comp, "m", batch=b)
        assert [{s: w for s, w in enumerate(got[l]) if w is not None} for l in range(2)] == final[b]
    c2 = Circuit("blank_bits")
    x = c2.input(bits("x", 4))
    with pytest.raises(CircuitError, match="blank write needs dual or rail3"):
        B.memory(c2, "m", 4, 4, None, None, x, blank=c2.input(dual("b", 1)).bit(0))
        compile_circuit(c2, TINY)


def test_ports_in_two_layers_share_one_read_field():
    """Ten one-lane ports (a tiny host's layer holds 7 besides the constant head, so they land in
    two layers), each read enabled by its entry of a one-hot input, all reading into one rail3
    field: it holds the enabled port's word, or reads absent where that port never wrote the slot,
    strictly decoded on both paths (so the constant head's -0.5 came once, and before any read);
    the field costs one word's dims. Sharing a field without read enables is refused."""
    import numpy as np
    from gpu_layers.craft import blocks as B
    from gpu_layers.craft.assemble import compile_circuit
    from gpu_layers.craft.circuit import Circuit, CircuitError
    from gpu_layers.craft.fields import bits, dual, onehot, rail3
    from gpu_layers.craft.testing import compare_outputs, encode_rows, run_paths
    P, WB = 10, 12
    c = Circuit("shared")
    wa, ra, d = c.input(bits("wa", 5)), c.input(bits("ra", 5)), c.input(bits("d", WB))
    wsel, rsel = c.input(onehot("wsel", P)), c.input(onehot("rsel", P))
    we = c.input(dual("we", 1))
    shared = c.new_field(rail3("sh_r", WB))
    for p in range(P):
        B.memory(c, f"m{p}", 32, WB, wa, ra, d, we=we.bit(0) + wsel.hot(p) - 1.0, re=rsel.hot(p), out=[shared])
    with pytest.raises(CircuitError, match="read enable"):
        B.memory(c, "bad", 32, WB, wa, ra, d, out=[shared])
    B.read_bits(c, shared, name="word", with_present=True)
    comp = compile_circuit(c, TINY)
    assert sorted({pl for pl, plan in enumerate(comp.plans) for st in plan.mixer}) == [0, 1]
    assert comp.layout.fields["sh_r"].dims == 2 * WB and comp.num_layers == 2
    rng = np.random.default_rng(11)
    Bn, T = 16, 160
    vals = {n: rng.integers(0, k, (Bn, T)) for n, k in (("wa", 32), ("ra", 32), ("d", 1 << WB), ("wsel", P),
                                                       ("rsel", P), ("we", 2))}
    vals["ra"] = np.where(rng.random((Bn, T)) < 0.5, vals["wa"], vals["ra"])
    exp = np.full((Bn, T), -1, dtype=np.int64)
    for b in range(Bn):
        mem = [dict() for _ in range(P)]
        for t in range(T):
            if vals["we"][b, t]:
                mem[vals["wsel"][b, t]][vals["wa"][b, t]] = vals["d"][b, t]
            exp[b, t] = mem[vals["rsel"][b, t]].get(vals["ra"][b, t], -1)
    assert (exp >= 0).sum() > 200 and (exp < 0).sum() > 200
    X = encode_rows(comp, {n: a.reshape(-1) for n, a in vals.items()}).reshape(Bn, T, -1)
    e = exp.reshape(-1)
    want = {"sh_r": e, "word": np.maximum(e, 0), "word_present": (e >= 0).astype(np.int64)}
    for path, h in run_paths(comp, X).items():
        for name, (wrong, margin) in compare_outputs(comp, h, want).items():
            assert wrong == 0 and margin == 0, (path, name, wrong, margin)
