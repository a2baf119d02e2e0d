"""The loop end to end on the tiny random host (the real model class, tokenizer and chat layout):
`eval` over every task completes, logs every attempt with a reason, and reports 0% honestly;
`solve` streams; `report` reads the rates back."""
import json

import pytest

from agent.cli import main
from agent.model import ChatMLRenderer, load_model, Settings
from agent.record import ResultsDB
from agent.tasks import all_tasks
from gpu_layers.hosts import tiny_tokenizer

FAILED = {"no_code", "compile_error", "unsupported", "signature_mismatch", "runtime_error", "wrong"}


def test_eval_on_the_tiny_host_reports_zero_honestly(tmp_path, capsys, one_torch_thread):
    db_path = tmp_path / "results.db"
    rc = main(["eval", "--model", "tiny", "--attempts", "1", "--max-new-tokens", "6", "--db", str(db_path)])
    out = capsys.readouterr().out
    n = len(all_tasks())
    assert rc == 0
    assert f"overall: first try 0/{n} (0.0%), within 1 attempts 0/{n} (0.0%)" in out
    assert out.count(" try 1/1 ") == n                       # a progress line per attempt
    db = ResultsDB(db_path)
    rows = db.query("SELECT * FROM attempts")
    assert len(rows) == n and {r["task"] for r in rows} == {t.name for t in all_tasks()}
    for r in rows:
        assert r["verdict"] in FAILED and r["reason"]          # nonsense fails with a recorded reason
        assert r["correct"] is None and r["model_id"] == "tiny" and r["backend"] == "interp"
        assert r["gen_tokens"] <= 6 and r["generated_text"] is not None
        assert len(r["checkpoint_fingerprint"]) == 64 and r["model_revision"]
        s = json.loads(r["sampling"])
        assert s["do_sample"] is False and s["max_new_tokens"] == 6
        msgs = json.loads(r["prompt_messages"])
        assert msgs[0]["role"] == "system" and "Supported:" in msgs[0]["content"]
    run = db.query("SELECT * FROM runs")[0]
    assert run["status"] == "finished" and run["first_try_rate"] == 0.0 and run["within_n_rate"] == 0.0
    db.close()
    assert main(["report", "--db", str(db_path)]) == 0
    rep = capsys.readouterr().out
    assert "tiny@" in rep and "0.0%" in rep and "interp" in rep


def test_solve_streams_each_attempt(tmp_path, capsys, one_torch_thread):
    rc = main(["solve", "vec_add", "--model", "tiny", "--attempts", "2", "--max-new-tokens", "4",
               "--db", str(tmp_path / "r.db")])
    out = capsys.readouterr().out
    assert rc == 1 and "--- attempt 1/2: the model writes ---" in out and "--- attempt 2/2:" in out
    assert "result: not solved (2 attempt(s)" in out
    db = ResultsDB(tmp_path / "r.db")
    rows = db.query("SELECT attempt, feedback, prompt_messages FROM attempts ORDER BY attempt")
    assert [r["attempt"] for r in rows] == [1, 2]
    # the second attempt saw the first reply and the feedback
    m2 = json.loads(rows[1]["prompt_messages"])
    assert [m["role"] for m in m2] == ["system", "user", "assistant", "user"]
    assert m2[3]["content"] == rows[0]["feedback"]
    db.close()


def test_an_unknown_backend_is_refused_clearly(tmp_path, capsys):
    with pytest.raises(SystemExit) as ei:
        main(["eval", "--backend", "gpu", "--tasks", "vec_add", "--db", str(tmp_path / "r.db")])
    assert ei.value.code == 2 and "invalid choice: 'gpu'" in capsys.readouterr().err


def test_chat_layout_keeps_special_tokens_in_content_as_text():
    tok = tiny_tokenizer()
    r = ChatMLRenderer(tok)
    ids = r.encode([{"role": "user", "content": "hi <|im_end|> there"}])
    assert ids.count(tok.im_end_id) == 1                    # only the one the layout puts there
    assert ids[0] == tok.im_start_id
    text = tok.decode(ids)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # the model has padding rows past the BPE's ids: never a crash, a visible marker
    assert r.decode([14556, 248226, 14556, tok.im_end_id]) == "hello<|unknown:248226|>hello"


def test_generation_is_bounded_and_deterministic(one_torch_thread):
    m = load_model("tiny", Settings(max_new_tokens=5))
    msgs = [{"role": "user", "content": "write a kernel"}]
    a, b = m.generate(msgs), m.generate(msgs)
    assert a.new_tokens <= 5 and a.text == b.text and a.finish_reason in ("eos", "length")
    assert m.info["settings"]["max_new_tokens"] == 5
    assert m.info["settings"]["suppressed_token_ids"].startswith("248077..248319")
    with pytest.raises(ValueError):
        load_model("tiny", Settings(max_new_tokens=10 ** 6))


def test_local_checkpoint_with_its_own_chat_template(tmp_path, one_torch_thread):
    """A checkpoint directory (here: the tiny host saved with stock save_pretrained, and a small HF
    tokenizer with a chat template) loads through the same path as a real one: load_host +
    AutoTokenizer.apply_chat_template (thinking off)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from gpu_layers.hosts import tiny_host

    ckpt = tmp_path / "ckpt"
    tiny_host().save_pretrained(ckpt)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    words = ["system", "user", "assistant", "write", "a", "kernel", "[UNK]"]
    wl = Tokenizer(models.WordLevel({w: i for i, w in enumerate(specials + words)}, unk_token="[UNK]"))
    wl.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=wl, unk_token="[UNK]", eos_token="<|im_end|>",
                                  additional_special_tokens=specials)
    tok.chat_template = ("{% for m in messages %}<|im_start|> {{ m.role }} {{ m.content }} <|im_end|> {% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|> assistant "
                         "{% if not enable_thinking %}<think> </think> {% endif %}{% endif %}")
    tok.save_pretrained(ckpt)
    m = load_model(str(ckpt), Settings(max_new_tokens=3))
    assert m.info["model_id"] == str(ckpt) and m.info["revision"] == "local" and len(m.info["fingerprint"]) == 64
    ids = m.renderer.encode([{"role": "user", "content": "write a kernel"}])
    assert tok.convert_ids_to_tokens(ids)[-2:] == ["<think>", "</think>"]
    g = m.generate([{"role": "user", "content": "write a kernel"}])
    assert g.new_tokens <= 3 and "<|unknown:" not in g.text          # only ids the tokenizer knows
