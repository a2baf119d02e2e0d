"""`python -m agent ...`: solve one task, evaluate the suite, report the rates.

    python -m agent solve "count the primes below n in parallel" [--task count_primes] [--model ...]
    python -m agent eval [--tasks all|NAME,NAME|kind:warp|level:3] [--attempts N] [--model ...]
    python -m agent report [--by-task] [--json]
    python -m agent tasks

--model: "tiny" (the built-in tiny random host: offline, writes nonsense; the default unless
$QWENGPU_MODEL names real weights), a local checkpoint directory, or a hub id (Qwen/Qwen3.5-2B).
--backend: auto (the compiled model when it exists, else the interpreter), interp, model.
--db: the results database (default $QWENGPU_RESULTS_DB, else ./results.db).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time

from gpu_layers.errors import QwenGPUError


def _say(*a, **k):
    print(*a, **k, flush=True)


# --------------------------------------------------------------------------------------------- printing
class PrintReporter:
    """Eval: one progress line per attempt. Solve (stream=True): the reply as it is written, then the verdict."""

    def __init__(self, stream: bool = False, verbose: bool = False):
        self.stream, self.verbose = stream, verbose
        self.t0 = time.perf_counter()
        self.index = self.total = 0

    def task_start(self, task, index, total):
        self.index, self.total = index, total
        if self.stream:
            _say(f"\n=== task {task.name} ({index + 1}/{total}): {task.title}")

    def attempt_start(self, name, attempt, n):
        if self.stream:
            _say(f"\n--- attempt {attempt}/{n}: the model writes ---")

    def text(self, piece):
        sys.stdout.write(piece)
        sys.stdout.flush()

    def attempt_done(self, name, attempt, n, ev, gen, seconds):
        if self.stream:
            _say(f"\n--- attempt {attempt}/{n}: {ev.verdict} ---")
            _say(f"    {gen.new_tokens} tokens in {gen.seconds:.1f} s ({gen.finish_reason}); "
                 f"attempt {seconds:.1f} s in all")
            _say(f"    {ev.reason}")
            if ev.executed:
                _say(f"    executed exactly: {'yes' if ev.executed_exactly else 'no'} ({ev.run_steps} steps on "
                     f"{ev.inputs_total} input sets); correct: {'yes' if ev.correct else 'no'}")
            return
        done = f"[{self.index + 1:>2}/{self.total}]" if self.total else ""
        _say(f"{done} {name:<18} try {attempt}/{n}  {ev.verdict:<18} {seconds:6.1f} s  "
             f"({time.perf_counter() - self.t0:5.0f} s)  {_clip(ev.reason, 90)}")

    def task_done(self, outcome):
        pass


def _clip(s, n):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def _pct(x):
    return "   -" if x is None else f"{100 * x:5.1f}%"


# --------------------------------------------------------------------------------------------- shared setup
def _add_model_args(p, *, attempts_default):
    p.add_argument("--model", default=None, help="'tiny', a checkpoint directory or a hub id (default: "
                                                 "$QWENGPU_MODEL, else tiny)")
    p.add_argument("--backend", default="auto", choices=["auto", "interp", "model"])
    p.add_argument("--attempts", type=int, default=attempts_default, help="attempts per task (N)")
    p.add_argument("--db", default=None, help="results database (default $QWENGPU_RESULTS_DB or ./results.db)")
    p.add_argument("--prompts", default=None, help="prompt version under prompts/ (default: the current one)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="cap on every reply (default 64 on the tiny host, 1024 otherwise)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy")
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--thinking", action="store_true", help="let the model think first (Qwen3.5 thinking mode)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, mps")
    p.add_argument("--dtype", default="auto", help="auto (bfloat16 on cuda, else float32), float32, bfloat16")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")


def _setup(args):
    from agent.backends import get_backend
    from agent.model import DEFAULT_MAX_NEW_TOKENS, TINY_MAX_NEW_TOKENS, Settings, default_model_spec, load_model
    from agent.prompts import load_prompts
    from agent.record import ResultsDB

    if args.attempts < 1:
        raise SystemExit("error: --attempts must be >= 1")
    backend = get_backend(args.backend)          # fails fast on an unknown backend
    prompts = load_prompts(args.prompts)
    db = ResultsDB(args.db)
    spec = args.model or default_model_spec()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    mnt = args.max_new_tokens or (TINY_MAX_NEW_TOKENS if spec == "tiny" else DEFAULT_MAX_NEW_TOKENS)
    settings = Settings(max_new_tokens=mnt, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                        seed=args.seed, enable_thinking=args.thinking, dtype=args.dtype, device=args.device)
    _say(f"loading model {spec!r} ...")
    t0 = time.perf_counter()
    model = load_model(spec, settings)
    info = model.info
    _say(f"model {info['model_id']} (revision {info['revision']}, weights sha256 {info['fingerprint'][:12]}) loaded "
         f"in {time.perf_counter() - t0:.1f} s on {settings.device} ({settings.dtype}); "
         f"{'greedy' if settings.temperature <= 0 else f'sampling at T={settings.temperature}'}, "
         f"max {settings.max_new_tokens} new tokens; backend {backend.name}; prompts {prompts.version} "
         f"({prompts.sha256[:12]}); results in {db.path}")
    if spec == "tiny":
        _say("note: the tiny host is a random model; it writes nonsense, and every attempt fails (recorded with "
             "its reason). Use --model Qwen/Qwen3.5-2B (or a local checkpoint) for real results.")
    return model, backend, prompts, db


# --------------------------------------------------------------------------------------------- solve
def _similar_tasks(text: str, k: int = 3) -> list:
    from agent.tasks import all_tasks

    words = set(re.findall(r"[a-z]{3,}", text.lower()))
    scored = []
    for t in all_tasks():
        tw = set(re.findall(r"[a-z]{3,}", (t.name.replace("_", " ") + " " + t.title + " " + t.statement).lower()))
        s = len(words & tw)
        if s:
            scored.append((s, t.name))
    return [n for _, n in sorted(scored, key=lambda x: -x[0])[:k]]


def cmd_solve(args) -> int:
    from agent.loop import run_meta, solve_task
    from agent.tasks import get_task, task_names

    text = args.text.strip()
    task, statement = None, None
    if args.task:
        task = get_task(args.task)
        if text and text != task.name:
            task = dataclasses.replace(task, statement=text)
    elif text in task_names():
        task = get_task(text)
    else:
        statement = text
    model, backend, prompts, db = _setup(args)
    if task is None:
        hint = _similar_tasks(text)
        _say("free-form task: the kernel is compiled and validated, but there are no inputs or checker, so it is "
             "not run." + (f" To check it, name a suite task with --task (closest: {', '.join(hint)})." if hint else ""))
    else:
        _say(f"task {task.name}: {task.statement}\nsignature: {task.signature()}\nlaunch: {task.launch}")
    name = task.name if task else "adhoc"
    run_id = db.start_run(run_meta("solve", model, backend, prompts, args.attempts, [name]))
    rep = PrintReporter(stream=not args.no_stream)
    try:
        outcome = solve_task(task, model, backend, prompts, db=db, run_id=run_id, max_attempts=args.attempts,
                             statement=statement, reporter=rep, stream=not args.no_stream)
    except BaseException as e:
        db.finish_run(run_id, "interrupted" if isinstance(e, KeyboardInterrupt) else "failed")
        raise
    db.finish_run(run_id, "finished", {"n_tasks": 1, "first_try_rate": float(outcome.first_try),
                                       "within_n_rate": float(outcome.solved)})
    v = outcome.last_verdict
    if task is None:
        _say(f"\nresult: {v} after {len(outcome.attempts)} attempt(s) (run {run_id})")
        return 0 if v == "unchecked" else 1
    _say(f"\nresult: {'solved on attempt ' + str(outcome.solved_at) if outcome.solved else 'not solved'} "
         f"({len(outcome.attempts)} attempt(s); run {run_id})")
    return 0 if outcome.solved else 1


# --------------------------------------------------------------------------------------------- eval
def cmd_eval(args) -> int:
    from agent.loop import run_eval
    from agent.tasks import select_tasks

    try:
        tasks = select_tasks(args.tasks)
    except KeyError as e:
        raise SystemExit(f"error: {e.args[0]}")
    model, backend, prompts, db = _setup(args)
    _say(f"eval: {len(tasks)} tasks, up to {args.attempts} attempt(s) each")
    t0 = time.perf_counter()
    run_id, summary = run_eval(tasks, model, backend, prompts, db=db, max_attempts=args.attempts,
                               reporter=PrintReporter(stream=args.stream), stream=args.stream)
    dt = time.perf_counter() - t0
    print_eval_summary(tasks, summary, run_id, dt)
    return 0


def print_eval_summary(tasks, summary, run_id, seconds):
    n = summary["max_attempts"]
    _say(f"\n{'task':<18} {'level':>5}  {'first try':>9}  {'within ' + str(n):>9}  last verdict")
    for t in tasks:
        r = summary["per_task"].get(t.name)
        if r is None:
            continue
        _say(f"{t.name:<18} {t.level:>5}  {'yes' if r['first_try'] else 'no':>9}  "
             f"{('yes (' + str(r['solved_at']) + ')') if r['solved_at'] else 'no':>9}  {r['last_verdict']}")
    _say(f"\noverall: first try {summary['first_try']}/{summary['n_tasks']} ({_pct(summary['first_try_rate']).strip()}), "
         f"within {n} attempts {summary['within_n']}/{summary['n_tasks']} ({_pct(summary['within_n_rate']).strip()}); "
         f"{summary['attempts']} attempts in {seconds:.0f} s")
    _say("verdicts of all attempts: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["verdicts"].items())))
    _say(f"stored as run {run_id}")


# --------------------------------------------------------------------------------------------- report
REPORT_SQL = """
SELECT r.model_id AS model, r.model_revision AS revision, r.prompt_version AS prompts, r.backend AS backend,
       r.max_attempts AS n, COUNT(DISTINCT r.run_id) AS runs,
       COUNT(DISTINCT CASE WHEN r.status != 'finished' THEN r.run_id END) AS unfinished,
       COUNT(*) AS task_runs, AVG(tr.first_try) AS first_try_rate, AVG(tr.solved) AS within_n_rate
FROM task_results tr JOIN runs r ON r.run_id = tr.run_id
WHERE r.kind = 'eval'
GROUP BY r.model_id, r.model_revision, r.prompt_version, r.backend, r.max_attempts
ORDER BY r.model_id, r.prompt_version, r.backend, r.max_attempts
"""

ATTEMPTS_SQL = """
SELECT a.model_id AS model, a.model_revision AS revision, a.prompt_version AS prompts, a.backend AS backend,
       r.max_attempts AS n, COUNT(*) AS attempts,
       SUM(a.executed_exactly = 1) AS executed_exactly, SUM(a.correct = 1) AS correct,
       SUM(a.executed_exactly = 1 AND a.correct = 0) AS exact_but_wrong,
       AVG(a.gen_tokens_per_s) AS gen_tokens_per_s
FROM attempts a JOIN runs r ON r.run_id = a.run_id
WHERE r.kind = 'eval'
GROUP BY a.model_id, a.model_revision, a.prompt_version, a.backend, r.max_attempts
"""

VERDICTS_SQL = """
SELECT a.model_id AS model, a.prompt_version AS prompts, a.backend AS backend, a.verdict AS verdict, COUNT(*) AS k
FROM attempts a JOIN runs r ON r.run_id = a.run_id WHERE r.kind = 'eval'
GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 5 DESC
"""

BY_TASK_SQL = """
SELECT r.model_id AS model, r.prompt_version AS prompts, r.backend AS backend, tr.task AS task,
       COUNT(*) AS runs, AVG(tr.first_try) AS first_try_rate, AVG(tr.solved) AS within_n_rate,
       MAX(r.max_attempts) AS n
FROM task_results tr JOIN runs r ON r.run_id = tr.run_id WHERE r.kind = 'eval'
GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
"""


def report_data(db) -> dict:
    groups = db.query(REPORT_SQL)
    att = {(a["model"], a["revision"], a["prompts"], a["backend"], a["n"]): a for a in db.query(ATTEMPTS_SQL)}
    verdicts: dict = {}
    for v in db.query(VERDICTS_SQL):
        verdicts.setdefault((v["model"], v["prompts"], v["backend"]), {})[v["verdict"]] = v["k"]
    for g in groups:
        a = att.get((g["model"], g["revision"], g["prompts"], g["backend"], g["n"]), {})
        g.update({k: a.get(k) for k in ("attempts", "executed_exactly", "correct", "exact_but_wrong",
                                        "gen_tokens_per_s")})
        g["verdicts"] = verdicts.get((g["model"], g["prompts"], g["backend"]), {})
    return {"groups": groups, "by_task": db.query(BY_TASK_SQL)}


def cmd_report(args) -> int:
    from agent.record import ResultsDB, default_db_path

    path = args.db or default_db_path()
    from pathlib import Path

    if not Path(path).exists():
        _say(f"no results database at {path} (run `python -m agent eval` first, or pass --db)")
        return 1
    db = ResultsDB(path)
    data = report_data(db)
    if args.json:
        print(json.dumps(data, indent=1, default=str))
        return 0
    if not data["groups"]:
        _say(f"{path}: no eval results yet")
        return 0
    _say(f"{path}: success rates of `eval` runs, by model, prompt version and backend")
    _say(f"{'model':<26} {'prompts':<8} {'backend':<7} {'N':>2} {'runs':>5} {'tasks':>6} {'first try':>9} "
         f"{'within N':>9} {'attempts':>8} {'exact':>6} {'correct':>7} {'tok/s':>6}")
    for g in data["groups"]:
        model = f"{g['model']}@{(g['revision'] or '?')[:10]}"
        runs = f"{g['runs']}" + (f"({g['unfinished']}u)" if g["unfinished"] else "")
        tps = "-" if g["gen_tokens_per_s"] is None else f"{g['gen_tokens_per_s']:.1f}"
        _say(f"{model:<26} {g['prompts']:<8} {g['backend']:<7} {g['n']:>2} {runs:>5} {g['task_runs']:>6} "
             f"{_pct(g['first_try_rate']):>9} {_pct(g['within_n_rate']):>9} {g['attempts'] or 0:>8} "
             f"{g['executed_exactly'] or 0:>6} {g['correct'] or 0:>7} {tps:>6}")
        _say(f"{'':<26} verdicts: " + ", ".join(f"{k} {v}" for k, v in g["verdicts"].items()))
    _say("first try / within N: share of (run, task) pairs solved on the first attempt / within N attempts; "
         "exact: attempts whose every run completed exactly; correct: attempts the checker accepted "
         "(exact but wrong: " + ", ".join(str(g["exact_but_wrong"] or 0) for g in data["groups"]) + "); "
         "(Ku): K runs unfinished (killed or interrupted; their finished tasks count)")
    if args.by_task:
        _say(f"\n{'model':<16} {'prompts':<8} {'backend':<7} {'task':<18} {'runs':>4} {'first try':>9} {'within N':>9}")
        for r in data["by_task"]:
            _say(f"{r['model'][:16]:<16} {r['prompts']:<8} {r['backend']:<7} {r['task']:<18} {r['runs']:>4} "
                 f"{_pct(r['first_try_rate']):>9} {_pct(r['within_n_rate']):>9}")
    return 0


def cmd_tasks(args) -> int:
    from agent.tasks import all_tasks

    for t in all_tasks():
        _say(f"{t.name:<18} level {t.level}  {', '.join(t.kinds):<34} {t.title}")
        if args.verbose:
            _say(f"    {t.signature()}\n    {t.statement}\n    launch: {t.launch}\n")
    return 0


# --------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m agent", description="qwenGPU advanced mode: Qwen writes the CUDA")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("solve", help="let the model write one kernel, streaming each attempt")
    s.add_argument("text", help="a task in plain words, or the name of a suite task")
    s.add_argument("--task", default=None, help="check against this suite task (signature, inputs, checker)")
    s.add_argument("--no-stream", action="store_true", help="do not print the reply while it is written")
    _add_model_args(s, attempts_default=3)
    s.set_defaults(func=cmd_solve)
    e = sub.add_parser("eval", help="run the task suite; print first-try and within-N success rates")
    e.add_argument("--tasks", default="all", help="all, NAME,NAME,..., kind:KIND or level:N")
    e.add_argument("--stream", action="store_true", help="print every reply while it is written")
    _add_model_args(e, attempts_default=3)
    e.set_defaults(func=cmd_eval)
    r = sub.add_parser("report", help="success rates from results.db by model, prompt version and backend")
    r.add_argument("--db", default=None)
    r.add_argument("--by-task", action="store_true")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_report)
    t = sub.add_parser("tasks", help="list the task suite")
    t.add_argument("-v", "--verbose", action="store_true")
    t.set_defaults(func=cmd_tasks)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from agent.prompts import PromptError
    from agent.record import RecordError

    try:
        return args.func(args)
    except (QwenGPUError, RecordError, PromptError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted (finished attempts are in the results database)", file=sys.stderr)
        return 130
    except BrokenPipeError:          # e.g. `python -m agent tasks | head`
        return 0
