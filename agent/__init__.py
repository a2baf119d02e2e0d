"""qwenGPU advanced mode: the language model writes the CUDA.

    python -m agent solve "TASK TEXT"     one task, streamed attempt by attempt
    python -m agent eval                  the task suite: first-try and within-N success rates
    python -m agent report                the rates recorded in results.db

Modules: tasks/ (the suite), prompts.py + ../prompts/ (versioned templates), capabilities.py (what
the machine runs, from the validator's table), model.py (the host checkpoint as a chat model),
extract.py, execute.py (nvcc -> validator -> run -> checker), backends.py, loop.py, record.py
(results.db), cli.py.
"""
