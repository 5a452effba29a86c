#!/usr/bin/env bash
# Creates .venv-verl: srpo + verl 0.9.x on the CPU build of torch, for the verl integration's
# tests (tests/verl_integration) and for preparing recipe data. Separate from .venv on purpose: verl 0.9.1
# pins transformers<5.11 and tensordict<=0.10, while the core environment runs a newer
# transformers. Idempotent: a stamp keyed by pyproject.toml and this script skips work done.
#
# GPU clusters do not use this script: see docs/scale-out.md (verl's own CUDA images or
# `pip install "verl[vllm]==0.9.1"` first, then `pip install -e ".[verl]"`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${SRPO_VERL_VENV:-.venv-verl}
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
stamp="$VENV/.srpo-verl-setup-$(cat pyproject.toml scripts/setup_verl.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
    exit 0
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# CPU wheel of torch, pinned like scripts/setup.sh (verl's base requirements leave torch free;
# only its GPU extras pin torch 2.11.0).
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
# srpo core + verl (the extra pins verl 0.9.x, which brings transformers<5.11, tensordict<=0.10,
# ray) + pytest. math: the reward (math-verify) and the GSM8K/MATH loaders the recipes use.
"$VENV/bin/python" -m pip install -q -e ".[verl,math,dev]"
rm -f "$VENV"/.srpo-verl-setup-*
touch "$stamp"
