"""Writes verl's RL dataset (train.parquet, val.parquet) from an srpo workflow config's tasks.

    python recipes/verl/prepare_data.py recipes/verl/workflows/math_parallel.yaml --out data/math \
        task.path=/data/gsm8k.jsonl

Each row carries the srpo Task as JSON in extra_info.srpo_task (the srpo_workflow agent loop reads
it back exactly), the question as a one-turn chat in `prompt`, the gold answer in
reward_model.ground_truth, and agent_name=srpo_workflow so verl routes the row to srpo's agent loop.
Train rows come from the task's train split, val rows from its held-out split (srpo's own
disjoint splits). Runs on CPU in the .venv-verl environment (scripts/setup_verl.sh) or any
environment with srpo[verl].
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from srpo.build import load_tasks
from srpo.config import load_config
from srpo.integrations.verl import AGENT_LOOP
from srpo.integrations.verl.episode import task_to_row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", help="an srpo workflow config (recipes/verl/workflows/*.yaml)")
    p.add_argument("overrides", nargs="*", help="srpo key=value overrides, e.g. task.path=...")
    p.add_argument("--out", required=True, help="output folder (train.parquet, val.parquet)")
    p.add_argument("--train", type=int, default=None, help="train rows (default: the whole split)")
    p.add_argument("--val", type=int, default=None, help="val rows (default: the whole split)")
    args = p.parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source = f"srpo/{cfg.task.name}/{cfg.task.source if cfg.task.name == 'math' else cfg.task.search.corpus}"
    for split, name, limit in (("train", "train", args.train), ("heldout", "val", args.val)):
        tasks = load_tasks(cfg.task, split=split, limit=limit)
        rows = [task_to_row(t, data_source=source, agent_name=AGENT_LOOP, index=i) for i, t in enumerate(tasks)]
        pd.DataFrame(rows).to_parquet(out / f"{name}.parquet", index=False)
        print(f"{out / f'{name}.parquet'}: {len(rows)} rows")


if __name__ == "__main__":
    main()
