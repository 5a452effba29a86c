#!/usr/bin/env bash
# GPU smoke run from a checkout where srpo and its dependencies are installed (e.g. .venv):
# scripts/gpu_smoke.py's checks (tiny model, random Qwen2.5-0.5B / 1.5B of real shapes in bf16
# with LoRA, multi-agent training steps, rollout tokens/s, peak GPU memory, `srpo eval`,
# `srpo report`), one line per check, results in $OUT/smoke.json.
#
#   bash scripts/gpu_smoke.sh                      # on a CUDA GPU
#   SMOKE_DEVICE=cpu bash scripts/gpu_smoke.sh     # the same checks at small sizes, on a CPU
#
# On a GPU machine that has none of srpo's extra dependencies (no registry there), use the
# offline bundle instead: scripts/gpu_bundle.py builds it, `bash <bundle>/install_and_smoke.sh`
# installs it and runs this smoke (docs/gpu.md, section 5).
#
# Environment: PYTHON (default .venv/bin/python if present, else python3), SMOKE_DEVICE (cuda),
# OUT or SMOKE_OUT (results; default a new temporary directory), SMOKE_BUDGET_S (540),
# SMOKE_BIG (auto | 1 | 0: the 1.5B check).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python
else PY=python3
fi
# srpo's own task packs are found without an install too (srpo/packs.py BUILTIN_PACKS)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" "$ROOT/scripts/gpu_smoke.py" "$@"
