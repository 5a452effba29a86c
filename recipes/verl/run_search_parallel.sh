#!/usr/bin/env bash
# SRPO on verl: multi-turn search, 3 query writers whose queries one retrieval step runs together
# + an answerer, over your corpus and HotpotQA-format questions; Qwen2.5-3B or 7B-Instruct, one
# node of 8 x 80 GB GPUs. Step by step: docs/scale-out.md.
#
#   MODEL=/models/Qwen2.5-3B-Instruct CORPUS=/data/corpus.jsonl QUESTIONS=/data/hotpotqa.jsonl \
#       bash recipes/verl/run_search_parallel.sh
#   (INDEX=/data/index: a prebuilt `srpo index CORPUS --out INDEX --bm25`; SIZE=7b for 7B)
#
# Environment: verl 0.9.1 with its GPU stack and `pip install -e ".[verl,search]"`.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${MODEL:?set MODEL to a local Qwen2.5-3B-Instruct or Qwen2.5-7B-Instruct folder}"
: "${CORPUS:?set CORPUS to a corpus jsonl ({id, title, text} a line)}"
: "${QUESTIONS:?set QUESTIONS to a HotpotQA-format question file}"
SIZE=${SIZE:-3b}
NGPUS=${NGPUS:-8}
PY=${PYTHON:-python}
OUT=${OUT:-$PWD/runs/verl-search-parallel-$SIZE}
DATA=${DATA:-$OUT/data}
mkdir -p "$OUT" "$DATA"
SRPO_OVERRIDES=("task.search.corpus_path=$CORPUS" "task.search.questions_path=$QUESTIONS")
if [ -n "${INDEX:-}" ]; then
    SRPO_OVERRIDES+=("task.search.index_dir=$INDEX")
else
    SRPO_OVERRIDES+=("task.search.index_dir=null")  # BM25 built in memory by each agent-loop worker
fi

# 1. data: the questions (answers and aliases travel in extra_info.srpo_task)
if [ ! -f "$DATA/train.parquet" ]; then
    "$PY" "$HERE/prepare_data.py" "$HERE/workflows/search_parallel.yaml" --out "$DATA" "${SRPO_OVERRIDES[@]}"
fi

# 2. the agent loop file (the retriever is built once per agent-loop worker process)
{
    echo "- name: srpo_workflow"
    echo "  _target_: srpo.integrations.verl.agent_loop.SrpoWorkflowAgentLoop"
    echo "  srpo_config: $HERE/workflows/search_parallel.yaml"
    echo "  srpo_overrides:"
    for o in "${SRPO_OVERRIDES[@]}"; do echo "    - \"$o\""; done
    echo "  seed: 0"
} > "$OUT/agent_loop.yaml"

case "$SIZE" in
    3b) SCALE=(trainer.experiment_name=search_parallel_3b) ;;
    7b) SCALE=(trainer.experiment_name=search_parallel_7b
               actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
               actor_rollout_ref.rollout.tensor_model_parallel_size=2
               actor_rollout_ref.rollout.gpu_memory_utilization=0.45
               actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
               actor_rollout_ref.actor.optim.lr=5.0e-7) ;;
    *) echo "SIZE must be 3b or 7b, got $SIZE" >&2; exit 2 ;;
esac

exec "$PY" -m verl.trainer.main_ppo --config-path "$HERE/config" --config-name srpo_search_parallel \
    data.train_files="$DATA/train.parquet" data.val_files="$DATA/val.parquet" \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$OUT/agent_loop.yaml" \
    trainer.n_gpus_per_node="$NGPUS" trainer.default_local_dir="$OUT/checkpoints" \
    "${SCALE[@]}" "$@"
