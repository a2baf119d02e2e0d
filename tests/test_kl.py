import json

import pytest
import torch

from gpu_layers import kl
from gpu_layers.craft.machines import MACHINES, MachineError, build_machine
from gpu_layers.hosts import TINY_HOSTS, load_host, tiny_host, tiny_tokenizer
from gpu_layers.kl import format_table, kl_stats
from gpu_layers.splice import splice
from splice_fixtures import fake_vl_checkpoint, memory_machine, stdlib_text


@pytest.fixture(scope="module")
def host(one_torch_thread):
    return tiny_host()


@pytest.fixture(scope="module")
def ids():
    ids = tiny_tokenizer().encode(stdlib_text())[:2048]
    assert len(ids) >= 2000
    return ids


def test_spliced_tiny_host_talks_like_the_original(host, ids):
    spliced = splice(host, memory_machine(host.config))  # hand-built machine: cheap at 2048 tokens
    s = kl_stats(host, spliced, ids)
    assert s["tokens"] == len(ids) >= 2000
    assert s["mean_kl"] <= 1e-9, s
    assert s["max_machine_mass"] == 0.0 and s["max_machine_mass_fp32"] == 0.0, s  # max over every position
    assert s["max_kl"] <= 1e-7, s
    assert s["max_abs_logit_diff"] < 1e-2, s


def test_kl_catches_the_leak_without_suppression(host, ids):
    """With the machine rows' flag weight at 0 the machine logits are exactly 0 on text: they take
    probability mass (DESIGN section 5's leak) and the metric must show it."""
    leaky = splice(host, memory_machine(host.config), suppression=0.0)
    s = kl_stats(host, leaky, ids[:256])
    assert s["max_machine_mass"] > 1e-9 and s["max_kl"] > 1e-9  # small here: the tiny host's top logits are ~20
    same = kl_stats(host, host, ids[:64])
    assert same["mean_kl"] == 0.0 and same["max_abs_logit_diff"] == 0.0 and same["max_machine_mass"] == 0.0


def test_machines_are_named_and_never_replaced(tmp_path):
    """Unknown names and machines that do not fit the host are errors naming the choices."""
    with pytest.raises(MachineError, match="available: core, regfile, regfile-prefix"):
        build_machine("nope", None)
    fake_vl_checkpoint(tmp_path, tied=True, vocab=300)  # 96 MLP neurons, 2 linear heads: too small
    small = load_host(str(tmp_path), dtype=torch.float32)
    with pytest.raises(MachineError, match="'regfile' does not fit"):
        build_machine("regfile", small.config)
    from gpu_layers.cli import KL_HOSTS, KL_MACHINES

    assert set(KL_MACHINES) == set(MACHINES) and set(KL_HOSTS) == set(TINY_HOSTS)


def test_scale_residual_beats_gain_only_on_a_small_residual_host(ids, one_torch_thread):
    """On a host whose residual rms is ~0.05-0.08 (like a trained model's), with the compiler's demo
    (W=799, so H'/H = 7.2): gain rescaling alone lets the shared eps act as eps * H'/H in every
    norm; scaling the residual removes that. Measured mean KL, fp32, 128 tokens (1.7e-11 vs 5.1e-5
    on 256 tokens)."""
    small = load_host("tiny-small-residual", dtype=torch.float32)
    m = build_machine("regfile", small.config)
    got = {mode: kl_stats(small, splice(small, m, norm_mode=mode), ids[:128])
           for mode in ("scale_residual", "rescale_gains")}
    a, b = got["scale_residual"], got["rescale_gains"]
    assert a["max_machine_mass_fp32"] == 0.0 and b["max_machine_mass_fp32"] == 0.0
    assert a["mean_kl"] <= 1e-9, a
    assert b["mean_kl"] > 100 * a["mean_kl"], (a, b)


def test_kl_tool_measures_the_reloaded_checkpoint(tmp_path, monkeypatch, capsys, one_torch_thread):
    """`kl` saves the spliced checkpoint, reloads it with stock transformers and measures THAT
    model: the model kl_stats gets is the one load_spliced returned from --out."""
    import gpu_layers.splice as splice_mod
    from gpu_layers.cli import main

    loaded = []
    real_load, real_stats = splice_mod.load_spliced, kl.kl_stats

    def spy_load(path, dtype=None):
        m = real_load(path, dtype=dtype)
        loaded.append((str(path), m))
        return m

    def spy_stats(original, spliced, ids_):
        assert loaded and spliced is loaded[-1][1]
        return real_stats(original, spliced, ids_)

    monkeypatch.setattr(splice_mod, "load_spliced", spy_load)
    monkeypatch.setattr(kl, "kl_stats", spy_stats)
    f = tmp_path / "t.txt"
    f.write_text(stdlib_text()[:3000])
    out = tmp_path / "ckpt"
    assert main(["kl", "--host", "tiny", "--text", str(f), "--machine", "regfile", "--out", str(out),
                 "--json", "--max-tokens", "48"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert loaded[-1][0] == str(out) and s["checkpoint"] == str(out)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and "auto_map" not in cfg and not cfg["tie_word_embeddings"]
    assert s["loaded_class"] == "Qwen3_5ForCausalLM" and s["dtype"] == "float32" and s["tokens"] == 48
    assert s["machine"].startswith("regfile:") and s["compiled_layers"] == 7 and s["machine_vocab"] == 2129
    assert s["mean_kl"] <= 1e-9 and s["max_kl"] <= 1e-8, s
    assert s["max_machine_mass"] == 0.0 and s["max_machine_mass_fp32"] == 0.0
    assert s["residual"]["min_rms"] > 0.5 and s["suppression"] > 1e3
    table = format_table(s)
    for row in ("mean KL", "max KL", "machine-token mass (fp32)", "dtype", "tokens"):
        assert row in table
    # the same build measured again with --checkpoint: its host rebuilt from the manifest, the same numbers
    assert main(["kl", "--checkpoint", str(out), "--text", str(f), "--json", "--max-tokens", "48"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert loaded[-1][0] == str(out) and again["checkpoint"] == str(out) and again["host"] == "tiny"
    for k in ("mean_kl", "max_kl", "max_machine_mass", "max_abs_logit_diff", "tokens", "compiled_layers"):
        assert again[k] == s[k], k
    assert again["machine"].startswith("regfile:")


def test_cli_kl_errors(tmp_path, capsys):
    from gpu_layers.cli import main

    assert main(["kl", "--host", "tiny", "--machine", "regfile", "--text", str(tmp_path / "missing.txt")]) == 2
    assert "error" in capsys.readouterr().err
    f = tmp_path / "t.txt"
    f.write_text("hello world, some text")
    assert main(["kl", "--host", str(tmp_path / "no_checkpoint"), "--machine", "regfile", "--text", str(f)]) == 2
    assert "error" in capsys.readouterr().err
    assert main(["kl", "--host", "tiny", "--text", str(f), "--machine", "adder9000"]) == 2
    err = capsys.readouterr().err
    assert "unknown machine 'adder9000'" in err and "regfile-prefix" in err
    with pytest.raises(SystemExit):
        main(["kl", "--host", "tiny", "--text", str(f), "--dtype", "float16"])
    assert main(["kl", "--host", "tiny", "--text", str(f)]) == 2
    assert "--checkpoint DIR" in capsys.readouterr().err
    assert main(["kl", "--checkpoint", str(tmp_path), "--text", str(f)]) == 2
    assert "no qwengpu_build.json" in capsys.readouterr().err
    assert main(["kl", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "x"), "--text", str(f)]) == 2
    assert "give one of them" in capsys.readouterr().err


def test_cli_kl_on_a_real_style_checkpoint(tmp_path, capsys, one_torch_thread):
    """The real-host path end to end: a VL-layout checkpoint on disk (bf16 shards, vision and MTP
    weights to skip, the real vocabulary size, the tiny host's layer budgets so the demo fits),
    loaded, spliced, saved and reloaded in bf16, measured."""
    from gpu_layers.cli import main

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    fake_vl_checkpoint(ckpt, tied=True, vocab=248_320, intermediate=512, linear_heads=(8, 32, 64))
    f = tmp_path / "t.txt"
    f.write_text(stdlib_text()[:2000])
    assert main(["kl", "--host", str(ckpt), "--text", str(f), "--machine", "regfile", "--dtype", "bfloat16",
                 "--json", "--max-tokens", "40"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dtype"] == "bfloat16" and out["tokens"] == 40 and out["loaded_class"] == "Qwen3_5ForCausalLM"
    assert out["max_machine_mass"] == 0.0 and out["max_machine_mass_fp32"] == 0.0
    assert out["mean_kl"] < 1e-2  # bf16: the host's rounding noise, no leak
