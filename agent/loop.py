"""The agent loop: task -> prompt -> the model writes CUDA -> extract -> nvcc -> validator -> run ->
checker -> on failure, feedback and retry, up to N attempts; every attempt is one row of results.db.

    outcome = solve_task(task, model, backend, prompts, db=db, run_id=run_id, max_attempts=3)
    summary = run_eval(tasks, model, backend, prompts, db=db, max_attempts=3)

`model` is a `agent.model.ChatModel` (the host checkpoint; a scripted double only in unit tests),
`backend` an `agent.backends.Backend`, `prompts` an `agent.prompts.PromptSet`. Nothing a model can
write crashes the loop: nonsense becomes a failed attempt with its reason (see agent.execute). A
failure of the model itself (an exception while generating) is recorded as an internal_error
attempt. KeyboardInterrupt stops the run: the attempt in flight is not recorded (it did not end),
the run is marked "interrupted".
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from agent.execute import Evaluation, evaluate
from agent.extract import extract_kernel
from agent.record import new_uid, now_iso

STOP_VERDICTS = ("correct", "unchecked")


@dataclass
class TaskOutcome:
    task: str
    attempts: list = field(default_factory=list)    # [(attempt number, verdict, reason)]
    solved_at: int | None = None
    max_attempts: int = 1

    @property
    def first_try(self) -> bool:
        return self.solved_at == 1

    @property
    def solved(self) -> bool:
        return self.solved_at is not None

    @property
    def last_verdict(self) -> str | None:
        return self.attempts[-1][1] if self.attempts else None


class Reporter:
    """What the loop tells its user; the default says nothing. See cli.py for the printing one."""

    def task_start(self, task, index: int, total: int):
        pass

    def attempt_start(self, task_name: str, attempt: int, max_attempts: int):
        pass

    def text(self, piece: str):
        pass

    def attempt_done(self, task_name: str, attempt: int, max_attempts: int, ev: Evaluation, gen, seconds: float):
        pass

    def task_done(self, outcome: TaskOutcome):
        pass


def code_version() -> str | None:
    """The git commit of this checkout (with '+dirty' when modified), if git knows it."""
    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def run_meta(kind, model, backend, prompts, max_attempts, task_names, argv=None) -> dict:
    info = model.info
    return {"kind": kind, "model_id": info.get("model_id"), "model_revision": info.get("revision"),
            "checkpoint_fingerprint": info.get("fingerprint"), "backend": backend.name,
            "prompt_version": prompts.version, "prompt_sha256": prompts.sha256, "sampling": info.get("settings"),
            "max_attempts": max_attempts, "tasks": task_names, "argv": argv if argv is not None else sys.argv,
            "code_version": code_version()}


class _Gen:
    """A failed generation: empty text, for the record."""
    text, new_tokens, prompt_tokens, seconds, finish_reason, tokens_per_s = "", 0, None, 0.0, "error", None


def _attempt_row(run_id, task, task_name, statement, attempt, max_attempts, model, backend, prompts, messages, gen,
                 extraction, ev: Evaluation, feedback, started, t0) -> dict:
    info = model.info
    run_ok = None if ev.executed is None else int(bool(ev.executed))
    tokens = ev.run_tokens
    rs = ev.run_seconds
    return {
        "attempt_uid": new_uid(), "run_id": run_id, "task": task_name,
        "task_fingerprint": task.fingerprint() if task is not None else None, "statement": statement,
        "attempt": attempt, "max_attempts": max_attempts,
        "prompt_version": prompts.version, "prompt_sha256": prompts.sha256,
        "model_id": info.get("model_id") or "?", "model_revision": info.get("revision"),
        "checkpoint_fingerprint": info.get("fingerprint"), "backend": backend.name,
        "sampling": json.dumps(info.get("settings"), default=str), "prompt_messages": json.dumps(messages),
        "generated_text": gen.text, "gen_tokens": gen.new_tokens, "prompt_tokens": gen.prompt_tokens,
        "gen_seconds": gen.seconds, "gen_tokens_per_s": gen.tokens_per_s, "finish_reason": gen.finish_reason,
        "extracted_code": extraction.code if extraction else None,
        "extract_note": extraction.note if extraction else None,
        "ptx_sha256": ev.ptx_sha256, "compile_ok": ev.compile_ok, "compile_messages": ev.compile_messages,
        "compile_seconds": ev.seconds.get("compile"), "validate_ok": ev.validate_ok,
        "validate_problems": ev.validate_problems, "validate_seconds": ev.seconds.get("validate"),
        "warnings": ev.warnings, "entry": ev.entry,
        "run_ok": run_ok, "run_error": ev.run_error, "run_results": ev.run_sets or None,
        "run_steps": ev.run_steps, "run_seconds": rs, "run_tokens": tokens,
        "run_tokens_per_s": (tokens / rs) if tokens is not None and rs else None,
        "executed": None if ev.executed is None else int(ev.executed),
        "executed_exactly": None if ev.executed_exactly is None else int(ev.executed_exactly),
        "correct": None if ev.correct is None else int(ev.correct),
        "verdict": ev.verdict, "stage": ev.stage, "reason": ev.reason,
        "first_mismatch": ev.first_mismatch, "inputs_passed": ev.inputs_passed if ev.inputs_total else None,
        "inputs_total": ev.inputs_total or None, "check_seconds": ev.seconds.get("check"),
        "feedback": feedback, "started_at": started, "finished_at": now_iso(),
        "seconds_total": time.perf_counter() - t0,
    }


def solve_task(task, model, backend, prompts, *, db, run_id: str, max_attempts: int = 3,
               statement: str | None = None, reporter: Reporter | None = None, stream: bool = False) -> TaskOutcome:
    """Up to `max_attempts` attempts at `task` (a Task; or None with a free-form `statement`)."""
    rep = reporter or Reporter()
    name = task.name if task is not None else "adhoc"
    messages = prompts.start(task, statement)
    outcome = TaskOutcome(task=name, max_attempts=max_attempts)
    for attempt in range(1, max_attempts + 1):
        rep.attempt_start(name, attempt, max_attempts)
        started, t0 = now_iso(), time.perf_counter()
        sent = [dict(m) for m in messages]
        extraction = None
        try:
            gen = model.generate(sent, on_text=rep.text if stream else None)
        except KeyboardInterrupt:
            raise
        except Exception as e:
            gen = _Gen()
            ev = Evaluation("internal_error", "generate", f"the model failed while generating: {type(e).__name__}: {e}",
                            details=traceback.format_exc(limit=4).splitlines()[-8:])
        else:
            extraction = extract_kernel(gen.text, task.kernel if task is not None else None)
            ev = evaluate(extraction.code, task, backend, extract_note=extraction.note)
        done = ev.verdict in STOP_VERDICTS
        feedback = None if done or attempt == max_attempts else prompts.feedback(ev, task)
        row = _attempt_row(run_id, task, name, statement if task is None else task.statement, attempt, max_attempts, model,
                           backend, prompts, sent, gen, extraction, ev, feedback, started, t0)
        db.record_attempt(row)
        outcome.attempts.append((attempt, ev.verdict, ev.reason))
        rep.attempt_done(name, attempt, max_attempts, ev, gen, row["seconds_total"])
        if done:
            outcome.solved_at = attempt if ev.verdict == "correct" else None
            break
        if feedback is not None:
            messages = messages + [{"role": "assistant", "content": gen.text}, {"role": "user", "content": feedback}]
    if task is not None:
        db.record_task_result({"run_id": run_id, "task": name, "attempts_used": len(outcome.attempts),
                               "max_attempts": max_attempts, "first_try": int(outcome.first_try),
                               "solved": int(outcome.solved), "solved_at": outcome.solved_at,
                               "last_verdict": outcome.last_verdict})
    rep.task_done(outcome)
    return outcome


def summarize(outcomes: list, max_attempts: int) -> dict:
    n = len(outcomes)
    first = sum(o.first_try for o in outcomes)
    within = sum(o.solved for o in outcomes)
    verdicts: dict = {}
    for o in outcomes:
        for _, v, _ in o.attempts:
            verdicts[v] = verdicts.get(v, 0) + 1
    return {"n_tasks": n, "max_attempts": max_attempts, "first_try": first, "within_n": within,
            "first_try_rate": first / n if n else None, "within_n_rate": within / n if n else None,
            "attempts": sum(len(o.attempts) for o in outcomes), "verdicts": verdicts,
            "per_task": {o.task: {"first_try": o.first_try, "solved_at": o.solved_at, "attempts": len(o.attempts),
                                  "last_verdict": o.last_verdict} for o in outcomes}}


def run_eval(tasks, model, backend, prompts, *, db, max_attempts: int = 3, reporter: Reporter | None = None,
             argv=None, stream: bool = False):
    """Every task, up to N attempts each; returns (run_id, summary). The run row records the rates."""
    rep = reporter or Reporter()
    run_id = db.start_run(run_meta("eval", model, backend, prompts, max_attempts, [t.name for t in tasks], argv))
    outcomes = []
    try:
        for i, t in enumerate(tasks):
            rep.task_start(t, i, len(tasks))
            outcomes.append(solve_task(t, model, backend, prompts, db=db, run_id=run_id, max_attempts=max_attempts,
                                       reporter=rep, stream=stream))
    except BaseException as e:
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        try:
            db.finish_run(run_id, status, summarize(outcomes, max_attempts))
        except Exception:
            pass
        raise
    summary = summarize(outcomes, max_attempts)
    db.finish_run(run_id, "finished", summary)
    return run_id, summary
