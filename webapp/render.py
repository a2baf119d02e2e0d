"""HTML for the app's panels. Everything that comes from a user or a model is escaped here.

Elements carry data- attributes (data-verdict, data-attempt, data-step, ...) so the browser tests
read the page the way a person does, without depending on Gradio's own markup.
"""
from __future__ import annotations

import html
import math

import numpy as np

CSS = """
.qg-badge{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:600;margin-right:6px}
.qg-exact{background:#d1fadf;color:#05603a}.qg-differs{background:#fee4e2;color:#912018}
.qg-neutral{background:#eef2f6;color:#364152}.qg-error{background:#fee4e2;color:#912018}
.qg-warn{background:#fef0c7;color:#93370d}
.qg-box{border:1px solid #d0d5dd;border-radius:8px;padding:10px 12px;margin:6px 0;background:#fff}
.qg-err{border-color:#f97066;background:#fffbfa}
.qg-mono,.qg-box pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.qg-box pre{white-space:pre-wrap;margin:4px 0;max-height:360px;overflow:auto;background:#f8f9fb;padding:6px;border-radius:4px}
table.qg-t{border-collapse:collapse;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
table.qg-t td,table.qg-t th{border:1px solid #e4e7ec;padding:1px 6px;text-align:right;white-space:nowrap}
table.qg-t th{background:#f2f4f7;position:sticky;top:0}
table.qg-t tr.bad td{background:#fee4e2}
td.qg-w{background:#fde68a !important;font-weight:700}td.qg-c{background:#d1e9ff}
td.qg-u{color:#98a2b3}td.qg-off{color:#c0c5cc}
.qg-scroll{max-height:420px;overflow:auto;margin:4px 0}
.qg-grid{display:flex;gap:16px;flex-wrap:wrap;align-items:flex-start}
.qg-small{color:#475467;font-size:12px}
.qg-attempt h4{margin:0 0 6px 0}
.qg-facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;font-size:13px}
"""

E = html.escape


def _badge(text, kind):
    return f'<span class="qg-badge qg-{kind}">{E(text)}</span>'


def error_html(title: str, lines: list, where: str = "run") -> str:
    body = "\n".join(lines)
    return (f'<div class="qg-box qg-err" data-verdict="error" data-where="{E(where)}">'
            f'{_badge("error", "error")}<b>{E(title)}</b><pre class="qg-errtext">{E(body)}</pre></div>')


def note_html(text: str, kind: str = "neutral", data: str = "") -> str:
    return f'<div class="qg-box" {data}>{_badge(kind if kind != "neutral" else "note", kind)}{E(text)}</div>'


# --------------------------------------------------------------------------------------- values


def fmt_elem(x, dtype) -> str:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        v = float(x)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(float(np.float32(v))) if dt.itemsize == 4 else repr(v)
    return str(int(x))


def bits_hex(x, dtype) -> str:
    dt = np.dtype(dtype)
    a = np.array([x], dtype=dt)
    return a.view(np.dtype(f"u{dt.itemsize}"))[0].item().__format__(f"0{2 * dt.itemsize}x")


# --------------------------------------------------------------------------------------- progress


def progress_html(p, limits=None) -> str:
    import time

    now = time.monotonic()
    el = now - p.started
    rows = [("phase", {"waiting": "waiting in the queue", "compiling": "compiling with nvcc (sandboxed)",
                       "validating": "parsing and validating the PTX",
                       "reference": "running on the reference interpreter",
                       "machine": "running the machine code (the token stream the model will emit)",
                       "loading": "loading the machine core (compiled on first use: about 2 minutes, 7 GB)",
                       "model": "the model generates the trace (the machine core's compiled layers)",
                       "recording": "recording state snapshots", "tokens": "computing the token trace",
                       "done": "done"}.get(p.phase, p.phase))]
    if p.steps:
        rate = p.steps / max(now - p.phase_started, 1e-9) if p.phase == "reference" else None
        rows.append(("steps", f"{p.steps:,} warp-instructions" + (f" ({rate:,.0f}/s)" if rate else "")))
    if p.tokens is not None:
        tps = p.tokens / p.machine_seconds if p.machine_seconds else None
        rows.append(("machine tokens", f"{p.tokens:,}" + (f" ({tps:,.0f} tokens/s)" if tps else "")
                     + (f" over {p.machine_steps:,} machine steps" if p.machine_steps else "")))
    rows.append(("elapsed", f"{el:.1f} s"))
    body = "".join(f"<div><b>{E(k)}</b></div><div>{E(v)}</div>" for k, v in rows)
    return f'<div class="qg-box" data-phase="{E(p.phase)}"><div class="qg-facts">{body}</div></div>'


# --------------------------------------------------------------------------------------- a run


VERDICT_TEXT = {
    "exact": ("exact", "exact",
              "the machine-code run, decoded from its token stream alone, equals the reference interpreter "
              "bit for bit"),
    "differs": ("differs", "differs", "the machine-code run differs from the reference interpreter"),
    "reference-only": ("reference only", "neutral",
                       "this kernel does not lower to the machine's code yet, so it ran on the reference "
                       "interpreter alone: there is no second execution to compare"),
    "not-compared": ("not compared", "warn", ""),
}


def run_html(rep, limits) -> str:
    label, kind, why = VERDICT_TEXT[rep.verdict]
    model = rep.backend == "model"
    if rep.verdict == "not-compared" or (model and rep.verdict == "reference-only"):
        why = rep.machine_error or ""
    elif model:
        why = {"exact": "the outputs decoded from the tokens the model generated equal the reference "
                        "interpreter's bit for bit",
               "differs": "the outputs decoded from the tokens the model generated differ from the "
                          "reference interpreter's"}[rep.verdict]
    facts = [("kernel", f"{rep.kernel}: grid {list(rep.grid)} x block {list(rep.block)} = {rep.nthreads} threads"),
             ("reference interpreter", f"{rep.steps:,} warp-instruction steps, {rep.lane_issues:,} lane-group issues "
                                       f"(4 lanes), {rep.ref_seconds * 1000:.0f} ms"),
             ("nvcc", f"{rep.compile_seconds:.2f} s (cached after the first compile)")]
    if model and rep.tokens is not None:
        facts.append(("inside the model", f"{rep.prompt_tokens:,} prompt tokens (program, launch, memory), "
                                          f"{rep.tokens:,} tokens generated ({rep.tokens - rep.dump_tokens:,} of "
                                          f"execution, {rep.dump_tokens:,} of output dump) by the machine core's "
                                          f"compiled layers (fast executor), {rep.tokens_per_s:,.0f} tokens/s"))
    elif rep.tokens is not None:
        facts.append(("machine code", f"{rep.machine_steps:,} machine steps, {rep.machine_issues:,} lane-group issues, "
                                      f"{rep.tokens:,} tokens ({rep.tokens - rep.dump_tokens:,} of execution, "
                                      f"{rep.dump_tokens:,} of output dump), {rep.tokens_per_s:,.0f} tokens/s "
                                      f"in the oracle"))
    elif rep.lower_problems:
        facts.append(("machine code", "not lowered: " + "; ".join(rep.lower_problems[:3])
                      + (f" (+{len(rep.lower_problems) - 3} more)" if len(rep.lower_problems) > 3 else "")))
    if rep.correct is not None:
        facts.append(("correct", ("yes: " if rep.correct else "no: ") + rep.correct_note))
    else:
        facts.append(("correct", "not checked: " + rep.correct_note))
    if rep.entry_note:
        facts.append(("note", rep.entry_note))
    body = "".join(f"<div><b>{E(k)}</b></div><div>{E(v)}</div>" for k, v in facts)
    head = (f'<div class="qg-box" data-verdict="{E(rep.verdict)}" data-correct="{E(str(rep.correct).lower())}">'
            f'{_badge(label, kind)}<span>{E(why)}</span>'
            f'<div class="qg-facts" style="margin-top:8px">{body}</div></div>')
    return head + outputs_html(rep, limits.max_output_rows)


def outputs_html(rep, max_rows: int) -> str:
    parts = []
    for o in rep.outputs:
        ref = o.reference
        mach = o.machine
        n = len(ref)
        if mach is not None:
            bad = np.nonzero(ref.view(f"u{ref.dtype.itemsize}") != mach.view(f"u{ref.dtype.itemsize}"))[0]
        else:
            bad = np.array([], dtype=int)
        rows = list(bad[:max_rows]) if len(bad) else []
        rows = sorted(set(rows) | set(range(min(n, max_rows - len(rows)))))
        cols = ["#"] + (["machine (from tokens)"] if mach is not None else []) + ["reference interpreter"] + \
            (["numpy reference"] if o.expected is not None else []) + ["bits (reference)"]
        trs = []
        badset = set(int(i) for i in bad)
        for i in rows:
            cells = [str(i)]
            if mach is not None:
                cells.append(fmt_elem(mach[i], ref.dtype))
            cells.append(fmt_elem(ref[i], ref.dtype))
            if o.expected is not None:
                cells.append(fmt_elem(o.expected[i], ref.dtype))
            cells.append(bits_hex(ref[i], ref.dtype))
            cls = ' class="bad"' if i in badset else ""
            trs.append(f"<tr{cls}>" + "".join(f"<td>{E(c)}</td>" for c in cells) + "</tr>")
        status = ("" if mach is None else
                  (_badge("exact", "exact") if not len(bad) else _badge(f"{len(bad)} differ", "differs")))
        more = f'<div class="qg-small">{n - len(rows)} more elements not shown</div>' if n > len(rows) else ""
        parts.append(f'<div class="qg-box" data-buffer="{E(o.name)}" data-exact="{E(str(o.exact).lower())}">'
                     f'{status}<b>{E(o.name)}</b> <span class="qg-small">{ref.dtype} x {n}</span>'
                     f'<div class="qg-scroll"><table class="qg-t"><tr>'
                     + "".join(f"<th>{E(c)}</th>" for c in cols) + "</tr>" + "".join(trs) +
                     f"</table></div>{more}</div>")
    return "".join(parts)


# --------------------------------------------------------------------------------------- advanced mode


def _yn(v):
    return "-" if v is None else ("yes" if v else "no")


def attempt_html(a) -> str:
    """One attempt card: a = webapp.advanced.AttemptView."""
    ev = a.ev
    verdict = ev.verdict if ev is not None else "writing"
    kind = {"correct": "exact", "unchecked": "neutral", "writing": "neutral"}.get(verdict, "differs")
    head = f'<h4>Attempt {a.number} of {a.max_attempts} {_badge(verdict.replace("_", " "), kind)}</h4>'
    parts = [head]
    if ev is None:
        parts.append(f'<div class="qg-small">the model is writing ({len(a.text)} characters so far)</div>')
        parts.append(f"<pre>{E(a.text[-4000:])}</pre>")
    else:
        code = ev.code
        parts.append("<div><b>The code the model wrote</b></div>")
        parts.append(f"<pre>{E(code) if code else E('(no CUDA code found in the reply)')}</pre>")
        parts.append(f"<details><summary>the whole reply ({len(a.text)} characters, {a.gen_tokens} tokens in "
                     f"{a.gen_seconds:.1f} s)</summary><pre>{E(a.text)}</pre></details>")
        facts = []
        if ev.compile_ok is not None:
            facts.append(("compile", "ok" if ev.compile_ok else "error: " + "\n".join(ev.compile_messages[:8])))
        if ev.validate_ok is not None:
            facts.append(("validation", "ok: every instruction is supported" if ev.validate_ok else
                          "unsupported: " + "; ".join(ev.validate_problems[:6])))
        if ev.run_sets or ev.run_error:
            if ev.run_error:
                facts.append(("run", ev.run_error))
            else:
                steps = sum(s["steps"] for s in ev.run_sets)
                facts.append(("run", f"{len(ev.run_sets)} input set(s), {steps:,} warp-instruction steps"))
        facts.append(("checker", f"{ev.verdict}: {ev.reason}"))
        facts.append(("executed exactly", _yn(ev.executed_exactly)
                      + ("" if ev.executed_exactly is None else
                         " (every run completed and equals the reference machine)" if ev.executed_exactly else "")))
        facts.append(("correct", _yn(ev.correct)
                      + ("" if ev.correct is None else " (the checker accepted every input set)" if ev.correct
                         else " (the checker rejected it)")))
        body = "".join(f"<div><b>{E(k)}</b></div><div class='qg-mono'>{E(v)}</div>" for k, v in facts)
        parts.append(f'<div class="qg-facts">{body}</div>')
    ex = "" if ev is None or ev.executed_exactly is None else str(bool(ev.executed_exactly)).lower()
    co = "" if ev is None or ev.correct is None else str(bool(ev.correct)).lower()
    return (f'<div class="qg-box qg-attempt" data-attempt="{a.number}" data-verdict="{E(verdict)}" '
            f'data-exact="{ex}" data-correct="{co}">' + "".join(parts) + "</div>")


def solve_html(view) -> str:
    """The whole advanced-mode panel: a = webapp.advanced.SolveView."""
    parts = []
    if view.header:
        parts.append(f'<div class="qg-box qg-small">{E(view.header)}</div>')
    parts += [attempt_html(a) for a in view.attempts]
    if view.error:
        parts.append(error_html(view.error[0], view.error[1], where="advanced"))
    if view.summary:
        parts.append(f'<div class="qg-box" data-done="true" data-solved="{E(str(view.solved).lower())}" '
                     f'data-run-id="{E(view.run_id or "")}" data-attempts="{len(view.attempts)}">'
                     f'<b>{E(view.summary)}</b></div>')
    return "".join(parts) or '<div class="qg-small" data-running="true">starting ...</div>'


# --------------------------------------------------------------------------------------- inside


CORE_LAYERS = 24  # the machine core's layers for Qwen3.5-2B's shapes (tests/test_machine_core.py checks the schedule)
LAYER_MAP = [     # the machine core's 24 layers as scheduled for Qwen3.5-2B's shapes (docs/machine.md §7;
    # scripts/residual_liveness.py and craft.assemble.schedule print the placement)
    ("0-2", "Prompt and issue", "prompt registers (thread and block counts, the <pa> address), the program in "
                                "8 banks per field (control words, operands, predicates, immediates), the "
                                "issue register (the <wi W P H> token's PC and control word), the next PCs"),
    ("3-5", "PC file", "one head per lane of a warp (32), a slot per warp: each thread's PC, exited, waiting "
                       "(block or warp barrier) and phase; each warp's cursor"),
    ("5-9", "Pick the next step", "the cursor rule (the lowest PC at or after the cursor), re-digitized, the "
                                  "warps' round robin (<w W H G>), the write-back's chunk buffers and commit, the "
                                  "executing lane group"),
    ("10-16", "Operand fetch", "the register file: three read ports per lane (a, b, the predicate), each in eight "
                               "banks of heads (two per warp); the immediate and %tid / %ctaid gated in"),
    ("12-20", "ALU and memory", "four ALU stages per lane; the memory address bits, the served lane, bounds, 36 "
                                "banks of global (16 KB) and shared memory (2 KB), the loaded word"),
    ("20-23", "Emit", "latches, the executed lanes and poison rules, the step token <g> and the data tokens <d>, "
                      "the output dump"),
]


def layer_map_html() -> str:
    rows = "".join(f"<tr><td>{a}</td><td style='text-align:left'>{E(b)}</td><td style='text-align:left'>{E(c)}</td></tr>"
                   for a, b, c in LAYER_MAP)
    return ('<div class="qg-box" data-layer-map="core">'
            '<b>Which compiled layer does what</b>'
            f'<div class="qg-small">The machine core: {CORE_LAYERS} layers for Qwen3.5-2B\'s shapes (the model backend of Run '
            'CUDA runs in them). The state shown above is the reference interpreter\'s running the machine code, '
            'which the core\'s DeltaNet state holds at the same step (gpu_layers.machine.inspect_state).</div>'
            '<table class="qg-t" style="margin-top:6px"><tr><th>layers</th><th>what</th><th>how</th></tr>'
            f"{rows}</table></div>")


def _reg_cell(v, bits):
    if v is None:
        return "undef"
    if bits == 1:
        return str(v)
    return format(v, f"0{max(1, bits // 4)}x")


def snapshot_html(rec, i: int, program_kind: str) -> str:
    from gpu_layers.machine.protocol import describe

    s = rec.snapshots[i]
    prev = rec.previous(i)
    n = s.nthreads
    lanes = list(range(n))
    head = (f'<div class="qg-box" data-step="{s.step}" data-snapshot="{i}">'
            f'<b>step {s.step + 1:,} of {rec.total_steps:,}</b> '
            f'<span class="qg-small">(snapshot {i + 1} of {len(rec.snapshots)}; '
            + ("every step kept" if rec.stride == 1 else f"every {rec.stride}th step kept, plus the last")
            + f"; the state after the step, {E(program_kind)})</span>"
            f'<div class="qg-facts" style="margin-top:6px">'
            f"<div><b>where</b></div><div>block {s.block} {s.block_idx}, warp {s.warp}, PC {s.pc} "
            f"(PTX line {s.line})</div>"
            f"<div><b>instruction</b></div><div class='qg-mono'>{E(s.text)}</div>"
            f"<div><b>lanes</b></div><div class='qg-mono'>active {s.active:032b}<br>executed {s.executed:032b}"
            f"</div></div></div>")
    written = set(s.written)
    regs, preds, hidden = [], [], 0
    for r, (name, bits) in enumerate(zip(rec.reg_names, rec.reg_bits)):
        if s.undef[r].all() and r not in written:
            hidden += 1
            continue
        cells = []
        for l in lanes:
            v = s.value(r, l)
            cls = []
            if r in written and (s.executed >> l) & 1:
                cls.append("qg-w")
            elif prev is not None and prev.value(r, l) != v:
                cls.append("qg-c")
            if v is None:
                cls.append("qg-u")
            c = f' class="{" ".join(cls)}"' if cls else ""
            cells.append(f"<td{c}>{_reg_cell(v, bits)}</td>")
        row = f"<tr><th>{E(name)}</th>{''.join(cells)}</tr>"
        (preds if bits == 1 else regs).append(row)
    lane_head = "<tr><th>reg \\ lane</th>" + "".join(f"<th>{l}</th>" for l in lanes) + "</tr>"
    reg_html = (f'<div class="qg-box" data-registers="{len(regs)}"><b>Registers</b> '
                f'<span class="qg-small">warp {s.warp}, hex; <span style="background:#fde68a">written by this '
                f'step</span>, <span style="background:#d1e9ff">changed since the previous snapshot of this warp'
                f'</span>; {hidden} never-written registers hidden</span>'
                f'<div class="qg-scroll"><table class="qg-t">{lane_head}{"".join(regs)}</table></div></div>')
    pred_html = (f'<div class="qg-box" data-predicates="{len(preds)}"><b>Predicates</b>'
                 f'<div class="qg-scroll"><table class="qg-t">{lane_head}{"".join(preds)}</table></div></div>'
                 if preds else "")
    mem_parts = []
    prevm = rec.snapshots[i - 1].memory if i > 0 else None
    dtypes = dict(rec.buffers)
    for name, raw in s.memory.items():
        dt = np.dtype(dtypes.get(name, np.uint32))
        w = dt.itemsize
        count = len(raw) // w
        arr = np.frombuffer(raw[:count * w], dtype=dt)
        old = np.frombuffer(prevm[name][:count * w], dtype=dt) if prevm and name in prevm else None
        cells = []
        for j in range(count):
            changed = old is not None and arr[j:j + 1].tobytes() != old[j:j + 1].tobytes()
            cls = ' class="qg-c"' if changed else ""
            cells.append(f"<td{cls}>{E(fmt_elem(arr[j], dt))}</td>")
        rows = "".join(f"<tr><th>{k}</th>{''.join(cells[k:k + 8])}</tr>" for k in range(0, len(cells), 8))
        mem_parts.append(f'<div class="qg-box" data-memory="{E(name)}"><b>{E(name)}</b> '
                         f'<span class="qg-small">{dt} x {count} shown'
                         f'{"" if name != "shared" else " (this block)"}; '
                         f'<span style="background:#d1e9ff">changed since the previous snapshot</span></span>'
                         f'<div class="qg-scroll"><table class="qg-t">{rows}</table></div></div>')
    if s.tokens:
        toks = "\n".join(describe(t) for t in s.tokens)
        tok_html = (f'<div class="qg-box" data-tokens="{len(s.tokens)}"><b>Tokens this step emitted</b> '
                    f'<span class="qg-small">({rec.tokens_total:,} in the whole trace)</span><pre>{E(toks)}</pre></div>')
    elif rec.tokens_total is None:
        tok_html = ('<div class="qg-box" data-tokens="none"><b>Tokens</b> <span class="qg-small">this kernel does '
                    'not lower to machine code, so there is no token trace; the state is the PTX interpreter\'s'
                    '</span></div>')
    else:
        tok_html = '<div class="qg-box" data-tokens="0"><b>Tokens</b> <span class="qg-small">none</span></div>'
    return (head + f'<div class="qg-grid"><div style="flex:1 1 560px;min-width:0">{reg_html}{pred_html}</div>'
            f'<div style="flex:1 1 360px;min-width:0">{tok_html}{"".join(mem_parts)}</div></div>')
