#!/usr/bin/env bash
# install_and_smoke.sh of the offline GPU bundle (scripts/gpu_bundle.py copies this file into
# the bundle under that name): on the GPU machine, with no registry reachable,
#
#   bash <bundle>/install_and_smoke.sh
#
# 1. makes a virtual environment that sees the image's own packages (its CUDA torch,
#    transformers, peft, ...: a .pth file lists the image interpreter's site-packages folders,
#    which works whether that interpreter is a system Python or itself a venv, where
#    --system-site-packages would not see them), or reuses it; --without-pip: the image's own
#    pip runs in it (found through the same folders), so no ensurepip is needed;
# 2. installs the bundle's wheels into it with `pip install --no-index --find-links wheels`
#    (srpo from its wheel, so its entry points exist; pip takes from the bundle only what the
#    image lacks);
# 3. runs the smoke (gpu_smoke.py: one line per check) with results under $OUT (smoke.json,
#    smoke.log, the run directories); exit status 0 only when every check passed.
#
# Environment: PYTHON (the image's interpreter; default python3), SMOKE_VENV (default
# ${TMPDIR:-/tmp}/srpo-smoke-venv), OUT (default a new temporary directory), SMOKE_DEVICE (cuda),
# SMOKE_BUDGET_S, SMOKE_BIG (see gpu_smoke.py). Nothing is fetched: HF_HUB_OFFLINE=1.
set -euo pipefail
BUNDLE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
VENV=${SMOKE_VENV:-${TMPDIR:-/tmp}/srpo-smoke-venv}
export OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/srpo-gpu-smoke.XXXXXX")}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PIP_NO_INDEX=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
mkdir -p "$OUT"
start=$(date +%s)
echo "install_and_smoke: bundle $BUNDLE, python $("$PY" -c 'import sys; print(sys.version.split()[0])'), venv $VENV, results $OUT"

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv --without-pip "$VENV"
fi
VPY=$VENV/bin/python
# the image's package folders, after the venv's own (a .pth adds them at the end of sys.path)
"$PY" - "$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" <<'PTH'
import site, sys
from pathlib import Path
dirs = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else []),
        *[p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]]
dirs = [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]
(Path(sys.argv[1]) / "_srpo_image_packages.pth").write_text("".join(d + "\n" for d in dirs))
PTH
if ! "$VPY" -m pip --version >/dev/null 2>&1; then
    echo "install_and_smoke: no pip visible in $VENV (the image's python has none?)" >&2
    exit 2
fi
# the bundle's requirements, pinned; --no-index: from the bundle and the image only
if ! "$VPY" -m pip install -q --no-index --find-links "$BUNDLE/wheels" -r "$BUNDLE/requirements.txt" \
        >"$OUT/install.log" 2>&1; then
    echo "smoke: install      FAIL  see $OUT/install.log:" >&2
    tail -20 "$OUT/install.log" >&2
    exit 2
fi
"$VPY" -m pip list --format=freeze >"$OUT/pip-freeze.txt" 2>/dev/null || true
echo "smoke: install      ok  s=$(( $(date +%s) - start ))  $(grep -ci '^srpo==' "$OUT/pip-freeze.txt") srpo, $(wc -l <"$OUT/pip-freeze.txt") packages visible (pip-freeze.txt)"
# run outside any checkout, so that the installed srpo (with its entry points) is the one imported
cd "$OUT"
exec "$VPY" "$BUNDLE/gpu_smoke.py"
