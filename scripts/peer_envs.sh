#!/usr/bin/env bash
# Builds the peers' own virtual environments for benchmarks/time_to_accuracy.py, beside the
# checkout (../trl-venv, ../comlrl-venv), each with pinned versions and the CPU build of torch.
# Peers never run in .venv: each keeps the dependencies its users would install.
#
#   bash scripts/peer_envs.sh            # both
#   bash scripts/peer_envs.sh trl        # one of them (trl | comlrl)
#
# Idempotent: a stamp keyed by this script's text skips an environment already built; a changed
# pin rebuilds it. The peer scripts (benchmarks/tta/*.py) score training answers with srpo's own
# MathReward, read from the checkout (not installed), so each env also gets math-verify, pinned to
# .venv's version. `pip freeze` of each env is written to <env>/peer-freeze.txt: what the
# benchmark records as the peer's versions.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
TORCH="torch==2.13.0"   # the CPU wheel (an unpinned torch pulls a multi-GB CUDA build)
MATH="math-verify==0.9.0"
# TRL: the release bench_vs_trl.py was measured with, on .venv's transformers / peft / accelerate
TRL_PINS=("trl==1.16.0" "transformers==5.25.0" "peft==0.21.2" "accelerate==1.16.0" "datasets==5.2.0")
# CoMLRL: the release bench_vs_comlrl.py was measured with; peft for its agents' LoRA adapters
COMLRL_PINS=("comlrl==1.4.3" "peft==0.21.2")

build() {  # build NAME PIN...: ../NAME-venv with torch, math-verify and the pins
    local name=$1
    shift
    local venv="../${name}-venv"
    local stamp
    stamp="$venv/.peer-env-$(sha256sum "$0" | cut -c1-16)"
    if [ -f "$stamp" ]; then
        echo "peer_envs.sh: $venv is up to date"
        return 0
    fi
    [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q "$TORCH"
    # torch pinned again so that no pin below can move it to another build
    "$venv/bin/python" -m pip install -q "$TORCH" "$MATH" "$@"
    "$venv/bin/python" -m pip freeze > "$venv/peer-freeze.txt"
    rm -f "$venv"/.peer-env-*
    touch "$stamp"
    echo "peer_envs.sh: built $venv"
}

which=${1:-all}
case "$which" in
    trl) build trl "${TRL_PINS[@]}" ;;
    comlrl) build comlrl "${COMLRL_PINS[@]}" ;;
    all) build trl "${TRL_PINS[@]}"; build comlrl "${COMLRL_PINS[@]}" ;;
    *) echo "usage: $0 [trl|comlrl|all]" >&2; exit 2 ;;
esac
