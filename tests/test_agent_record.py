"""results.db: schema versions and migration, WAL, one atomic row per attempt, idempotent writes;
parallel writer processes lose and duplicate nothing; writers killed mid-transaction (and an eval
killed mid-attempt) leave whole rows or none, and the database keeps working."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.record import ATTEMPT_COLUMNS, SCHEMA_VERSION, RecordError, ResultsDB, default_db_path, new_uid

ROOT = Path(__file__).resolve().parents[1]


def attempt_row(run_id, task, attempt, uid=None, text=None):
    uid = uid or new_uid()
    return {"attempt_uid": uid, "run_id": run_id, "task": task, "attempt": attempt, "prompt_version": "v1",
            "model_id": "writer", "backend": "interp", "verdict": "no_code", "reason": "test",
            "generated_text": text if text is not None else f"{uid}:" + "x" * 2000,
            "started_at": "2026-01-01T00:00:00", "finished_at": "2026-01-01T00:00:01"}


def test_fresh_database_schema_and_wal(tmp_path):
    db = ResultsDB(tmp_path / "r.db")
    assert db.schema_version() == SCHEMA_VERSION == 2
    assert db.db.journal_mode == "wal"
    assert {"runs", "attempts", "task_results"} <= set(db.db.table_names())
    cols = set(db.db["attempts"].columns_dict)
    assert set(ATTEMPT_COLUMNS) <= cols
    db.close()


def test_migration_from_version_1_keeps_rows(tmp_path):
    p = tmp_path / "old.db"
    old = ResultsDB(p, migrate_to=1)
    assert old.schema_version() == 1 and "task_results" not in old.db.table_names()
    run = old.start_run({"kind": "eval", "model_id": "m"})
    assert old.record_attempt(attempt_row(run, "vec_add", 1))
    old.close()
    new = ResultsDB(p)
    assert new.schema_version() == 2
    assert new.count("attempts") == 1 and new.query("SELECT run_id FROM runs")[0]["run_id"] == run
    new.record_task_result({"run_id": run, "task": "vec_add", "attempts_used": 1, "max_attempts": 1,
                            "first_try": 0, "solved": 0})
    new.finish_run(run, "finished", {"n_tasks": 1, "first_try_rate": 0.0, "within_n_rate": 0.0})
    assert new.query("SELECT first_try_rate FROM runs")[0]["first_try_rate"] == 0.0
    new.close()


def test_newer_schema_is_refused(tmp_path):
    p = tmp_path / "r.db"
    ResultsDB(p).close()
    c = sqlite3.connect(p)
    c.execute("PRAGMA user_version = 99")
    c.commit()
    c.close()
    with pytest.raises(RecordError, match="newer"):
        ResultsDB(p)


def test_attempt_rows_are_atomic_and_idempotent(tmp_path):
    db = ResultsDB(tmp_path / "r.db")
    run = db.start_run({"kind": "eval", "model_id": "m"})
    row = attempt_row(run, "t", 1)
    assert db.record_attempt(row) is True
    assert db.record_attempt(row) is False                  # the same attempt again: written once
    assert db.count("attempts") == 1
    with pytest.raises(sqlite3.IntegrityError):             # another attempt with the same number
        db.record_attempt(attempt_row(run, "t", 1))
    bad = attempt_row(run, "t", 2)
    del bad["verdict"]                                      # NOT NULL: the whole row is refused
    with pytest.raises(sqlite3.IntegrityError):
        db.record_attempt(bad)
    with pytest.raises(RecordError, match="unknown attempt column"):
        db.record_attempt(dict(attempt_row(run, "t", 3), colour="blue"))
    assert db.count("attempts") == 1
    assert not db.db.conn.in_transaction
    db.close()


def test_location_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("QWENGPU_RESULTS_DB", str(tmp_path / "x" / "y.db"))
    assert default_db_path() == tmp_path / "x" / "y.db"
    db = ResultsDB()
    assert (tmp_path / "x" / "y.db").exists()
    db.close()
    monkeypatch.delenv("QWENGPU_RESULTS_DB")
    assert default_db_path() == Path("results.db")


def test_results_db_is_git_ignored():
    out = subprocess.run(["git", "check-ignore", "-q", "results.db"], cwd=ROOT)
    assert out.returncode == 0


# ------------------------------------------------------------------------------------------ processes
WRITER = r"""
import sys, time, random
sys.path.insert(0, sys.argv[1])
from agent.record import ResultsDB
from tests_helper_rows import attempt_row
path, n, pause, tag, start_at = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], float(sys.argv[6])
time.sleep(max(0.0, start_at - time.time()))      # all writers start together (and race to create the db)

class SlowCommit(ResultsDB):
    def _before_commit(self):          # time spent inside the write transaction: a kill lands there
        if pause:
            time.sleep(pause * random.random())

db = SlowCommit(path)
run = db.start_run({"kind": "eval", "model_id": tag})
print("RUN", run, time.time(), flush=True)
for a in range(1, n + 1):
    row = attempt_row(run, "task-" + tag, a)
    db.record_attempt(row)
    db.record_attempt(row)             # a retry of the same attempt: must not duplicate
    print("OK", row["attempt_uid"], flush=True)
    time.sleep(pause * random.random())   # the rest of an attempt (generation, nvcc, ...) happens here
db.finish_run(run, "finished")
print("DONE", time.time(), flush=True)
"""


def _writer(tmp_path, db_path, n, pause, tag, start_at=0.0):
    helper = tmp_path / "tests_helper_rows.py"
    if not helper.exists():
        helper.write_text(
            "def attempt_row(run_id, task, attempt):\n"
            "    import uuid\n"
            "    uid = uuid.uuid4().hex\n"
            "    return {'attempt_uid': uid, 'run_id': run_id, 'task': task, 'attempt': attempt,\n"
            "            'prompt_version': 'v1', 'model_id': 'writer', 'backend': 'interp', 'verdict': 'no_code',\n"
            "            'reason': 'test', 'generated_text': uid + ':' + 'x' * 2000,\n"
            "            'started_at': '2026-01-01T00:00:00', 'finished_at': '2026-01-01T00:00:01'}\n")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    return subprocess.Popen([sys.executable, "-c", WRITER, str(ROOT), str(db_path), str(n), str(pause), tag,
                             str(start_at)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


def _check_rows_whole(db):
    assert db.query("PRAGMA integrity_check")[0]["integrity_check"] == "ok"
    for r in db.query("SELECT attempt_uid, generated_text, verdict, finished_at FROM attempts"):
        assert r["generated_text"] == r["attempt_uid"] + ":" + "x" * 2000     # no torn row
        assert r["verdict"] and r["finished_at"]
    dup = db.query("SELECT run_id, task, attempt, COUNT(*) AS k FROM attempts GROUP BY 1, 2, 3 HAVING k > 1")
    assert dup == []


def test_parallel_writers_lose_and_duplicate_nothing(tmp_path):
    """Four processes open one brand-new database at the same moment (racing to create and migrate it),
    then each records 60 attempts (each twice), all at once."""
    p, n, k = tmp_path / "r.db", 60, 4
    # a start 10 s away and 1.2 s of writing each: the writers overlap even when a loaded machine
    # (a CI worker next to the in-model tests) takes seconds to start a Python process
    start_at = time.time() + 10.0
    procs = [_writer(tmp_path, p, n, 0.02, f"w{i}", start_at) for i in range(k)]
    outs = [pr.communicate(timeout=180) for pr in procs]
    for pr, (out, err) in zip(procs, outs):
        assert pr.returncode == 0, err
        assert out.splitlines()[-1].startswith("DONE")
    starts = [float(l.split()[2]) for out, _ in outs for l in out.splitlines() if l.startswith("RUN")]
    ends = [float(l.split()[1]) for out, _ in outs for l in out.splitlines() if l.startswith("DONE")]
    assert max(starts) < min(ends), "the writers did not overlap in time"
    db = ResultsDB(p)
    assert db.schema_version() == SCHEMA_VERSION
    assert db.count("attempts") == n * k
    reported = {line.split()[1] for out, _ in outs for line in out.splitlines() if line.startswith("OK")}
    got = {r["attempt_uid"] for r in db.query("SELECT attempt_uid FROM attempts")}
    assert got == reported and len(got) == n * k
    for r in db.query("SELECT run_id, COUNT(*) AS k, MIN(attempt) AS lo, MAX(attempt) AS hi FROM attempts GROUP BY 1"):
        assert (r["k"], r["lo"], r["hi"]) == (n, 1, n)
    assert db.query("SELECT COUNT(*) AS k FROM runs WHERE status = 'finished'")[0]["k"] == k
    _check_rows_whole(db)
    db.close()


def test_writers_killed_mid_transaction_leave_whole_rows(tmp_path):
    """A survivor writes throughout while three writers are killed (SIGKILL) at random moments, mostly
    inside their write transaction. Every reported row is there, at most the one in flight more per
    killed writer, no row is torn, and a new writer works at once."""
    p = tmp_path / "r.db"
    ResultsDB(p).close()
    survivor = _writer(tmp_path, p, 60, 0.02, "survivor")
    killed_reports = []
    import random

    rnd = random.Random(7)
    for i in range(3):
        w = _writer(tmp_path, p, 10_000, 0.05, f"victim{i}")
        lines = []
        want = rnd.randint(3, 12)
        while sum(l.startswith("OK") for l in lines) < want:
            line = w.stdout.readline()
            assert line, w.stderr.read()
            lines.append(line)
        time.sleep(rnd.random() * 0.05)
        w.send_signal(signal.SIGKILL)
        out, _ = w.communicate(timeout=30)
        lines += out.splitlines()
        assert w.returncode == -signal.SIGKILL
        killed_reports.append(({l.split()[1] for l in lines if l.startswith("OK")},
                               next(l.split()[1] for l in lines if l.startswith("RUN"))))
    out, err = survivor.communicate(timeout=180)
    assert survivor.returncode == 0, err
    db = ResultsDB(p)
    _check_rows_whole(db)
    for reported, run in killed_reports:
        got = {r["attempt_uid"] for r in db.query("SELECT attempt_uid FROM attempts WHERE run_id = ?", [run])}
        assert reported <= got and len(got - reported) <= 1
        status = db.query("SELECT status FROM runs WHERE run_id = ?", [run])[0]["status"]
        assert status == "running"                       # killed: never finished, and that is visible
    srun = db.query("SELECT run_id FROM runs WHERE model_id = 'survivor'")[0]["run_id"]
    assert db.query("SELECT COUNT(*) AS k FROM attempts WHERE run_id = ?", [srun])[0]["k"] == 60
    t0 = time.monotonic()
    run = db.start_run({"kind": "eval", "model_id": "after"})
    assert db.record_attempt(attempt_row(run, "t", 1))
    assert time.monotonic() - t0 < 5                     # no stale lock left behind
    db.close()


EVAL_CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from agent.backends import get_backend
from agent.loop import run_eval
from agent.model import ChatModel, Generation
from agent.prompts import load_prompts
from agent.record import ResultsDB
from agent.tasks import get_task

class Double(ChatModel):                       # test double of the model (plumbing test only)
    info = {"model_id": "kill-test", "revision": "t", "fingerprint": "0" * 64, "settings": {}}
    def generate(self, messages, on_text=None):
        attempt = 1 + sum(m["role"] == "assistant" for m in messages)
        if "void sum_atomic(" in messages[1]["content"] and attempt == 2:
            print("GENERATING", flush=True)
            time.sleep(120)                    # killed here, mid-attempt
        return Generation("no code here", 3, 10, 0.01, "eos")

db = ResultsDB(sys.argv[2])
run_eval([get_task("vec_add"), get_task("sum_atomic")], Double(), get_backend(), load_prompts(), db=db,
         max_attempts=3, argv=["kill-test"])
"""


def test_eval_killed_mid_attempt(tmp_path):
    p = tmp_path / "r.db"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", EVAL_CHILD, str(ROOT), str(p)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    line = child.stdout.readline()
    assert line.strip() == "GENERATING", child.stderr.read()
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)
    db = ResultsDB(p)
    got = db.query("SELECT task, attempt, verdict FROM attempts ORDER BY id")
    assert [(r["task"], r["attempt"]) for r in got] == [("vec_add", 1), ("vec_add", 2), ("vec_add", 3),
                                                       ("sum_atomic", 1)]
    assert all(r["verdict"] == "no_code" for r in got)
    assert db.query("SELECT status FROM runs")[0]["status"] == "running"
    tr = db.query("SELECT task, attempts_used FROM task_results")
    assert tr == [{"task": "vec_add", "attempts_used": 3}]
    from agent.cli import report_data

    g = report_data(db)["groups"][0]
    assert g["unfinished"] == 1 and g["task_runs"] == 1 and g["first_try_rate"] == 0.0
    db.close()
