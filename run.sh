#!/usr/bin/env bash
# qwenGPU's one entry point for newcomers and CI.
#   ./run.sh          install (once) into .venv, then run the demo
#   ./run.sh test     install (once) into .venv, then run the test suite
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
case "${1:-demo}" in
    test) shift; exec .venv/bin/python -m pytest -q "$@" ;;
    demo) shift || true; exec .venv/bin/python -m gpu_layers demo "$@" ;;
    *) exec .venv/bin/python -m gpu_layers "$@" ;;
esac
