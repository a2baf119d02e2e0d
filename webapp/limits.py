"""Per-request budgets and input limits of the web app.

A public deployment (a Hugging Face Space: the SPACE_ID environment variable is set, or
QWENGPU_PUBLIC=1) gets tighter limits than a local one, and its model field only accepts the
configured models (no local paths, no arbitrary hub downloads). Every limit is checked on the
server for every request (the Gradio API can be called without the page).

Overrides (integers): QWENGPU_STEP_BUDGET, QWENGPU_MACHINE_STEP_BUDGET, QWENGPU_TIME_BUDGET_S,
QWENGPU_MODEL_TIME_BUDGET_S (the model backend's generation),
QWENGPU_CONCURRENCY (simultaneous kernel runs), QWENGPU_QUEUE_SIZE.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace


def is_public() -> bool:
    return bool(os.environ.get("SPACE_ID")) or os.environ.get("QWENGPU_PUBLIC", "") not in ("", "0")


@dataclass(frozen=True)
class Limits:
    public: bool
    max_source_bytes: int = 64 * 1024          # CUDA source (nvcc's own cap is 256 KiB)
    max_args_chars: int = 256 * 1024           # the argument text
    max_buffer_elements: int = 65_536          # all buffers of a launch together
    max_threads: int = 4_096                   # threads per launch
    step_budget: int = 1_000_000               # warp-instruction steps of the reference run
    machine_step_budget: int = 60_000          # steps of the machine-code (lowered) run
    time_budget_s: float = 20.0                # wall time of one run, compile excluded
    model_time_budget_s: float = 120.0         # the model backend's generation (about 1,000 tokens/s here)
    model_max_tokens: int = 200_000            # ... and its generated tokens
    inside_step_budget: int = 50_000           # machine steps recorded for the Inside view (its token
                                               # trace is held in memory while it is aligned)
    inside_max_snapshots: int = 256
    inside_memory_bytes: int = 4_096           # bytes kept per buffer per snapshot
    max_attempts: int = 3                      # advanced mode
    max_statement_chars: int = 2_000
    concurrency: int = 2                       # kernel runs at once (CPU bound)
    model_concurrency: int = 1                 # advanced-mode solves at once (one model)
    queue_size: int = 64                       # requests waiting, beyond which new ones are refused
    max_output_rows: int = 512                 # output elements shown per buffer


def _env_int(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise SystemExit(f"{name} must be an integer, got {v!r}") from None


def current_limits() -> Limits:
    public = is_public()
    base = Limits(public=True) if public else Limits(
        public=False, max_buffer_elements=1 << 20, max_threads=1 << 16, step_budget=5_000_000,
        machine_step_budget=400_000, time_budget_s=120.0, model_time_budget_s=1800.0, model_max_tokens=2_000_000,
        inside_step_budget=100_000, max_attempts=5,
        concurrency=2, queue_size=256)
    return replace(
        base,
        step_budget=_env_int("QWENGPU_STEP_BUDGET", base.step_budget),
        machine_step_budget=_env_int("QWENGPU_MACHINE_STEP_BUDGET", base.machine_step_budget),
        time_budget_s=float(_env_int("QWENGPU_TIME_BUDGET_S", int(base.time_budget_s))),
        model_time_budget_s=float(_env_int("QWENGPU_MODEL_TIME_BUDGET_S", int(base.model_time_budget_s))),
        concurrency=_env_int("QWENGPU_CONCURRENCY", base.concurrency),
        queue_size=_env_int("QWENGPU_QUEUE_SIZE", base.queue_size),
    )
