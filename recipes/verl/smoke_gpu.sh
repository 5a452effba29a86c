#!/usr/bin/env bash
# GPU smoke test of SRPO on verl: ONE GPU, Qwen2.5-0.5B-Instruct, 3 training steps of the parallel
# math workflow on locally generated reasoning-gym arithmetic (nothing downloaded but the model, if
# MODEL is a hub id and the machine is online). Sized to finish in under 8 minutes on one H200;
# a hard 8-minute timeout makes a slower run fail. NOT yet run on a GPU (docs/scale-out.md).
#
#   MODEL=/models/Qwen2.5-0.5B-Instruct bash recipes/verl/smoke_gpu.sh
#
# Passes when verl exits 0 and the log shows the set-preserving layout and the srpo set loss ran.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${MODEL:?set MODEL to a local Qwen2.5-0.5B-Instruct folder}"
PY=${PYTHON:-python}
OUT=${OUT:-$(mktemp -d -t srpo-verl-smoke-XXXX)}
mkdir -p "$OUT"
start=$(date +%s)

"$PY" "$HERE/prepare_data.py" "$HERE/workflows/smoke_parallel.yaml" --out "$OUT/data" --train 64 --val 32
cat > "$OUT/agent_loop.yaml" <<YAML
- name: srpo_workflow
  _target_: srpo.integrations.verl.agent_loop.SrpoWorkflowAgentLoop
  srpo_config: $HERE/workflows/smoke_parallel.yaml
  seed: 0
YAML

set +e
timeout 480 "$PY" -m verl.trainer.main_ppo --config-path "$HERE/config" --config-name srpo_smoke \
    data.train_files="$OUT/data/train.parquet" data.val_files="$OUT/data/val.parquet" \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$OUT/agent_loop.yaml" \
    trainer.default_local_dir="$OUT/checkpoints" "$@" 2>&1 | tee "$OUT/train.log"
status=${PIPESTATUS[0]}
set -e
end=$(date +%s)
echo "smoke: verl exited $status after $((end - start)) s; log $OUT/train.log"
[ "$status" -eq 0 ] || exit "$status"
grep -q "srpo/layout/sets" "$OUT/train.log" || { echo "smoke: no set-preserving layout metrics in the log" >&2; exit 1; }
grep -q "srpo/policy/loss" "$OUT/train.log" || { echo "smoke: no srpo set-loss metrics in the log" >&2; exit 1; }
echo "smoke: passed"
