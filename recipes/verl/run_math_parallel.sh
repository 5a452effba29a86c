#!/usr/bin/env bash
# SRPO on verl: GSM8K with 3 parallel solvers + an aggregator, Qwen2.5-3B or 7B-Instruct, one
# node of 8 x 80 GB GPUs. Step by step, memory and what is verified: docs/scale-out.md.
#
#   MODEL=/models/Qwen2.5-3B-Instruct GSM8K=/data/gsm8k.jsonl bash recipes/verl/run_math_parallel.sh
#   SIZE=7b MODEL=/models/Qwen2.5-7B-Instruct GSM8K=/data/gsm8k.jsonl bash recipes/verl/run_math_parallel.sh
#
# Extra arguments are verl (Hydra) overrides, e.g. trainer.logger='[console,wandb]'.
# Environment: verl 0.9.1 with its GPU stack (e.g. `pip install "verl[vllm]==0.9.1"`) and
# `pip install -e ".[verl,math]"` from this repository, in one Python environment.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${MODEL:?set MODEL to a local Qwen2.5-3B-Instruct or Qwen2.5-7B-Instruct folder}"
: "${GSM8K:?set GSM8K to a GSM8K jsonl: 1319 test lines first, then the 7473 train lines}"
SIZE=${SIZE:-3b}
NGPUS=${NGPUS:-8}
PY=${PYTHON:-python}
OUT=${OUT:-$PWD/runs/verl-math-parallel-$SIZE}
DATA=${DATA:-$OUT/data}
mkdir -p "$OUT" "$DATA"

# 1. data: srpo's GSM8K split as verl parquet (train = 7473 train problems, val = 1319 test)
if [ ! -f "$DATA/train.parquet" ]; then
    "$PY" "$HERE/prepare_data.py" "$HERE/workflows/math_parallel.yaml" --out "$DATA" "task.path=$GSM8K"
fi

# 2. the agent loop file: registers srpo_workflow with the srpo workflow config (absolute paths:
#    verl's agent-loop workers run in their own working directories)
cat > "$OUT/agent_loop.yaml" <<YAML
- name: srpo_workflow
  _target_: srpo.integrations.verl.agent_loop.SrpoWorkflowAgentLoop
  srpo_config: $HERE/workflows/math_parallel.yaml
  srpo_overrides: ["task.path=$GSM8K"]
  seed: 0
YAML

# 3. per-scale settings (memory estimates in docs/scale-out.md)
case "$SIZE" in
    3b) SCALE=(trainer.experiment_name=math_parallel_3b) ;;
    7b) SCALE=(trainer.experiment_name=math_parallel_7b
               actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
               actor_rollout_ref.rollout.tensor_model_parallel_size=2
               actor_rollout_ref.rollout.gpu_memory_utilization=0.45
               actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
               actor_rollout_ref.actor.optim.lr=5.0e-7) ;;
    *) echo "SIZE must be 3b or 7b, got $SIZE" >&2; exit 2 ;;
esac

# 4. train: verl's own entry point; the srpo plugin registers srpo / srpo_sync in every process
exec "$PY" -m verl.trainer.main_ppo --config-path "$HERE/config" --config-name srpo_math_parallel \
    data.train_files="$DATA/train.parquet" data.val_files="$DATA/val.parquet" \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$OUT/agent_loop.yaml" \
    trainer.n_gpus_per_node="$NGPUS" trainer.default_local_dir="$OUT/checkpoints" \
    "${SCALE[@]}" "$@"
