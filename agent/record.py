"""results.db: every attempt, one row, written in one transaction when the attempt ends.

    db = ResultsDB(path)                  # opens (creates, migrates) the database, WAL mode
    run_id = db.start_run({...})          # a row in `runs` (status "running")
    db.record_attempt({...})              # one row in `attempts`, atomically, idempotent per attempt_uid
    db.record_task_result({...})          # the eval's per-task outcome (first try, within N)
    db.finish_run(run_id, "finished", summary)

Location: the `--db` option, else $QWENGPU_RESULTS_DB, else ./results.db (git-ignored: *.db).

Concurrency and crashes. The database is in WAL mode with a busy timeout, and every write is one
`BEGIN IMMEDIATE ... COMMIT` transaction (the write lock is taken up front, so a writer waits its
turn instead of failing half way), retried with backoff while another process holds the lock. A
process killed at any point leaves either its whole row or nothing (SQLite's atomic commit). Each
attempt carries a random `attempt_uid` (UNIQUE): recording the same attempt twice (a retry after an
ambiguous failure) writes it once; `(run_id, task, attempt)` is UNIQUE as well. A killed run keeps
status "running" (its finished attempts are all there); `report` counts such runs as unfinished.

Schema versions (PRAGMA user_version), applied in order under the write lock, so two processes
that open an old database at once migrate it exactly once:
  1. runs, attempts
  2. task_results (an eval's per-task outcome) and the run summary columns
A database newer than this code is refused with a clear message.
"""
from __future__ import annotations

import json
import os
import random
import socket
import sqlite3
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import sqlite_utils

DEFAULT_DB = "results.db"
BUSY_TIMEOUT_S = 30.0
RETRY_FOR_S = 300.0
MAX_TEXT_CHARS = 256 * 1024          # per text column (generated text, code, JSON blobs)


class RecordError(Exception):
    pass


def default_db_path() -> Path:
    return Path(os.environ.get("QWENGPU_RESULTS_DB") or DEFAULT_DB)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def new_uid() -> str:
    return uuid.uuid4().hex


# --------------------------------------------------------------------------------------------- schema
ATTEMPT_COLUMNS = {
    # identity
    "attempt_uid": "TEXT NOT NULL UNIQUE",
    "run_id": "TEXT NOT NULL REFERENCES runs(run_id)",
    "task": "TEXT NOT NULL",
    "task_fingerprint": "TEXT",
    "statement": "TEXT",
    "attempt": "INTEGER NOT NULL CHECK (attempt >= 1)",
    "max_attempts": "INTEGER",
    # what produced it
    "prompt_version": "TEXT NOT NULL",
    "prompt_sha256": "TEXT",
    "model_id": "TEXT NOT NULL",
    "model_revision": "TEXT",
    "checkpoint_fingerprint": "TEXT",
    "backend": "TEXT NOT NULL",
    "sampling": "TEXT",                  # JSON: temperature, top_p, seed, max_new_tokens, dtype, ...
    "prompt_messages": "TEXT",           # JSON: the chat messages this attempt was generated from
    # generation
    "generated_text": "TEXT",
    "gen_tokens": "INTEGER",
    "prompt_tokens": "INTEGER",
    "gen_seconds": "REAL",
    "gen_tokens_per_s": "REAL",
    "finish_reason": "TEXT",             # eos | length
    # extraction, nvcc, validator
    "extracted_code": "TEXT",
    "extract_note": "TEXT",
    "ptx_sha256": "TEXT",
    "compile_ok": "INTEGER",
    "compile_messages": "TEXT",          # JSON list
    "compile_seconds": "REAL",
    "validate_ok": "INTEGER",
    "validate_problems": "TEXT",         # JSON list
    "validate_seconds": "REAL",
    "warnings": "TEXT",                  # JSON list (fusion warnings)
    # run
    "entry": "TEXT",
    "run_ok": "INTEGER",
    "run_error": "TEXT",
    "run_results": "TEXT",               # JSON: per input set steps, fingerprint, outputs (bounded), mismatches
    "run_steps": "INTEGER",              # trace length (warp-instruction steps, all input sets)
    "run_seconds": "REAL",
    "run_tokens": "INTEGER",             # machine tokens (model backend; NULL on the interpreter)
    "run_tokens_per_s": "REAL",
    # verdicts: executed exactly is not correct
    "executed": "INTEGER",               # ran to completion on every input set
    "executed_exactly": "INTEGER",       # ... and every run equals the reference machine's
    "correct": "INTEGER",                # the checker accepted every input set
    "verdict": "TEXT NOT NULL",
    "stage": "TEXT",
    "reason": "TEXT",
    "first_mismatch": "TEXT",            # JSON
    "inputs_passed": "INTEGER",
    "inputs_total": "INTEGER",
    "check_seconds": "REAL",
    "feedback": "TEXT",                  # what the model was told next (NULL when it stopped)
    # timings
    "started_at": "TEXT NOT NULL",
    "finished_at": "TEXT NOT NULL",
    "seconds_total": "REAL",
    "host": "TEXT",
    "pid": "INTEGER",
}


def _m1(db: sqlite_utils.Database):
    db.execute("""CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        model_id TEXT,
        model_revision TEXT,
        checkpoint_fingerprint TEXT,
        backend TEXT,
        prompt_version TEXT,
        prompt_sha256 TEXT,
        sampling TEXT,
        max_attempts INTEGER,
        tasks TEXT,
        argv TEXT,
        code_version TEXT,
        host TEXT,
        pid INTEGER)""")
    cols = ",\n        ".join(f"{k} {v}" for k, v in ATTEMPT_COLUMNS.items())
    db.execute(f"""CREATE TABLE attempts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        {cols},
        UNIQUE (run_id, task, attempt))""")
    db.execute("CREATE INDEX attempts_by_group ON attempts(model_id, prompt_version, backend)")
    db.execute("CREATE INDEX attempts_by_run ON attempts(run_id, task)")


def _m2(db: sqlite_utils.Database):
    db.execute("""CREATE TABLE task_results (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        task TEXT NOT NULL,
        attempts_used INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        first_try INTEGER NOT NULL,
        solved INTEGER NOT NULL,
        solved_at INTEGER,
        last_verdict TEXT,
        recorded_at TEXT NOT NULL,
        PRIMARY KEY (run_id, task))""")
    for col, typ in (("n_tasks", "INTEGER"), ("first_try_rate", "REAL"), ("within_n_rate", "REAL"),
                     ("summary", "TEXT")):
        db.execute(f"ALTER TABLE runs ADD COLUMN {col} {typ}")


MIGRATIONS = [_m1, _m2]
SCHEMA_VERSION = len(MIGRATIONS)


def _connect(path: Path) -> sqlite_utils.Database:
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S)
    db = sqlite_utils.Database(conn)
    db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    return db


def _retrying(fn, what: str):
    """Run fn() (one transaction); retry while the database is locked by another process."""
    deadline = time.monotonic() + RETRY_FOR_S
    delay = 0.01
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as e:
            msg = str(e).lower()
            if ("locked" not in msg and "busy" not in msg) or time.monotonic() > deadline:
                raise RecordError(f"results.db: {what} failed: {e}") from e
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)


class ResultsDB:
    def __init__(self, path: str | Path | None = None, *, migrate_to: int | None = None):
        self.path = Path(path) if path is not None else default_db_path()
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = _connect(self.path)
        self._retry_autocommit(lambda: self.db.enable_wal(), "enabling WAL")
        self.migrate(SCHEMA_VERSION if migrate_to is None else migrate_to)

    def close(self):
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ transactions
    def _retry_autocommit(self, fn, what):
        return _retrying(fn, what)

    def _tx(self, fn, what: str):
        """fn(db) inside BEGIN IMMEDIATE ... COMMIT, retried while locked; rolled back on any error."""
        def once():
            conn = self.db.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(self.db)
                self._before_commit()
                conn.execute("COMMIT")
                return out
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return _retrying(once, what)

    def _before_commit(self):
        """Hook for tests (a pause inside the transaction, to kill a writer there)."""

    # ------------------------------------------------------------------ schema
    def schema_version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

    def migrate(self, target: int = SCHEMA_VERSION):
        def step(db):
            v = db.execute("PRAGMA user_version").fetchone()[0]
            if v > SCHEMA_VERSION:
                raise RecordError(f"{self.path} has schema version {v}, newer than this qwenGPU knows "
                                  f"({SCHEMA_VERSION}); update qwenGPU or use another --db")
            for i in range(v, target):
                MIGRATIONS[i](db)
                db.execute(f"PRAGMA user_version = {i + 1}")
            return v
        if self.schema_version() >= target:
            if self.schema_version() > SCHEMA_VERSION:
                raise RecordError(f"{self.path} has schema version {self.schema_version()}, newer than this "
                                  f"qwenGPU knows ({SCHEMA_VERSION}); update qwenGPU or use another --db")
            return
        self._tx(step, "migrating the schema")

    # ------------------------------------------------------------------ writes
    def start_run(self, meta: dict) -> str:
        row = {"run_id": meta.get("run_id") or new_uid(), "kind": meta["kind"], "status": "running",
               "started_at": now_iso(), "host": socket.gethostname(), "pid": os.getpid()}
        for k in ("model_id", "model_revision", "checkpoint_fingerprint", "backend", "prompt_version",
                  "prompt_sha256", "max_attempts", "code_version"):
            row[k] = meta.get(k)
        for k in ("sampling", "tasks", "argv"):
            row[k] = _json(meta.get(k))
        self._tx(lambda db: db["runs"].insert(row), "starting a run")
        return row["run_id"]

    def record_attempt(self, row: dict) -> bool:
        """Insert one attempt (all columns at once). False if this attempt_uid is already recorded."""
        unknown = set(row) - set(ATTEMPT_COLUMNS)
        if unknown:
            raise RecordError(f"unknown attempt column(s) {sorted(unknown)}")
        clean = {k: _bounded(v) for k, v in row.items()}
        clean.setdefault("host", socket.gethostname())
        clean.setdefault("pid", os.getpid())

        def write(db):
            if db["attempts"].count_where("attempt_uid = ?", [clean["attempt_uid"]]):
                return False
            db["attempts"].insert(clean)
            return True
        return self._tx(write, f"recording attempt {row.get('task')}#{row.get('attempt')}")

    def record_task_result(self, row: dict):
        row = dict(row, recorded_at=now_iso())
        self._tx(lambda db: db["task_results"].upsert(row, pk=("run_id", "task")), "recording a task result")

    def finish_run(self, run_id: str, status: str, summary: dict | None = None):
        upd = {"status": status, "finished_at": now_iso()}
        if summary:
            upd.update({"n_tasks": summary.get("n_tasks"), "first_try_rate": summary.get("first_try_rate"),
                        "within_n_rate": summary.get("within_n_rate"), "summary": _json(summary)})
        self._tx(lambda db: db["runs"].update(run_id, upd), "finishing a run")

    # ------------------------------------------------------------------ reads
    def query(self, sql: str, params=()) -> list:
        return list(self.db.query(sql, params))

    def count(self, table: str) -> int:
        return self.db[table].count


def _json(v):
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, default=str)


def _bounded(v):
    if isinstance(v, (list, dict, tuple)):
        v = json.dumps(v, default=str)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, str) and len(v) > MAX_TEXT_CHARS:
        return v[:MAX_TEXT_CHARS] + f"\n... (truncated: {len(v)} characters)"
    return v
