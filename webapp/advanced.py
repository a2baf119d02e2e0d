"""Advanced mode: the model writes the CUDA, through the agent loop (agent/), streamed into the page.

    view = SolveView()
    solve(spec, task_name, statement, attempts, limits, view, cancel)   # in a worker thread
    render.solve_html(view)                                            # polled by the page

Every attempt is recorded in results.db by `agent.loop.solve_task` (one row per attempt, written in
one transaction when the attempt ends); the run is one `runs` row of kind "solve".

Models. `get_model(spec)` loads a model once per process (a lock per spec, so concurrent sessions
share one load): "tiny" (the built-in tiny random Qwen3.5 host: offline, a few seconds, writes
nonsense), a local checkpoint directory or a hub id such as Qwen/Qwen3.5-2B (through
agent.model.load_model). `register_model(name, factory)` adds a named model (a factory returning
an agent.model.ChatModel); the test suite registers its scripted test double this way. On a public
deployment only the configured models are accepted (see `allowed_models`).
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass, field

from gpu_layers.errors import QwenGPUError

FREE_TEXT = "(your own words: compiled and validated, not run)"

_FACTORIES: dict = {}
_MODELS: dict = {}
_LOCKS: dict = {}
_GLOBAL = threading.Lock()


class ModelChoiceError(QwenGPUError):
    """The model field names something this deployment does not serve."""


class Stop(QwenGPUError):
    """The page went away: stop before the next attempt."""


def register_model(name: str, factory, note: str = ""):
    """Make `name` a model choice: factory() -> agent.model.ChatModel (called once, on first use)."""
    _FACTORIES[name] = (factory, note)


def default_model() -> str:
    return os.environ.get("QWENGPU_MODEL") or "tiny"


def allowed_models(limits) -> list | None:
    """The model specs the page may ask for: None means any (local use); on a public deployment the
    tiny host, $QWENGPU_MODEL and the registered names."""
    if not limits.public:
        return None
    names = ["tiny"] + ([os.environ["QWENGPU_MODEL"]] if os.environ.get("QWENGPU_MODEL") else [])
    return names + [n for n in _FACTORIES if n not in names]


def check_model(spec: str, limits) -> str:
    spec = (spec or "").strip() or default_model()
    if len(spec) > 300 or "\n" in spec:
        raise ModelChoiceError("the model field is too long")
    allowed = allowed_models(limits)
    if allowed is not None and spec not in allowed:
        raise ModelChoiceError(f"this public deployment serves only {', '.join(allowed)}; "
                               f"{spec!r} can be used when you run qwenGPU yourself (QWENGPU_MODEL or this field)")
    return spec


def get_model(spec: str, on_status=None):
    """The model for `spec`, loading it on first use (once per process)."""
    with _GLOBAL:
        lock = _LOCKS.setdefault(spec, threading.Lock())
    with lock:
        m = _MODELS.get(spec)
        if m is not None:
            return m
        t0 = time.perf_counter()
        if on_status:
            if spec in _FACTORIES:
                what = _FACTORIES[spec][1] or "creating it"
            elif spec == "tiny":
                what = "building the tiny random Qwen3.5 host (offline; a few seconds)"
            else:
                what = "loading the weights (first use: read or downloaded; minutes for Qwen3.5-2B)"
            on_status(f"model {spec!r}: {what} ...")
        if spec in _FACTORIES:
            m = _FACTORIES[spec][0]()
        else:
            from agent.model import load_model

            m = load_model(spec)
        _MODELS[spec] = m
        if on_status:
            on_status(f"model {spec!r} ready ({time.perf_counter() - t0:.1f} s to load)")
        return m


# --------------------------------------------------------------------------------------- streaming


@dataclass
class AttemptView:
    number: int
    max_attempts: int
    text: str = ""
    ev: object = None                # agent.execute.Evaluation once the attempt ends
    gen_tokens: int = 0
    gen_seconds: float = 0.0
    seconds: float = 0.0


@dataclass
class SolveView:
    header: str = ""
    attempts: list = field(default_factory=list)
    error: tuple | None = None       # (title, lines)
    summary: str = ""
    solved: bool | None = None
    run_id: str | None = None
    version: int = 0                 # bumped on every change (the page re-renders when it moves)

    def touch(self):
        self.version += 1


class _PageReporter:
    """agent.loop.Reporter that writes into a SolveView (the worker thread writes, the page reads)."""

    def __init__(self, view: SolveView, cancel):
        self.view, self.cancel = view, cancel

    def task_start(self, task, index, total):
        pass

    def attempt_start(self, task_name, attempt, max_attempts):
        if self.cancel():
            raise Stop("stopped: the page went away")
        self.view.attempts.append(AttemptView(attempt, max_attempts))
        self.view.touch()

    def text(self, piece):
        if self.view.attempts:
            self.view.attempts[-1].text += piece
            self.view.touch()

    def attempt_done(self, task_name, attempt, max_attempts, ev, gen, seconds):
        a = self.view.attempts[-1]
        a.ev, a.text = ev, gen.text
        a.gen_tokens, a.gen_seconds, a.seconds = gen.new_tokens, gen.seconds, seconds
        self.view.touch()

    def task_done(self, outcome):
        pass


def resolve_task(task_name: str | None, statement: str):
    """(task or None, free statement or None), as `python -m agent solve` does."""
    from agent.tasks import get_task, task_names

    text = (statement or "").strip()
    if task_name and task_name != FREE_TEXT:
        task = get_task(task_name)
        if text and " ".join(text.split()) != " ".join(task.statement.split()):
            task = dataclasses.replace(task, statement=text)
        return task, None
    if text in task_names():
        return get_task(text), None
    if not text:
        raise QwenGPUError("write a task in plain words, or pick one of the agent's tasks")
    return None, text


def solve(spec: str, task_name: str | None, statement: str, attempts: int, limits, view: SolveView,
          cancel=lambda: False, db_path=None):
    """One advanced-mode request, start to end (run it in a worker thread; it fills `view`)."""
    from agent.backends import get_backend
    from agent.loop import run_meta, solve_task
    from agent.prompts import load_prompts
    from agent.record import ResultsDB

    if len(statement or "") > limits.max_statement_chars:
        raise QwenGPUError(f"the task text has {len(statement)} characters; at most {limits.max_statement_chars}")
    attempts = int(attempts)
    if not 1 <= attempts <= limits.max_attempts:
        raise QwenGPUError(f"attempts must be between 1 and {limits.max_attempts}")
    spec = check_model(spec, limits)
    task, free = resolve_task(task_name, statement)

    def status(msg):
        view.header = msg
        view.touch()

    model = get_model(spec, status)
    backend = get_backend("auto")
    prompts = load_prompts()
    status(f"model {model.info.get('model_id')} · backend {backend.name} (the reference interpreter; the "
           f"model backend is in Run CUDA) · prompts {prompts.version} · "
           + (f"task {task.name}: {task.statement}" if task is not None else
              "your own task: compiled and validated only (no inputs or checker; pick one of the agent's tasks "
              "to have it run and checked)"))
    db = ResultsDB(db_path)
    try:
        name = task.name if task is not None else "adhoc"
        run_id = db.start_run(run_meta("solve", model, backend, prompts, attempts, [name], argv=["app.py"]))
        view.run_id = run_id
        try:
            outcome = solve_task(task, model, backend, prompts, db=db, run_id=run_id, max_attempts=attempts,
                                 statement=free, reporter=_PageReporter(view, cancel), stream=True)
        except BaseException:
            db.finish_run(run_id, "interrupted")
            raise
        db.finish_run(run_id, "finished", {"n_tasks": 1, "first_try_rate": float(outcome.first_try),
                                           "within_n_rate": float(outcome.solved)})
    finally:
        db.close()
    n = len(outcome.attempts)
    if task is None:
        view.summary = f"{outcome.last_verdict} after {n} attempt(s); every attempt is in results.db (run {run_id[:12]})"
        view.solved = outcome.last_verdict == "unchecked"
    else:
        view.summary = ((f"solved on attempt {outcome.solved_at}" if outcome.solved else f"not solved in {n} attempt(s)")
                        + f"; every attempt is in results.db (run {run_id[:12]})")
        view.solved = outcome.solved
    view.touch()
    return outcome
