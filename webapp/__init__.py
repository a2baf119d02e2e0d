"""qwenGPU's web app (Gradio), started by the top-level app.py.

    limits.py     per-request budgets and input limits (tighter on a public Space)
    argspec.py    the kernel arguments as lines of text, to and from the case format
    examples.py   the suite's kernels as ready-to-run examples
    runner.py     compile -> validate -> reference run -> machine-code run -> verdict; errors explained
    advanced.py   advanced mode: the agent loop (agent/) streamed into the page; models loaded once
    results.py    success rates from results.db
    render.py     HTML of every panel (escaped)
    ui.py         the page and its event handlers
"""
