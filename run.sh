#!/usr/bin/env bash
# qwenGPU's one entry point for newcomers and CI.
#   ./run.sh          install (once) into .venv, then start the web app on the tiny host
#                     (prints the local URL, http://127.0.0.1:7860; --port N / --host ADDR pass through)
#   ./run.sh test     install (once) into .venv, then run the test suite (2 worker processes)
#   ./run.sh demo     the command-line demo (one kernel end to end)
#   ./run.sh CMD ...  any other `python -m gpu_layers` command (ptx, run, kl)
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ] || ! cmp -s requirements.txt .venv/.requirements.installed; then
    echo "[qwenGPU] installing into .venv (first run takes a few minutes) ..." >&2
    "$PY" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -r requirements.txt
    cp requirements.txt .venv/.requirements.installed
fi
case "${1:-app}" in
    app) shift || true; echo "[qwenGPU] starting the web app (Ctrl+C stops it) ..." >&2
         exec .venv/bin/python app.py "$@" ;;
    --port|--host) exec .venv/bin/python app.py "$@" ;;
    test) shift; exec .venv/bin/python -m pytest -q -n "${QWENGPU_TEST_WORKERS:-2}" --dist loadfile "$@" ;;
    demo) shift || true; exec .venv/bin/python -m gpu_layers demo "$@" ;;
    *) exec .venv/bin/python -m gpu_layers "$@" ;;
esac
