"""The Gradio page: Run CUDA, Advanced mode, Results, Inside.

    demo = build_app()                       # gr.Blocks, queue configured
    demo.launch(**launch_kwargs(), ...)      # theme, CSS and the safe defaults (app.py does this)

Long work (compiling, running, recording, the agent loop) runs in a worker thread per request;
the event handler is a generator that polls it a few times a second and streams progress into the
page. Kernel runs share one concurrency group (CPU bound: `Limits.concurrency` at once), the model
another (one solve at a time); the queue holds at most `Limits.queue_size` waiting requests.
"""
from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
import traceback

import gradio as gr

from gpu_layers.errors import QwenGPUError
from webapp import render
from webapp.results import GROUPS
from webapp.advanced import FREE_TEXT, SolveView, allowed_models, default_model, get_model, check_model, solve
from webapp.examples import DEFAULT_EXAMPLE, examples
from webapp.limits import Limits, current_limits
from webapp.runner import Job, KernelInput, Progress, explain, prepare, run_prepared

log = logging.getLogger("qwengpu.app")

BACKEND_INTERP = "Interpreter (reference + machine-code oracle)"
BACKEND_MODEL = "Inside the model (the compiled machine core)"
POLL_S = 0.25
RUNNING = '<div class="qg-small" data-running="true">running ...</div>'

INTRO = """# qwenGPU
**A language model that will run real CUDA inside its own forward passes.** Write or pick a CUDA kernel;
`nvcc` (from PyPI, sandboxed) compiles it to PTX; the reference SIMT interpreter (bit for bit the
definition of the machine, checked against a real NVIDIA GPU) runs it, and the kernel's *machine code*
runs as the token stream the compiled model emits. With the model backend, the compiled machine
core (24 layers for Qwen3.5-2B's shapes, run by the fast executor) generates the whole trace
itself, blocks of up to four warps, and the outputs are decoded from its tokens; a built stock checkpoint
of it is not available yet."""


def _internal(e: BaseException, where: str):
    """Log the traceback of an unexpected error (a bug) on the server; the page shows one line."""
    if isinstance(e, QwenGPUError) or not isinstance(e, Exception):
        return
    log.error("internal error in %s:\n%s", where, "".join(traceback.format_exception(e)))


def _poll(job: Job, cancel: threading.Event, render_fn):
    """Yield render_fn() while the job runs; on disconnect, ask the job to stop."""
    try:
        while not job.done.wait(POLL_S):
            yield render_fn()
    except GeneratorExit:
        cancel.set()
        raise


_CSV_ROOT: list = []
CSV_KEEP_S = 600


def _csv_dir() -> str:
    """A fresh folder for one refresh's CSV files under one per-process folder; folders older than
    CSV_KEEP_S are removed (Gradio has copied them into its own cache by then)."""
    import shutil

    if not _CSV_ROOT:
        _CSV_ROOT.append(tempfile.mkdtemp(prefix="qwengpu-csv-"))
    root = _CSV_ROOT[0]
    now = time.time()
    for name in os.listdir(root):
        p = os.path.join(root, name)
        try:
            if now - os.path.getmtime(p) > CSV_KEEP_S:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass
    return tempfile.mkdtemp(dir=root)


# ------------------------------------------------------------------------------------------ handlers


class Handlers:
    def __init__(self, limits: Limits, db_path: str | None):
        self.limits = limits
        self.db_path = db_path

    # ---- Run CUDA
    def load_example(self, name):
        ex = examples().get(name)
        if ex is None:
            return gr.update(), gr.update(), gr.update(), gr.update(), gr.update(), None
        return ex.source, ex.grid, ex.block, ex.dynamic_shared_bytes, ex.args_text, name

    def run(self, source, grid, block, dsm, args_text, backend, example):
        inp = KernelInput(source, grid, block, dsm, args_text, example)
        which = "model" if backend == BACKEND_MODEL else "interp"
        progress = Progress()
        cancel = threading.Event()

        def work():
            prep = prepare(inp, self.limits, progress)
            return run_prepared(prep, self.limits, progress, cancel.is_set, backend=which)

        job = Job(work)
        yield render.progress_html(progress), RUNNING
        for _ in _poll(job, cancel, lambda: None):
            yield render.progress_html(progress), gr.update()
        if job.error is not None:
            _internal(job.error, "run")
            title, lines = explain(job.error, source)
            yield render.progress_html(progress), render.error_html(title, lines)
            return
        yield render.progress_html(progress), render.run_html(job.result, self.limits)

    # ---- Inside
    def record(self, source, grid, block, dsm, args_text, example):
        from gpu_layers.inspect import attach_tokens, record
        from gpu_layers.machine.protocol import trace_tokens
        from webapp.runner import launch_args

        L = self.limits
        inp = KernelInput(source, grid, block, dsm, args_text, example)
        progress = Progress()
        cancel = threading.Event()

        def work():
            prep = prepare(inp, L, progress)
            kernel = prep.lowered if prep.lowered is not None else prep.kernel
            case = prep.case
            progress.enter("recording")
            deadline = time.monotonic() + L.time_budget_s

            def on_step(n):
                progress.steps = n

            rec = record(kernel, case.grid, case.block, launch_args(case), case.dynamic_shared_bytes,
                         step_budget=L.inside_step_budget, max_snapshots=L.inside_max_snapshots,
                         memory_bytes=L.inside_memory_bytes, deadline=deadline, cancel=cancel.is_set,
                         on_step=on_step, buffer_names=[a.name for a in case.args if a.is_buffer])
            kind = "machine code (the lowered program the compiled model runs)" if prep.lowered is not None else \
                "PTX (this kernel does not lower to machine code yet: " + "; ".join(prep.lower_problems[:2]) + ")"
            if prep.lowered is not None and rec.error is None:
                progress.enter("tokens")
                tr = trace_tokens(prep.lowered, case.grid, case.block, launch_args(case), case.dynamic_shared_bytes,
                                  step_budget=L.inside_step_budget)
                attach_tokens(rec, tr.tokens)
                progress.tokens = len(tr.tokens)
                del tr
            return {"rec": rec, "kind": kind, "lowered": prep.lowered is not None}

        job = Job(work)
        yield render.progress_html(progress), gr.update(), RUNNING, None
        for _ in _poll(job, cancel, lambda: None):
            yield render.progress_html(progress), gr.update(), gr.update(), None
        if job.error is not None:
            _internal(job.error, "record")
            title, lines = explain(job.error, source)
            yield render.error_html(title, lines, where="inside"), gr.update(visible=False), "", None
            return
        state = job.result
        rec = state["rec"]
        msg = (f"Recorded {rec.total_steps:,} steps of the {state['kind']}; {len(rec.snapshots)} snapshots kept"
               + (f" (every {rec.stride}th step, plus the last)" if rec.stride > 1 else " (every step)")
               + (f". The run stopped early: {rec.error}" if rec.error else "")
               + (f". Token trace: {rec.tokens_total:,} tokens." if rec.tokens_total is not None else "."))
        n = len(rec.snapshots)
        slider = gr.update(minimum=0, maximum=max(n - 1, 1), value=0, step=1, visible=True,
                           label=f"snapshot (0 to {n - 1})", interactive=n > 1)
        yield (render.note_html(msg, "warn" if rec.error else "neutral", 'data-recorded="true"'), slider,
               render.snapshot_html(rec, 0, state["kind"]), state)

    def show_step(self, i, state):
        if not state:
            return '<div class="qg-small">Record a run first.</div>'
        rec = state["rec"]
        i = max(0, min(int(i or 0), len(rec.snapshots) - 1))
        return render.snapshot_html(rec, i, state["kind"])

    def nudge(self, i, delta, state):
        if not state:
            return gr.update()
        n = len(state["rec"].snapshots)
        return max(0, min(int(i or 0) + delta, n - 1))

    # ---- model
    def load_model(self, spec):
        view = SolveView()
        cancel = threading.Event()

        def work():
            s = check_model(spec, self.limits)
            get_model(s, lambda m: (setattr(view, "header", m), view.touch()))
            return s

        job = Job(work)
        for _ in _poll(job, cancel, lambda: None):
            yield render.note_html(view.header or "loading ...", "neutral", 'data-model="loading"')
        if job.error is not None:
            _internal(job.error, "model")
            title, lines = explain(job.error)
            yield render.error_html(title, lines, where="model")
            return
        yield render.note_html(view.header or f"model {job.result!r} ready", "neutral",
                               f'data-model="ready" data-spec="{render.E(job.result)}"')

    # ---- advanced
    def pick_task(self, name):
        from agent.tasks import get_task

        if not name or name == FREE_TEXT:
            return "", ("Write a task in plain words. With no inputs or checker, the kernel is compiled and "
                        "validated but not run; pick one of the agent's tasks to have it run and checked.")
        t = get_task(name)
        return t.statement, (f"**{t.title}** (level {t.level}; {', '.join(t.kinds)})  \n"
                             f"signature: `{t.signature()}`  \nlaunch: {t.launch}")

    def solve(self, spec, task_name, statement, attempts):
        view = SolveView()
        cancel = threading.Event()
        job = Job(solve, spec, task_name, statement, attempts, self.limits, view, cancel.is_set, self.db_path)
        yield render.solve_html(view)
        last = 0
        try:
            while not job.done.wait(POLL_S):
                if view.version != last:
                    last = view.version
                    yield render.solve_html(view)
        except GeneratorExit:
            cancel.set()
            raise
        if job.error is not None:
            _internal(job.error, "solve")
            view.error = explain(job.error)
        yield render.solve_html(view)

    # ---- results
    def results(self, by):
        from webapp import results as R

        path = self.db_path or os.environ.get("QWENGPU_RESULTS_DB") or "results.db"
        out, att = R.outcomes(path), R.attempts(path)
        table = R.rates(out, att, by)
        tmp = _csv_dir()
        tpath = os.path.join(tmp, f"success_rates_by_{by.replace(' ', '_')}.csv")
        apath = os.path.join(tmp, "attempts.csv")
        table.to_csv(tpath, index=False)
        att.to_csv(apath, index=False)
        n_out = len(out)
        summary = (f'<div class="qg-box" data-outcomes="{n_out}" data-attempts="{len(att)}">'
                   f"{render.E(R.summary_line(out, att))}</div>")
        return (summary, R.bars(table, by, "first try"), R.bars(table, by, "within N"), R.over_time(out), table,
                gr.update(value=tpath), gr.update(value=apath))


# ------------------------------------------------------------------------------------------ the page


def build_app(limits: Limits | None = None, db_path: str | None = None) -> gr.Blocks:
    limits = limits or current_limits()
    h = Handlers(limits, db_path)
    exs = examples()
    first = exs[DEFAULT_EXAMPLE]
    kernel_group = dict(concurrency_limit=limits.concurrency, concurrency_id="kernel")
    model_group = dict(concurrency_limit=limits.model_concurrency, concurrency_id="model")
    with gr.Blocks(title="qwenGPU", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        gr.Markdown(INTRO)
        with gr.Accordion("Model", open=False, elem_id="model-accordion"):
            allowed = allowed_models(limits)
            gr.Markdown(
                "The model that writes CUDA in Advanced mode (and, once the compiled machine exists, the host it "
                "is spliced into). Default: the **tiny** built-in host (a random Qwen3.5 with the real "
                "architecture: offline, loads in seconds, writes nonsense). The real **Qwen/Qwen3.5-2B**: a hub "
                "id or a local checkpoint directory, here or in `QWENGPU_MODEL`."
                + (f" This public deployment serves: {', '.join(allowed)}." if allowed is not None else ""))
            with gr.Row():
                model_box = gr.Textbox(value=default_model(), label="model", elem_id="model-spec", scale=4)
                model_btn = gr.Button("Load", elem_id="model-load", scale=1)
            model_status = gr.HTML(elem_id="model-status")
        example_state = gr.State(DEFAULT_EXAMPLE)
        with gr.Tabs():
            with gr.Tab("Run CUDA", id="run", elem_id="tab-run"):
                with gr.Row():
                    with gr.Column(scale=5):
                        example = gr.Dropdown(list(exs), value=DEFAULT_EXAMPLE, label="example kernel (the suite)",
                                              elem_id="example")
                        source = gr.Code(first.source, language="cpp", label="CUDA source", lines=18,
                                         elem_id="source")
                        with gr.Row():
                            grid = gr.Textbox(first.grid, label="grid (x, y, z)", elem_id="grid")
                            block = gr.Textbox(first.block, label="block (x, y, z)", elem_id="block")
                            dsm = gr.Number(first.dynamic_shared_bytes, label="dynamic shared bytes",
                                            precision=0, minimum=0, elem_id="dsm")
                        args = gr.Textbox(first.args_text, label="arguments: NAME TYPE VALUE [out], one per "
                                          "parameter; buffers as [a, b, ...], zeros(N), fill(N, V), range(N)",
                                          lines=6, max_lines=14, elem_id="args", elem_classes=["qg-mono"])
                        backend = gr.Radio([BACKEND_INTERP, BACKEND_MODEL], value=BACKEND_INTERP, label="backend",
                                           elem_id="backend")
                        run_btn = gr.Button("Run", variant="primary", elem_id="run-button")
                    with gr.Column(scale=6):
                        run_status = gr.HTML(elem_id="run-status")
                        run_result = gr.HTML('<div class="qg-small">Pick an example or write a kernel, then Run.'
                                             '</div>', elem_id="run-result")
            with gr.Tab("Advanced mode", id="advanced", elem_id="tab-advanced"):
                gr.Markdown("Describe a kernel in plain words, or pick one of the agent's tasks: the model writes "
                            "the CUDA, and each attempt is compiled, validated, run and checked. **Executed "
                            "exactly** (the run completed and equals the reference machine) and **correct** (the "
                            "checker accepted it) are separate facts. Every attempt is recorded in `results.db`.")
                from agent.tasks import task_names

                with gr.Row():
                    task = gr.Dropdown([FREE_TEXT] + task_names(), value=FREE_TEXT, label="task",
                                       elem_id="task", scale=3)
                    attempts = gr.Slider(1, limits.max_attempts, value=min(3, limits.max_attempts), step=1,
                                         label="attempts (N)", elem_id="attempts", scale=1)
                statement = gr.Textbox(label="the task, in plain words", lines=3, elem_id="statement",
                                       max_length=limits.max_statement_chars)
                task_info = gr.Markdown(elem_id="task-info")
                solve_btn = gr.Button("Solve", variant="primary", elem_id="solve-button")
                solve_out = gr.HTML(elem_id="solve-out")
            with gr.Tab("Results", id="results", elem_id="tab-results"):
                with gr.Row():
                    group_by = gr.Radio(list(GROUPS),
                                        value="task", label="success rates by", elem_id="group-by", scale=3)
                    refresh = gr.Button("Refresh", elem_id="results-refresh", scale=1)
                res_summary = gr.HTML(elem_id="results-summary")
                with gr.Row():
                    bar_first = gr.BarPlot(x="task", y="first try", title="first-try success rate", y_lim=[0, 1],
                                           elem_id="plot-first", height=260)
                    bar_within = gr.BarPlot(x="task", y="within N", title="success within N attempts", y_lim=[0, 1],
                                            elem_id="plot-within", height=260)
                line = gr.LinePlot(x="time", y="rate", color="metric", title="over time (running rates)",
                                   y_lim=[0, 1], elem_id="plot-time", height=260, x_axis_format="%b %d %H:%M")
                table = gr.Dataframe(elem_id="results-table", interactive=False, wrap=True)
                with gr.Row():
                    csv_table = gr.DownloadButton("Download this table (CSV)", elem_id="csv-table")
                    csv_attempts = gr.DownloadButton("Download every attempt (CSV)", elem_id="csv-attempts")
            with gr.Tab("Inside", id="inside", elem_id="tab-inside"):
                gr.Markdown("The machine's registers, predicates and memory at any step of a run of the kernel in "
                            "the **Run CUDA** tab, the token trace it emits with each token decoded, and the "
                            "planned map of the compiled layers. Until the compiled machine exists, the state is "
                            "the interpreter's, running the kernel's machine code when it lowers.")
                record_btn = gr.Button("Record the Run tab's kernel", variant="primary", elem_id="record-button")
                inside_status = gr.HTML(elem_id="inside-status")
                step = gr.Slider(0, 1, value=0, step=1, label="snapshot", visible=False, elem_id="step-slider")
                with gr.Row():
                    prev_btn = gr.Button("◀ previous", elem_id="step-prev", size="sm")
                    next_btn = gr.Button("next ▶", elem_id="step-next", size="sm")
                step_view = gr.HTML(elem_id="step-view")
                gr.HTML(render.layer_map_html(), elem_id="layer-map")
        rec_state = gr.State(None, time_to_live=3600)

        # events
        example.change(h.load_example, example, [source, grid, block, dsm, args, example_state], queue=False)
        run_btn.click(h.run, [source, grid, block, dsm, args, backend, example_state], [run_status, run_result],
                      **kernel_group)
        record_btn.click(h.record, [source, grid, block, dsm, args, example_state],
                         [inside_status, step, step_view, rec_state], **kernel_group)
        step.change(h.show_step, [step, rec_state], step_view, queue=False)
        prev_btn.click(lambda i, s: h.nudge(i, -1, s), [step, rec_state], step, queue=False)
        next_btn.click(lambda i, s: h.nudge(i, 1, s), [step, rec_state], step, queue=False)
        model_btn.click(h.load_model, model_box, model_status, **model_group)
        task.change(h.pick_task, task, [statement, task_info], queue=False)
        res_outputs = [res_summary, bar_first, bar_within, line, table, csv_table, csv_attempts]

        def _results(by):
            out = h.results(by)
            return (out[0], gr.BarPlot(value=out[1], x=by), gr.BarPlot(value=out[2], x=by), *out[3:])

        solve_btn.click(h.solve, [model_box, task, statement, attempts], solve_out, **model_group).then(
            _results, group_by, res_outputs)
        refresh.click(_results, group_by, res_outputs)
        group_by.change(_results, group_by, res_outputs)
        demo.load(_results, group_by, res_outputs)
    demo.queue(max_size=limits.queue_size, default_concurrency_limit=limits.concurrency)
    return demo


def theme():
    # System fonts only: the default theme would fetch fonts from the internet.
    return gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                             font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "monospace"])


def launch_kwargs(limits: Limits | None = None) -> dict:
    """Arguments of demo.launch for a safe deployment: no API page, no share link, no SSR (no Node),
    no MCP server, no files served but Gradio's own, bounded session state."""
    return dict(theme=theme(), css=render.CSS, share=False, ssr_mode=False, mcp_server=False, show_error=False,
                footer_links=[], max_file_size="1mb", state_session_capacity=500, allowed_paths=[])
