#!/usr/bin/env bash
# CI for the verl integration (srpo[verl]): its own environment, .venv-verl, because verl 0.9.x
# pins transformers<5.11 and tensordict<=0.10 (scripts/setup_verl.sh); then tests/verl_integration on CPU.
# The main suite skips tests/verl_integration (no verl in .venv); here only tests/verl_integration runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_verl.sh
.venv-verl/bin/python -m pytest -q tests/verl_integration
