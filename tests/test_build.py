"""`python -m gpu_layers build`: the spliced checkpoint on disk, loaded with stock
`AutoModelForCausalLM.from_pretrained` (no custom code), its manifest, and the error exits.

The main build is the machine users get: regfile-prefix compiled for Qwen3.5-2B's layer budgets
(the tiny-2b-layers host), in bf16 (the dtype a 2B build ships in; regfile-prefix is exact in bf16).
"""
import json
from pathlib import Path

import pytest
import torch

from gpu_layers.build import MANIFEST, BuildError, check_build, machine_fingerprint
from gpu_layers.cli import main
from splice_fixtures import fake_vl_checkpoint


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A --force build over a previous build's directory (a stub manifest and a stale file)."""
    out = tmp_path_factory.mktemp("build") / "ckpt"
    out.mkdir()
    (out / MANIFEST).write_text("{}")
    (out / "stale.safetensors").write_text("old")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    rc = main(["build", "--host", "tiny-2b-layers", "--machine", "regfile-prefix", "--out", str(out),
               "--dtype", "bfloat16", "--force"])
    torch.set_num_threads(n)
    assert rc == 0
    return out


def test_stock_from_pretrained_loads_the_build(built):
    from transformers import AutoModelForCausalLM

    from gpu_layers.hosts import REAL_2B_TEXT_CONFIG, TINY_2B_LAYERS_CONFIG, LAYER_BUDGET_KEYS

    assert not (built / "stale.safetensors").exists()          # --force replaced the old build
    assert not list(built.parent.glob(".*building*"))          # no temporary left behind
    man = json.loads((built / MANIFEST).read_text())
    info = json.loads((built / "qwengpu_splice.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(str(built)).eval()
    cfg = model.config
    assert type(model).__name__ == "Qwen3_5ForCausalLM" and model.dtype == torch.bfloat16
    n_pre = info["n_prefix_layers"]
    assert man["compiled_layers"] == info["n_compiled_layers"] == 10       # regfile-prefix at the 2B's budgets
    assert cfg.layer_types == ["linear_attention"] * n_pre + TINY_2B_LAYERS_CONFIG["layer_types"]
    assert man["layer_types"] == cfg.layer_types and man["num_hidden_layers"] == cfg.num_hidden_layers
    assert cfg.vocab_size == 248_320 + 2129 == man["first_machine_token_id"] + len(man["token_names"])
    assert man["token_names"] == info["token_names"]
    assert cfg.intermediate_size == 6144 and not cfg.tie_word_embeddings
    assert man["layer_budgets"] == {k: REAL_2B_TEXT_CONFIG[k] for k in LAYER_BUDGET_KEYS}
    assert (man["machine"], man["host"], man["dtype"]) == ("regfile-prefix", "tiny-2b-layers", "bfloat16")
    assert man["format"] == "qwengpu-build/1" and "none saved" in man["tokenizer"]
    # the machine computes in the reloaded checkpoint: two writes and a <sum>, stock greedy generate
    ids = {n: man["first_machine_token_id"] + k for k, n in enumerate(man["token_names"])}
    prog = ["<w l2 r1>", "<b0:ff>", "<b1:ff>", "<b2:00>", "<b3:7f>",
            "<w l2 r2>", "<b0:01>", "<b1:00>", "<b2:00>", "<b3:00>", "<sum l2 r1 r2>"]
    with torch.no_grad():
        out = model.generate(torch.tensor([[ids[t] for t in prog]]), max_new_tokens=5, do_sample=False)
    got = [man["token_names"][int(i) - man["first_machine_token_id"]] for i in out[0, len(prog):]]
    s = 0x7F00FFFF + 1
    assert got == [f"<s{k}:{(s >> (8 * k)) & 0xFF:02x}>" for k in range(4)] + ["<end>"]


def test_the_build_written_in_place_equals_the_spliced_model(built, one_torch_thread):
    """The build writes its tensors straight into the shards (splice.bind_to_files); the same
    splice made in memory has the same parameter names and the same bits, and the sharded,
    mapped files load with stock from_pretrained."""
    from transformers import AutoModelForCausalLM

    from gpu_layers.build import splice_host

    ref = splice_host("tiny-2b-layers", "regfile-prefix", dtype="bfloat16").spliced
    model = AutoModelForCausalLM.from_pretrained(str(built)).eval()
    got, want = model.state_dict(), ref.state_dict()
    assert set(got) == set(want)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_sharded_files_written_in_place(tmp_path):
    """safetensors_files: several shards and an index, zeros where nothing was written, and the
    safetensors reader gets back what the views received."""
    from safetensors.torch import load_file

    from gpu_layers import safetensors_files as sf

    views = sf.create(tmp_path, [("a", (3, 5)), ("b", (7,)), ("c", (2, 2, 2))], torch.bfloat16,
                      max_shard_bytes=40)
    views["a"][1, 2] = 3.5
    views["c"][1] = -1.0
    del views
    sf.sync(tmp_path)
    index = json.loads((tmp_path / sf.INDEX).read_text())
    assert index["weight_map"] == {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
                                   "c": "model-00002-of-00002.safetensors"}
    t = load_file(tmp_path / "model-00001-of-00002.safetensors") | load_file(tmp_path / "model-00002-of-00002.safetensors")
    a = torch.zeros(3, 5, dtype=torch.bfloat16)
    a[1, 2] = 3.5
    assert torch.equal(t["a"], a) and torch.equal(t["b"], torch.zeros(7, dtype=torch.bfloat16))
    assert torch.equal(t["c"], torch.tensor([[[0.0, 0], [0, 0]], [[-1, -1], [-1, -1]]], dtype=torch.bfloat16))


def test_manifest_lets_a_runner_refuse_another_machine(built):
    from gpu_layers.craft.machines import build_machine
    from gpu_layers.craft.testing import LAYERS_2B

    man = check_build(built, "regfile-prefix")              # recompiles: same tokens, same fingerprint
    assert man["machine_fingerprint"] == machine_fingerprint(build_machine("regfile-prefix", LAYERS_2B))
    with pytest.raises(BuildError, match="built for machine 'regfile-prefix', not 'regfile'"):
        check_build(built, "regfile", recompile=False)
    with pytest.raises(BuildError, match="no qwengpu_build.json"):
        check_build(built.parent, "regfile-prefix")


def test_the_stock_engine_refuses_what_is_not_a_core_build_of_todays_sources(built, tmp_path, capsys):
    """run --backend model --checkpoint DIR: a build of another machine, of other core sources, or
    in bf16 is refused by name (exit 2) before anything runs; so is --engine without the model."""
    import shutil

    from gpu_layers.machine.backend import core_key
    from gpu_layers.machine.stock_engine import StockEngineError, check_core_build

    with pytest.raises(StockEngineError, match="built for machine 'regfile-prefix', not 'core'"):
        check_core_build(built)
    fake = tmp_path / "fake"
    fake.mkdir()
    man = json.loads((built / MANIFEST).read_text()) | {"machine": "core", "core_key": "0" * 16}
    (fake / MANIFEST).write_text(json.dumps(man))
    with pytest.raises(StockEngineError, match="other core sources"):
        check_core_build(fake)
    (fake / MANIFEST).write_text(json.dumps(man | {"core_key": core_key()}))
    with pytest.raises(StockEngineError, match="bfloat16 is|float32 only"):
        check_core_build(fake)
    (fake / MANIFEST).write_text(json.dumps(man | {"core_key": core_key(), "dtype": "float32"}))
    assert check_core_build(fake)["machine"] == "core"
    shutil.rmtree(fake)
    case = Path(__file__).resolve().parents[1] / "gpu_layers" / "suite" / "cases.json"
    for engine in ("fast", "stock"):
        assert main(["run", str(case), "--name", "rolling_hash", "--backend", "model", "--engine", engine,
                     "--checkpoint", str(built)]) == 2
        assert "built for machine 'regfile-prefix', not 'core'" in capsys.readouterr().err
    assert main(["run", str(case), "--name", "rolling_hash", "--engine", "stock"]) == 2
    assert "use them with --backend model" in capsys.readouterr().err


def test_build_errors_exit_2(tmp_path, capsys):
    def run(*argv):
        rc = main(["build", *argv])
        return rc, capsys.readouterr().err

    rc, err = run("--host", "tiny", "--machine", "adder9000", "--out", str(tmp_path / "a"))
    assert rc == 2 and "unknown machine 'adder9000'" in err and "regfile-prefix" in err
    rc, err = run("--host", str(tmp_path / "no_checkpoint"), "--machine", "regfile", "--out", str(tmp_path / "a"))
    assert rc == 2 and "no checkpoint directory" in err
    small = tmp_path / "small"
    small.mkdir()
    fake_vl_checkpoint(small)               # 96 MLP neurons, 2 heads of 16: the machine cannot fit
    rc, err = run("--host", str(small), "--machine", "regfile", "--out", str(tmp_path / "a"))
    assert rc == 2 and "does not fit this host's layer budgets" in err
    assert not (tmp_path / "a").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    rc, err = run("--host", "tiny", "--machine", "regfile", "--out", str(busy))
    assert rc == 2 and "not empty" in err and "--force" in err
    rc, err = run("--host", "tiny", "--machine", "regfile", "--out", str(busy), "--force")
    assert rc == 2 and "replaces only a previous qwenGPU build" in err
    assert (busy / "notes.txt").read_text() == "mine"
    rc, err = run("--host", "tiny", "--machine", "regfile", "--out", str(busy / "notes.txt"))
    assert rc == 2 and "is a file" in err
    with pytest.raises(SystemExit):
        main(["build", "--host", "tiny", "--machine", "regfile", "--out", str(tmp_path / "b"), "--dtype", "float16"])


def _byte_tokenizer():
    """A byte-level BPE without merges (256 ids): encodes any text, ids far below the vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def test_build_from_a_release_style_checkpoint_copies_its_tokenizer(tmp_path, capsys, one_torch_thread):
    """A VL-layout checkpoint on disk (bf16 shards under model.language_model., vision and MTP
    weights to skip) with tokenizer files: the build copies them verbatim and names them."""
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    fake_vl_checkpoint(ckpt, tied=True, vocab=248_320, intermediate=512, linear_heads=(8, 32, 64))
    _byte_tokenizer().save_pretrained(str(ckpt))       # a real (byte-level) tokenizer: tokenizer.json, ...
    (ckpt / "chat_template.jinja").write_text("{{ messages }}")
    from gpu_layers.hosts import TOKENIZER_FILES
    files = {f.name: f.read_text() for f in ckpt.iterdir() if f.name in TOKENIZER_FILES}
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= set(files)
    out = tmp_path / "out"
    assert main(["build", "--host", str(ckpt), "--machine", "regfile", "--out", str(out),
                 "--dtype", "bfloat16"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["machine"] == "regfile" and printed["out"] == str(out)
    for name, text in files.items():
        assert (out / name).read_text() == text
    man = json.loads((out / MANIFEST).read_text())
    assert sorted(man["tokenizer"]) == sorted(files) and man["host"] == str(ckpt)
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert model.config.hidden_size == 64 + man["machine_width"]
    assert model.config.vocab_size == 248_320 + man["machine_vocab"]
