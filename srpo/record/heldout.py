"""The held-out evaluation of a training run, with what it leaves in the run directory:

    RUN/eval/<label>.json               per-item correctness (paired comparisons across runs)
    RUN/eval/<label>.episodes.jsonl.gz  its episodes (the report's before/after answers)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from srpo.record import episodes_log
from srpo.record.evaluate import EvalResult, evaluate, write_eval_json
from srpo.record.progress import RunProgress
from srpo.rollout.policies import PolicySet
from srpo.types import Task


def evaluate_run(runner, workflow, policies: PolicySet, tasks: Sequence[Task], *, label: str, step: int,
                 seed: int, success_component: str | None, batch_tasks: int | None, run_dir: Path,
                 progress: RunProgress, temperatures: dict[str, float] | None = None) -> EvalResult:
    """Greedy held-out accuracy of the policies now, its line on the console and its files."""
    for model in policies.models():
        model.eval()
    n = len(tasks)
    if not progress.enabled:  # minutes may pass: say what is running
        progress.line(f"evaluating ({label}): {n} held-out problems ...")
    with torch.no_grad(), progress.bar(f"eval {label}", total=n, transient=True) as bar:
        def on_progress(done: int, total: int, correct: int) -> None:
            bar.update(completed=done, info=f"accuracy so far {100 * correct / done:.1f}% ({correct}/{done})")
        result, episodes = evaluate(runner, workflow, tasks, seed=seed, success_component=success_component,
                                    batch_tasks=batch_tasks, on_progress=on_progress, temperatures=temperatures)
    progress.line(f"[eval {label}] {result.summary()}  per agent: "
                  + ", ".join(f"{a} {100 * v:.1f}%" for a, v in sorted(result.per_agent.items())))
    name = label.replace(' ', '-')
    write_eval_json(run_dir / "eval" / f"{name}.json", result, label=label, step=step)
    episodes_log.write_records(
        run_dir / "eval" / f"{name}.episodes.jsonl.gz",
        episodes_log.episode_records(episodes, step=step, prompt_text=episodes_log.prompt_decoder(policies)))
    return result


@dataclass
class Heldout:
    """What a run evaluates on and with: the runner and workflow of its rollouts, its policies,
    the held-out tasks, the evaluation's seed, what counts as solved, tasks rolled out together."""

    runner: Any
    workflow: Any
    policies: PolicySet
    tasks: Sequence[Task]
    seed: int
    success_component: str | None
    batch_tasks: int | None
    temperatures: dict[str, float] | None = None  # eval.temperatures: agents that sample

    def evaluate(self, label: str, step: int, run_dir: Path, progress: RunProgress) -> EvalResult:
        return evaluate_run(self.runner, self.workflow, self.policies, self.tasks, label=label, step=step,
                            seed=self.seed, success_component=self.success_component,
                            batch_tasks=self.batch_tasks, run_dir=run_dir, progress=progress,
                            temperatures=self.temperatures)
