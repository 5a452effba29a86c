"""How much learning signal the default job's recipe would find on other reasoning-gym tasks,
before any training: the untrained policy's greedy held-out accuracy, and what its sampled
rollouts (the training's sampling settings) score, per answer and per vote.

For each task: the default job's config with task.dataset=TASK and task.difficulty from
--difficulty (default: the dataset's own), then
  greedy:  accuracy of the debate's vote on --heldout held-out problems (as `srpo train` evaluates);
  sampled: --tasks training problems x group_size rollouts at the job's sampling settings:
           answer_success  share of the debaters' answers that are right (each scored alone),
           vote_success    share of episodes whose vote is right (the episode's reward),
           informative_vote / informative_answers  groups whose rewards differ, under the
               vote's credit and under credit "debaters" (the mean of a round's answers).

    .venv/bin/python benchmarks/screen_tasks.py letter_counting count_bits --out screen.json
    .venv/bin/python benchmarks/screen_tasks.py chain_sum --difficulty chain_sum='{min_terms: 3, max_terms: 3}' \
        --set sampling.temperature=0.7 --set train.threads=1

A screen, not a benchmark of speed: run it beside other jobs with train.threads=1 if need be.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from provenance import provenance

from srpo.build import build_rollout, load_tasks
from srpo.config.loading import load_config
from srpo.config.presets import PRESETS_DIR
from srpo.record.evaluate import evaluate
from srpo.train.seeds import seed_everything
from srpo.workflows.base import normalize_reward


def screen(task: str, difficulty: str, overrides: list[str], heldout: int, n_tasks: int) -> dict:
    cfg = load_config(PRESETS_DIR / "default.yaml",
                      [f"task.dataset={task}", f"task.difficulty={difficulty}", *overrides])
    torch.set_num_threads(cfg.train.threads)
    seed_everything(cfg.seed)
    runner, workflow = build_rollout(cfg)
    held = load_tasks(cfg.task, split="heldout", limit=heldout)
    greedy, _ = evaluate(runner, workflow, held, seed=cfg.seed)
    train = load_tasks(cfg.task, split="train", limit=n_tasks)
    with torch.no_grad():
        episodes = runner.run(train, workflow, group_size=cfg.group_size).episodes
    score = runner.reward_fn
    answers, votes, groups = [], [], {}
    for ep in episodes:
        members = [m for s in ep.transitions for m in s.members]
        own = [sum(normalize_reward(score(ep.task, m.text), what="the reward").values())
               for m in members]
        answers += [a > 0 for a in own]
        votes.append(ep.reward)
        groups.setdefault(ep.task.task_id, []).append((ep.reward, statistics.fmean(own)))
    return {
        "task": task,
        "difficulty": difficulty,
        "greedy_heldout": {"n": len(held), "accuracy": greedy.accuracy.estimate},
        "sampled": {
            "tasks": len(train), "group_size": cfg.group_size,
            "temperature": cfg.sampling.temperature,
            "answer_success": sum(answers) / len(answers),
            "vote_success": sum(v > 0 for v in votes) / len(votes),
            "informative_vote": sum(len({v for v, _ in g}) > 1 for g in groups.values()),
            "informative_answers": sum(len({a for _, a in g}) > 1 for g in groups.values()),
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tasks", nargs="+", help="reasoning-gym dataset names")
    p.add_argument("--difficulty", action="append", default=[], metavar="TASK=YAML",
                   help="task.difficulty for one task (default {}: the dataset's own)")
    p.add_argument("--heldout", type=int, default=128)
    p.add_argument("--train-tasks", type=int, default=16)
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="an override applied to every task (e.g. train.threads=1); repeatable")
    args = p.parse_args()
    difficulty = dict(d.split("=", 1) for d in args.difficulty)
    rows = []
    for task in args.tasks:
        code = provenance()  # the code this task's screen ran, taken when it starts
        start = time.perf_counter()
        try:
            row = screen(task, difficulty.get(task, "{}"), args.overrides, args.heldout,
                         args.train_tasks)
        except ValueError as e:  # e.g. a question space too small: recorded, the screen goes on
            row = {"task": task, "error": str(e)}
        row["seconds"] = round(time.perf_counter() - start, 1)
        row.update(code)
        print(json.dumps(row), flush=True)
        rows.append(row)
        if args.out:  # after every task: a killed screen keeps what it measured
            Path(args.out).write_text(json.dumps({"overrides": args.overrides, "written_by": provenance(),
                                                  "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
