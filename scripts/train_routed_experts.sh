#!/usr/bin/env bash
# Stage 1 of `srpo train math/routed`: train the two experts the router chooses between.
#
#   bash scripts/train_routed_experts.sh [OUT]     # OUT defaults to runs/experts
#
# Each expert is the default job (a one-round debate of 3 over one LoRA adapter) with only the
# task changed, trained with per-debater GRPO credit, the setting that made the experts differ
# most by kind (results/bench/routed_kinds_2026-12-06): the number_sequence expert reached
# 16.8% on its kind against 1.6% for the aiw expert, the aiw expert 50.0% on its kind against
# 8.2%. The two runs go side by side with one thread each (about 7 minutes on a 2-core CPU).
# math/routed then starts its `sequence` and `aiw` policies from
#   OUT/number_sequence/export/debater/lora  and  OUT/aiw/export/debater/lora
# (peft adapter folders). With another OUT, point the routed job at it:
#   srpo train math/routed "policies.lora.init={sequence: OUT/number_sequence/export/debater/lora, aiw: OUT/aiw/export/debater/lora}"
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/experts}"
SRPO="${SRPO:-.venv/bin/srpo}"
CREDIT=(train.method=grpo workflow.params.credit=own train.unconsumed=singleton train.threads=1)
mkdir -p "$OUT"
"$SRPO" train "output_dir=$OUT/number_sequence" task.dataset=number_sequence \
    "task.difficulty={min_terms: 4, max_terms: 5, min_value: -10, max_value: 10, max_complexity: 1}" \
    "${CREDIT[@]}" > "$OUT/number_sequence.log" 2>&1 &
ns=$!
"$SRPO" train "output_dir=$OUT/aiw" task.dataset=aiw "task.difficulty={}" \
    "${CREDIT[@]}" > "$OUT/aiw.log" 2>&1 &
aiw=$!
status=0
wait "$ns" || { echo "number_sequence expert failed: see $OUT/number_sequence.log" >&2; status=1; }
wait "$aiw" || { echo "aiw expert failed: see $OUT/aiw.log" >&2; status=1; }
[ "$status" = 0 ] && echo "experts ready: $OUT/number_sequence/export/debater/lora, $OUT/aiw/export/debater/lora"
exit "$status"
