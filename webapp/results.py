"""The Results tab: first-try and within-N success rates from results.db (written by agent/).

A *task outcome* is one (run, task) pair of `task_results`: whether the task was solved on the
first attempt, and whether within the run's N attempts. Runs of every kind count (`eval` runs of
`python -m agent eval` and the app's one-task `solve` runs); free-form tasks (no checker) have
no outcome. Rates group by task, model, prompt version or backend (always by N as well: within
3 and within 5 are different numbers), and over time as running rates in the order the outcomes
were recorded.

The database is only read here; a missing file is an empty result, never created.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

GROUPS = {"task": "task", "model": "model", "prompt version": "prompts", "backend": "backend"}

OUTCOMES_SQL = """
SELECT tr.run_id AS run_id, tr.task AS task, tr.first_try AS first_try, tr.solved AS solved,
       tr.solved_at AS solved_at, tr.attempts_used AS attempts_used, tr.max_attempts AS n,
       tr.last_verdict AS last_verdict, tr.recorded_at AS recorded_at,
       r.kind AS kind, r.model_id AS model, r.prompt_version AS prompts, r.backend AS backend
FROM task_results tr JOIN runs r ON r.run_id = tr.run_id
ORDER BY tr.recorded_at
"""

ATTEMPTS_SQL = """
SELECT a.id AS id, a.run_id AS run_id, r.kind AS kind, a.task AS task, a.attempt AS attempt,
       a.max_attempts AS max_attempts, a.model_id AS model, a.prompt_version AS prompts, a.backend AS backend,
       a.verdict AS verdict, a.stage AS stage, a.compile_ok AS compile_ok, a.validate_ok AS validate_ok,
       a.executed AS executed, a.executed_exactly AS executed_exactly, a.correct AS correct,
       a.run_steps AS run_steps, a.gen_tokens AS gen_tokens, a.gen_seconds AS gen_seconds,
       a.seconds_total AS seconds_total, a.reason AS reason, a.started_at AS started_at,
       a.finished_at AS finished_at
FROM attempts a JOIN runs r ON r.run_id = a.run_id
ORDER BY a.id
"""


def _read(db_path, sql) -> pd.DataFrame:
    p = Path(db_path)
    if not p.exists():
        return pd.DataFrame()
    conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=30)
    try:
        conn.execute("PRAGMA busy_timeout = 30000")
        return pd.read_sql_query(sql, conn)
    except (sqlite3.OperationalError, pd.errors.DatabaseError) as e:
        if "no such table" in str(e):
            return pd.DataFrame()
        raise
    finally:
        conn.close()


def outcomes(db_path) -> pd.DataFrame:
    return _read(db_path, OUTCOMES_SQL)


def attempts(db_path) -> pd.DataFrame:
    return _read(db_path, ATTEMPTS_SQL)


def rates(out: pd.DataFrame, att: pd.DataFrame, by: str) -> pd.DataFrame:
    """One row per group (and N): outcomes, first-try rate, within-N rate, attempts and how many of
    them executed exactly / were correct / were exact but wrong."""
    col = GROUPS[by]
    cols = [by, "N", "task outcomes", "first try", "within N", "attempts", "executed exactly", "correct",
            "exact but wrong"]
    if out.empty:
        return pd.DataFrame(columns=cols)
    g = out.groupby([col, "n"], dropna=False)
    df = g.agg(outcomes=("task", "size"), first=("first_try", "mean"), within=("solved", "mean")).reset_index()
    if not att.empty:
        a = att[att["run_id"].isin(set(out["run_id"]))].copy()
        a["n"] = a["max_attempts"]
        a["exact"] = a["executed_exactly"].fillna(0).astype(int)
        a["ok"] = a["correct"].fillna(0).astype(int)
        a["exact_wrong"] = ((a["exact"] == 1) & (a["ok"] == 0)).astype(int)
        ag = a.groupby([col, "n"], dropna=False).agg(attempts=("id", "size"), exact=("exact", "sum"),
                                                     ok=("ok", "sum"), exact_wrong=("exact_wrong", "sum")).reset_index()
        df = df.merge(ag, on=[col, "n"], how="left")
    else:
        df["attempts"] = df["exact"] = df["ok"] = df["exact_wrong"] = 0
    df = df.fillna({"attempts": 0, "exact": 0, "ok": 0, "exact_wrong": 0})
    df = df.rename(columns={col: by, "n": "N", "outcomes": "task outcomes", "first": "first try",
                            "within": "within N", "exact": "executed exactly", "ok": "correct",
                            "exact_wrong": "exact but wrong"})
    for c in ("attempts", "executed exactly", "correct", "exact but wrong"):
        df[c] = df[c].astype(int)
    df["first try"] = df["first try"].round(3)
    df["within N"] = df["within N"].round(3)
    return df[cols]


def over_time(out: pd.DataFrame) -> pd.DataFrame:
    """Running first-try and within-N rates, one point per recorded outcome (long format)."""
    if out.empty:     # typed columns even when empty: the plot takes each axis' kind from them
        return pd.DataFrame({"time": pd.Series([], dtype="datetime64[ns, UTC]"),
                             "rate": pd.Series([], dtype=float), "metric": pd.Series([], dtype=str)})
    o = out.sort_values("recorded_at").reset_index(drop=True)
    t = pd.to_datetime(o["recorded_at"], utc=True, format="ISO8601")
    k = pd.Series(range(1, len(o) + 1))
    first = o["first_try"].cumsum() / k
    within = o["solved"].cumsum() / k
    return pd.concat([pd.DataFrame({"time": t, "rate": first.round(4), "metric": "first try (running)"}),
                      pd.DataFrame({"time": t, "rate": within.round(4), "metric": "within N (running)"})],
                     ignore_index=True)


def bars(table: pd.DataFrame, by: str, metric: str) -> pd.DataFrame:
    """The rate per group for a bar plot (group label includes N when several N are present)."""
    if table.empty:
        return pd.DataFrame({by: pd.Series([], dtype=str), metric: pd.Series([], dtype=float)})
    several = table["N"].nunique() > 1
    label = table[by].astype(str) + (" (N=" + table["N"].astype(str) + ")" if several else "")
    return pd.DataFrame({by: label, metric: table[metric]})


def summary_line(out: pd.DataFrame, att: pd.DataFrame) -> str:
    if out.empty:
        return ("No task outcomes yet: solve one of the agent's tasks in Advanced mode (or run "
                "`python -m agent eval`), and the rates appear here.")
    n = len(out)
    return (f"{n} task outcome(s) from {out['run_id'].nunique()} run(s), {len(att)} attempt(s): first try "
            f"{out['first_try'].mean():.0%}, within N {out['solved'].mean():.0%}.")
