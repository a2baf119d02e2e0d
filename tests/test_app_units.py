"""The web app's pieces without a browser: the argument form, a kernel run and its verdicts, every
error a user can cause (as a message, never a stack trace), the Inside view's snapshots and token
alignment, the Results queries, and the limits of a public deployment."""
import importlib
import json
import os

import numpy as np
import pytest

from gpu_layers.errors import QwenGPUError
from gpu_layers.inspect import Cancelled, attach_tokens, record, step_starts
from gpu_layers.interp import Scalar, module_for, run_case
from gpu_layers.machine import lower
from gpu_layers.machine.protocol import trace_tokens
from gpu_layers.suite import load_suite, raw_cases
from webapp import render
from webapp.argspec import ArgSpecError, format_args, parse_args
from webapp.examples import examples, get
from webapp.limits import Limits, current_limits
from webapp.runner import KernelInput, explain, prepare, run_prepared

LOCAL = Limits(public=False, max_buffer_elements=1 << 20, max_threads=1 << 16, step_budget=2_000_000,
               machine_step_budget=200_000, time_budget_s=60)


def example_input(name, **kw):
    e = get(name)
    d = dict(source=e.source, grid=e.grid, block=e.block, dynamic_shared_bytes=e.dynamic_shared_bytes,
             args_text=e.args_text, example=name)
    d.update(kw)
    return KernelInput(**d)


def run(inp, limits=LOCAL):
    return run_prepared(prepare(inp, limits), limits)


def err(inp, limits=LOCAL):
    with pytest.raises(QwenGPUError) as ei:
        run(inp, limits)
    title, lines = explain(ei.value, inp.source)
    return title, "\n".join(lines)


# ----------------------------------------------------------------------------------- the form


def test_argument_text_round_trips_every_suite_case():
    from gpu_layers.cases import parse_case

    for name, c in raw_cases().items():
        again = parse_args(format_args(c["args"]))
        a, b = parse_case(dict(c, args=again), None), parse_case(c, None)
        for x, y in zip(a.args, b.args):
            assert (x.name, x.type, x.output) == (y.name, y.type, y.output), name
            if x.is_buffer:
                assert x.data.tobytes() == y.data.tobytes(), (name, x.name)
            else:
                assert x.value == y.value or (x.value != x.value and y.value != y.value), (name, x.name)


def test_argument_text_grammar_and_errors_name_the_line():
    args = parse_args("n i32 -7  # a comment\nx f32* [1.5, -0.0, nan, inf]\ny u32* fill(3, 0xff) out\n"
                      "z i64* range(2, 8, 3)\nw f64* zeros(2)")
    assert args[0] == {"name": "n", "type": "i32", "value": -7}
    assert args[1]["data"] == [1.5, -0.0, "nan", "inf"]
    assert args[2] == {"name": "y", "type": "u32*", "data": [255] * 3, "output": True}
    assert args[3]["data"] == [2, 5] and args[4]["data"] == [0, 0]
    for text, where in (("a i32* [1, 2", "line 1"), ("a i32 1\nb q32 3", "line 2: unknown type"),
                        ("a i32 1.5", "not an integer"), ("a i32* open('/etc/passwd')", "a buffer is"),
                        ("a i32 __import__('os')", "not a number"), ("a i32 1 out", "only buffers"),
                        ("", "no arguments"), ("a i32* zeros(100)", "more than 10")):
        with pytest.raises(ArgSpecError, match=where.replace("(", r"\(")):
            parse_args(text, max_elements=10)


# ----------------------------------------------------------------------------------- running


def test_example_runs_exact_and_correct_with_tokens():
    rep = run(example_input("isqrt_u32"))
    assert rep.verdict == "exact" and rep.lowered
    assert rep.correct is True, rep.correct_note
    assert rep.tokens > rep.dump_tokens > 0 and rep.machine_steps > rep.steps > 0 and rep.tokens_per_s > 0
    case = [c for c in load_suite() if c.name == "isqrt_u32"][0]
    want = run_case(case).outputs
    for o in rep.outputs:
        assert o.reference.tobytes() == want[o.name].tobytes() == o.machine.tobytes()
    html = render.run_html(rep, LOCAL)
    assert 'data-verdict="exact"' in html and 'data-correct="true"' in html


def test_edited_inputs_still_checked_and_edited_source_is_not():
    e = get("isqrt_u32")
    rep = run(example_input("isqrt_u32", args_text=e.args_text.replace("[0, 1, 2,", "[99, 1, 2,")))
    assert rep.verdict == "exact" and rep.correct is True
    assert rep.outputs[0].reference[0] == 9
    rep = run(example_input("isqrt_u32", source=e.source.replace("bit >>= 2;\n    }", "bit >>= 2;\n    }\n")))
    assert rep.correct is None


def test_an_f64_kernel_runs_on_the_machine_exactly():
    rep = run(example_input("f64_reduce"))           # add/fma/min/max.f64: soft-float sequences
    assert rep.verdict == "exact" and rep.lowered and not rep.lower_problems and rep.correct is True
    for o in rep.outputs:
        assert o.machine.tobytes() == o.reference.tobytes()


def test_a_kernel_the_machine_cannot_run_runs_on_the_reference_only(monkeypatch):
    lowering = importlib.import_module("gpu_layers.machine.lower")
    monkeypatch.setitem(lowering._EXPANSIONS, "dbin", None)     # as if f64 add had no expansion
    rep = run(example_input("f64_reduce"))
    assert rep.verdict == "reference-only" and not rep.lowered and rep.lower_problems
    assert rep.correct is True and all(o.machine is None for o in rep.outputs)
    assert "reference only" in render.run_html(rep, LOCAL)


def test_a_differing_machine_run_is_shown_as_differs():
    rep = run(example_input("isqrt_u32"))
    rep.outputs[0].machine = rep.outputs[0].machine.copy()
    rep.outputs[0].machine[3] ^= 1
    html = render.outputs_html(rep, 64)
    assert 'data-exact="false"' in html and "1 differ" in html and '<tr class="bad">' in html


SRC = 'extern "C" __global__ void k(int* a, int n) {\n    int t = threadIdx.x;\n    BODY\n}\n'


def kernel(body, args="a i32* zeros(32) out\nn i32 32", grid="1"):
    return KernelInput(SRC.replace("BODY", body), grid, "32", 0, args)


def test_errors_are_messages_with_lines_and_names():
    title, text = err(kernel("a[t] = t"))
    assert title.startswith("Compile error") and "kernel.cu(4): error" in text and "line 4 of your source" in text
    title, text = err(KernelInput('extern "C" __global__ void k(float* a) { a[threadIdx.x] = __expf(a[0]); }',
                                  "1", "32", 0, "a f32* zeros(32) out"))
    assert title.startswith("Unsupported") and "ex2.approx.f32" in text
    title, text = err(kernel("a[t + 1000] = t;"))
    assert title == "Out-of-range memory access"
    title, text = err(kernel("while (a[0] == 0) { n++; }"), Limits(public=True, step_budget=5000))
    assert title == "Step budget exceeded" and "5000" in text
    title, text = err(kernel("a[t] = t;", args="a i32* zeros(32) out"))
    assert "takes 2 argument(s)" in text
    title, text = err(kernel("a[t] = t;"), Limits(public=True, max_threads=16))
    assert "at most 16" in text
    title, text = err(kernel("a[t] = t;", grid="1, 0"))
    assert "at least 1" in text
    title, text = err(KernelInput("x" * 70_000, "1", "1", 0, "a i32 1"), Limits(public=True))
    assert "at most 65536" in text
    title, text = err(KernelInput('#include "/etc/passwd"\n', "1", "1", 0, "a i32 1"))
    assert "not allowed" in text and "root:" not in text


def test_time_budget_stops_a_long_run():
    title, text = err(kernel("while (a[0] == 0) { n++; }"), Limits(public=True, step_budget=10**9,
                                                                  time_budget_s=0.5))
    assert title == "Time budget exceeded"


def test_the_case_never_names_a_source_file():
    """The form's kernel reaches the interpreter as inline PTX: no input names a file to read."""
    prep = prepare(example_input("crc32_bytes"), LOCAL)
    assert prep.case.source is None and prep.case.ptx_text


# ----------------------------------------------------------------------------------- inside


def _launch(name):
    c = [c for c in load_suite() if c.name == name][0]
    k = module_for(c.ptx()).kernel(c.kernel)
    args = [a.data.copy() if a.is_buffer else Scalar(a.elem_type, a.value) for a in c.args]
    return c, k, args


def test_snapshots_are_bounded_evenly_spaced_and_keep_the_last_step():
    c, k, args = _launch("bitonic_sort")
    rec = record(k, c.grid, c.block, args, c.dynamic_shared_bytes, max_snapshots=32,
                 buffer_names=[a.name for a in c.args if a.is_buffer])
    assert rec.total_steps == run_case(c).steps and rec.error is None
    steps = [s.step for s in rec.snapshots]
    assert len(steps) <= 33 and steps[-1] == rec.total_steps - 1
    assert all(s % rec.stride == 0 for s in steps[:-1]) and steps == sorted(set(steps))
    last = rec.snapshots[-1]
    out = run_case(c).outputs["out"]
    assert np.frombuffer(last.memory["out"], dtype=np.int32)[:len(out)].tolist() == out[:1024].tolist()


def test_snapshot_registers_and_written_marks():
    c, k, args = _launch("isqrt_u32")
    rec = record(k, c.grid, c.block, args, max_snapshots=1000)
    assert rec.stride == 1
    s = next(s for s in rec.snapshots if "mov.u32" in s.text and "%tid.x" in s.text)
    r = s.written[0]
    assert [s.value(r, l) for l in range(16)] == list(range(16))
    assert rec.snapshots[0].value(r, 0) is None          # not yet written at the first step
    html = render.snapshot_html(rec, rec.snapshots.index(s), "PTX")
    assert "qg-w" in html and f'data-step="{s.step}"' in html


@pytest.mark.parametrize("name", ["crc32_bytes", "flag_chain"])    # one warp; four warps (<w> tokens)
def test_tokens_align_with_machine_code_steps(name):
    c, k, args = _launch(name)
    mk = lower(k)
    rec = record(mk, c.grid, c.block, args, max_snapshots=64)
    tr = trace_tokens(mk, c.grid, c.block, args)
    assert len(step_starts(tr.tokens)) == rec.total_steps
    attach_tokens(rec, tr.tokens)
    for s in rec.snapshots:
        wi = [t for t in s.tokens if t[0] == "wi"]
        assert [t[:3] for t in wi] == [("wi", s.warp, s.pc)]
        if c.block[0] > 32:
            assert [t[:2] for t in s.tokens if t[0] == "w"] == [("w", s.warp)]
    assert rec.tokens_total == len(tr.tokens)


def test_a_fault_keeps_the_snapshots_up_to_it_and_cancel_stops():
    prep = prepare(kernel("if (t == 5) a[t + 1000] = 1; a[t] = t;"), LOCAL)
    from webapp.runner import launch_args

    rec = record(prep.kernel, (1, 1, 1), (32, 1, 1), launch_args(prep.case))
    assert rec.error_type == "OutOfBounds" and rec.snapshots and rec.snapshots[-1].step == rec.total_steps - 1
    prep = prepare(kernel("while (a[0] == 0) { n++; }"), LOCAL)
    rec = record(prep.kernel, (1, 1, 1), (32, 1, 1), launch_args(prep.case), cancel=lambda: True)
    assert rec.error_type == Cancelled.__name__ and rec.total_steps <= 512


# ----------------------------------------------------------------------------------- results


def test_results_rates_over_groups_and_time(tmp_path):
    from agent.record import ResultsDB
    from webapp import results as R

    db = ResultsDB(tmp_path / "r.db")
    rid = db.start_run({"kind": "solve", "model_id": "m1", "prompt_version": "v1", "backend": "interp",
                        "max_attempts": 3})
    for task, first, solved in (("a", 1, 1), ("b", 0, 1), ("c", 0, 0)):
        n_att = 1 if first else (2 if solved else 3)
        for k in range(1, n_att + 1):
            ok = int(solved and k == n_att)
            db.record_attempt({"attempt_uid": f"{task}{k}", "run_id": rid, "task": task, "attempt": k,
                               "max_attempts": 3, "prompt_version": "v1", "model_id": "m1", "backend": "interp",
                               "verdict": "correct" if ok else "wrong", "executed_exactly": 1, "correct": ok,
                               "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:00:01+00:00"})
        db.record_task_result({"run_id": rid, "task": task, "attempts_used": n_att, "max_attempts": 3,
                               "first_try": first, "solved": solved, "solved_at": n_att if solved else None,
                               "last_verdict": "correct" if solved else "wrong"})
    db.close()
    out, att = R.outcomes(tmp_path / "r.db"), R.attempts(tmp_path / "r.db")
    by_model = R.rates(out, att, "model")
    row = by_model.iloc[0]
    assert (row["model"], row["N"], row["task outcomes"], row["attempts"]) == ("m1", 3, 3, 6)
    assert row["first try"] == round(1 / 3, 3) and row["within N"] == round(2 / 3, 3)
    assert row["executed exactly"] == 6 and row["correct"] == 2 and row["exact but wrong"] == 4
    by_task = R.rates(out, att, "task").set_index("task")
    assert by_task.loc["b", "first try"] == 0 and by_task.loc["b", "within N"] == 1
    t = R.over_time(out)
    assert len(t) == 6 and t[t.metric.str.startswith("within")]["rate"].tolist()[-1] == round(2 / 3, 4)
    assert R.outcomes(tmp_path / "missing.db").empty and not (tmp_path / "missing.db").exists()


# ----------------------------------------------------------------------------------- deployment limits


def test_public_limits_and_model_choices(monkeypatch):
    from webapp.advanced import ModelChoiceError, check_model

    monkeypatch.setenv("SPACE_ID", "someone/qwengpu")
    monkeypatch.delenv("QWENGPU_MODEL", raising=False)
    L = current_limits()
    assert L.public and L.step_budget <= 1_000_000 and L.max_threads <= 4096 and L.concurrency >= 1
    assert check_model("tiny", L) == "tiny" and check_model("", L) == "tiny"
    for spec in ("/etc", "../../", "someone/some-model", os.path.expanduser("~")):
        with pytest.raises(ModelChoiceError):
            check_model(spec, L)
    monkeypatch.setenv("QWENGPU_MODEL", "Qwen/Qwen3.5-2B")
    assert check_model("Qwen/Qwen3.5-2B", L) == "Qwen/Qwen3.5-2B"
    monkeypatch.delenv("SPACE_ID")
    monkeypatch.delenv("QWENGPU_PUBLIC", raising=False)
    assert check_model("/some/local/dir", current_limits()) == "/some/local/dir"


def test_examples_cover_the_suite_and_load():
    exs = examples()
    assert set(exs) == set(raw_cases()) and "isqrt_u32" in exs
    e = exs["crc32_bytes"]
    assert "crc32_bytes" in e.source and e.grid == "1, 1, 1" and "out" in e.args_text
    json.dumps([e.args_text for e in exs.values()])


# ----------------------------------------------------------------------------------- advanced mode


def test_solve_records_every_attempt_and_free_text_is_unchecked(tmp_path):
    import sqlite3
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from app_server import ScriptedModel
    from webapp.advanced import FREE_TEXT, SolveView, Stop, register_model, solve

    register_model("scripted-units", ScriptedModel, "test double")
    db = tmp_path / "r.db"
    view = SolveView()
    out = solve("scripted-units", "vec_add", "", 3, LOCAL, view, db_path=db)
    assert out.solved_at == 2 and [a.ev.verdict for a in view.attempts] == ["wrong", "correct"]
    assert view.attempts[0].ev.executed_exactly and not view.attempts[0].ev.correct
    assert "Attempt 2 of 3" in render.solve_html(view) and view.solved
    view = SolveView()
    out = solve("scripted-units", FREE_TEXT, "triple every element of an int array", 2, LOCAL, view, db_path=db)
    assert out.last_verdict == "unchecked" and len(view.attempts) == 1
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT task, attempt, verdict, statement FROM attempts ORDER BY id").fetchall()
        runs = c.execute("SELECT kind, status FROM runs").fetchall()
    assert [r[:3] for r in rows] == [("vec_add", 1, "wrong"), ("vec_add", 2, "correct"), ("adhoc", 1, "unchecked")]
    assert rows[2][3] == "triple every element of an int array" and runs == [("solve", "finished")] * 2
    view = SolveView()
    with pytest.raises(Stop):
        solve("scripted-units", "vec_add", "", 3, LOCAL, view, cancel=lambda: True, db_path=db)
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM attempts").fetchone()[0] == 3
        assert c.execute("SELECT status FROM runs ORDER BY rowid DESC LIMIT 1").fetchone()[0] == "interrupted"
    for bad in (dict(attempts=9), dict(statement="x" * 5000)):
        kw = dict(spec="scripted-units", task_name="vec_add", statement="", attempts=1) | bad
        with pytest.raises(QwenGPUError):
            solve(kw["spec"], kw["task_name"], kw["statement"], kw["attempts"], LOCAL, SolveView(), db_path=db)


def test_the_model_backend_runs_the_kernel_inside_the_model():
    # last_positive_short inside the compiled machine core (compiled on first use, then cached):
    # the outputs decoded from the generated tokens equal the reference interpreter's
    rep = run_prepared(prepare(example_input("last_positive_short"), LOCAL), LOCAL, backend="model")
    assert rep.backend == "model" and rep.verdict == "exact", rep.machine_error
    assert rep.tokens > 500 and rep.prompt_tokens > 0 and all(o.machine is not None for o in rep.outputs)
    html = render.run_html(rep, LOCAL)
    assert "inside the model" in html and "generated" in html


def test_the_model_backend_names_what_the_core_does_not_run():
    # shared_histogram in blocks of 256 threads: the core runs blocks of up to 128
    rep = run_prepared(prepare(example_input("shared_histogram", block="256, 1, 1"), LOCAL), LOCAL, backend="model")
    want = "256 threads per block: the machine core v0 runs up to 128"
    assert rep.verdict == "reference-only" and want in rep.machine_error
    assert want in render.run_html(rep, LOCAL)
