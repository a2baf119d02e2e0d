import inspect
import json
import string
import textwrap

import pytest
import torch

from gpu_layers.hosts import tiny_host, tiny_tokenizer
from gpu_layers.kl import demo_machine, kl_stats
from gpu_layers.splice import splice


def stdlib_text() -> str:
    """Real text: Python standard-library source read from the running interpreter."""
    return inspect.getsource(textwrap) + inspect.getsource(string)


@pytest.fixture(scope="module")
def host():
    return tiny_host()


@pytest.fixture(scope="module")
def ids():
    ids = tiny_tokenizer().encode(stdlib_text())[:2048]
    assert len(ids) >= 2000
    return ids


def test_spliced_tiny_host_talks_like_the_original(host, ids):
    machine, desc = demo_machine(host.config, prefer_compiler=False)  # hand-built: cheap at 2048 tokens
    spliced = splice(host, machine)
    s = kl_stats(host, spliced, ids)
    assert s["positions"] == len(ids) >= 2000
    assert s["mean_kl"] <= 1e-9, s
    assert s["max_machine_mass"] <= 1e-9, s  # max over every position
    assert s["max_kl"] <= 1e-7, s
    assert s["max_abs_logit_diff"] < 1e-2, s


def test_kl_catches_the_leak_without_suppression(host, ids):
    """With the machine rows' flag weight at 0 the machine logits are exactly 0 on text: they take
    probability mass (DESIGN section 5's leak) and the metric must show it."""
    machine, _ = demo_machine(host.config, prefer_compiler=False)
    leaky = splice(host, machine, suppression=0.0)
    s = kl_stats(host, leaky, ids[:256])
    assert s["max_machine_mass"] > 1e-9 and s["max_kl"] > 1e-9  # small here: the tiny host's top logits are ~20
    same = kl_stats(host, host, ids[:64])
    assert same["mean_kl"] == 0.0 and same["max_abs_logit_diff"] == 0.0 and same["max_machine_mass"] == 0.0


def test_compiler_demo_machine_keeps_kl_tiny(host, ids):
    """The layer compiler's demo circuit (7 layers, W=799, 2129 machine tokens) spliced in."""
    machine, desc = demo_machine(host.config)
    assert desc.startswith("compiler demo"), desc
    s = kl_stats(host, splice(host, machine), ids[:256])
    assert s["mean_kl"] <= 1e-9 and s["max_machine_mass"] <= 1e-9, s


def test_cli_kl_json(tmp_path, capsys):
    from gpu_layers.cli import main

    f = tmp_path / "t.txt"
    f.write_text(stdlib_text()[:3000])
    assert main(["kl", "--host", "tiny", "--text", str(f), "--json", "--max-tokens", "48"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("mean_kl", "max_kl", "max_abs_logit_diff", "max_machine_mass", "positions", "machine"):
        assert k in out
    assert out["positions"] == 48 and out["mean_kl"] <= 1e-9
    assert main(["kl", "--host", "tiny", "--text", str(f), "--max-tokens", "16"]) == 0
    assert "mean KL" in capsys.readouterr().out


def test_cli_kl_errors(tmp_path, capsys):
    from gpu_layers.cli import main

    assert main(["kl", "--host", "tiny", "--text", str(tmp_path / "missing.txt")]) == 2
    assert "error" in capsys.readouterr().err
    f = tmp_path / "t.txt"
    f.write_text("hello world, some text")
    assert main(["kl", "--host", str(tmp_path / "no_checkpoint"), "--text", str(f)]) == 2
    assert "error" in capsys.readouterr().err


def test_cli_kl_on_a_real_style_checkpoint(tmp_path, capsys):
    """The real-host path end to end: a VL-layout checkpoint on disk (bf16 shards, vision and MTP
    weights to skip, the real vocabulary size), loaded, spliced in bf16, measured."""
    from gpu_layers.cli import main
    from tests.test_hosts import _fake_vl_checkpoint

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    _fake_vl_checkpoint(ckpt, tied=True, vocab=248_320)
    f = tmp_path / "t.txt"
    f.write_text(stdlib_text()[:2000])
    assert main(["kl", "--host", str(ckpt), "--text", str(f), "--json", "--max-tokens", "40"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dtype"] == "bfloat16" and out["positions"] == 40
    assert out["max_machine_mass"] == 0.0
    assert out["flag_location"] == "leading_layers"  # 96 MLP neurons per layer, the flag needs 2 x 64
