"""Held-out accuracy of a workflow: greedy, one rollout per task, per workflow and per agent.

The workflow's accuracy is the share of held-out tasks whose final answer is correct (the
episode's "correct" reward component for math, "em" = exact match for search). Each agent's
accuracy scores that agent's own outputs against the gold answer with the task's reward
function, so one sees whether, e.g., the solvers or the aggregator improved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from srpo.disk import atomic_write_text
from srpo.record.accuracy import Interval, wilson_interval
from srpo.rollout.runner import RolloutRunner
from srpo.types import Episode, Task
from srpo.workflows.base import Workflow, normalize_reward


@dataclass
class EvalResult:
    workflow: str
    correct: list[bool]  # [n] per held-out task, in task order (for paired comparisons)
    task_ids: list[str]  # [n] the held-out tasks, in the same order
    accuracy: Interval  # share correct with its 95% Wilson interval
    per_agent: dict[str, float]  # agent -> share of its outputs that are correct
    seconds: float
    # the most common final answer and the share of held-out tasks answered with it (None when
    # the task pack records no extracted answer): a policy that found a constant answer the
    # reward pays often enough (gcd -> "1") shows a share near 1 (docs/metrics.md)
    top_answer: str | None = None
    top_answer_share: float | None = None

    @property
    def n(self) -> int:
        return len(self.correct)

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        out = {
            f"{prefix}/accuracy": self.accuracy.estimate,
            f"{prefix}/ci_low": self.accuracy.low,
            f"{prefix}/ci_high": self.accuracy.high,
            f"{prefix}/n": float(self.n),
            f"{prefix}/seconds": self.seconds,
        }
        out.update({f"{prefix}/agent/{a}": v for a, v in sorted(self.per_agent.items())})
        if self.top_answer_share is not None:
            out[f"{prefix}/top_answer_share"] = self.top_answer_share
        return out

    def to_dict(self, **extra: Any) -> dict[str, Any]:
        """Everything a later paired comparison needs: per-item correctness keyed by task id."""
        a = self.accuracy
        return {
            **extra,
            "workflow": self.workflow,
            "n": self.n,
            "accuracy": a.estimate,
            "ci_low": a.low,
            "ci_high": a.high,
            "per_agent": dict(sorted(self.per_agent.items())),
            "top_answer": self.top_answer,
            "top_answer_share": self.top_answer_share,
            "seconds": self.seconds,
            "task_ids": list(self.task_ids),
            "correct": [bool(c) for c in self.correct],
        }

    def summary(self) -> str:
        a = self.accuracy
        line = f"{self.workflow}: {100 * a.estimate:.1f}% of {self.n} (95% CI {100 * a.low:.1f}-{100 * a.high:.1f})"
        if self.top_answer_share is not None and self.top_answer_share >= CONSTANT_ANSWER_SHARE:
            line += (
                f"; {100 * self.top_answer_share:.0f}% of the answers are {self.top_answer!r} "
                "(a near-constant answer: see what the policy learned)"
            )
        return line


CONSTANT_ANSWER_SHARE = 0.5  # summary() flags a most common answer given this often


def top_answer(episodes: Sequence[Episode]) -> tuple[str | None, float | None]:
    """(the most common final answer, the share of episodes that gave it) over the episodes'
    metadata["extracted_answer"] (what the reward read as the answer; None when it found
    none, which is never the top answer); (None, None) when no episode records that key."""
    if not episodes or not any("extracted_answer" in ep.metadata for ep in episodes):
        return None, None
    answers = [ep.metadata.get("extracted_answer") for ep in episodes]
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None, 0.0
    answer, count = counts.most_common(1)[0]
    return answer, count / len(episodes)


def greedy_runner(runner: RolloutRunner, seed: int,
                  temperatures: Mapping[str, float] | None = None) -> RolloutRunner:
    """The same agents, backend, reward and answer key with every agent decoding greedily, except
    the agents `temperatures` names, which sample at their temperature there (eval.temperatures);
    a fixed seed so workflow-level draws (mixed, routed fallbacks) are the same at every
    evaluation. No overlong penalty: held-out rewards are the task's alone."""
    temperatures = dict(temperatures or {})
    unknown = sorted(set(temperatures) - set(runner.agents))
    if unknown:
        raise ValueError(f"eval.temperatures names {unknown}, not agents of this run "
                         f"(its agents: {sorted(runner.agents)})")
    agents = {
        name: dataclasses.replace(spec, sampling=spec.sampling.replace(temperature=float(temperatures.get(name, 0.0))))
        for name, spec in runner.agents.items()
    }
    return RolloutRunner(agents, runner.backend, runner.reward_fn, seed=seed, answer_key=runner.answer_key)


def success_component_of(reward_fn: Any) -> str:
    """The reward component that says "solved" when none is given: the reward function's own
    `success_component` attribute (MathReward: "correct", SearchReward: "em"; a task pack
    states it too), else "reward", the component of a reward function returning a number."""
    name = getattr(reward_fn, "success_component", None)
    return name if isinstance(name, str) and name else "reward"


def _is_correct(components: dict[str, float], success: str) -> bool:
    """Solved = the success component is > 0 (components are weighted: give it a weight)."""
    if success not in components:
        raise ValueError(
            f"the success component {success!r} (eval.success_component) is not a "
            f"reward component (got {sorted(components)})"
        )
    return components[success] > 0


def evaluate(
    runner: RolloutRunner,
    workflow: Workflow,
    tasks: Sequence[Task],
    *,
    seed: int = 0,
    agent_scorer: Callable[[Task, str], bool] | None = None,
    success_component: str | None = None,
    batch_tasks: int | None = None,
    on_progress: Callable[[int, int, int], None] | None = None,
    temperatures: Mapping[str, float] | None = None,
) -> tuple[EvalResult, list[Episode]]:
    """Runs `workflow` greedily once on each task (the agents named in `temperatures` sample at
    theirs: greedy_runner). agent_scorer(task, text) -> correct; default:
    the reward component `success_component` > 0 (default: the reward function's own, see
    success_component_of). batch_tasks: tasks rolled out together (None: all at once); after each batch
    on_progress(tasks done, tasks, correct so far) is called (a progress bar's hook)."""
    if not tasks:
        raise ValueError("evaluate needs at least one held-out task")
    if batch_tasks is not None and batch_tasks < 1:
        raise ValueError(f"batch_tasks must be >= 1 (or None: all at once), got {batch_tasks}")
    start = time.perf_counter()
    success_component = success_component or success_component_of(runner.reward_fn)
    tasks = list(tasks)
    size = batch_tasks or len(tasks)
    # workflow-level draws depend on (seed, task), not on the batching; sampling agents' draws
    # (eval.temperatures) on the seed and the batching
    greedy = greedy_runner(runner, seed, temperatures)
    episodes: list[Episode] = []
    correct: list[bool] = []
    sampled = any(t > 0 for t in (temperatures or {}).values())
    with contextlib.ExitStack() as stack:
        if sampled:  # agents that sample draw from torch's generator: seeded here, restored after,
            stack.enter_context(torch.random.fork_rng(devices=[]))  # so training's draws are untouched
            torch.manual_seed(seed)
        for i in range(0, len(tasks), size):
            with torch.no_grad():  # generation only: no autograd graph (callers need not remember)
                done = greedy.run(tasks[i : i + size], workflow, group_size=1).episodes
            episodes += done
            correct += [_is_correct(ep.reward_components, success_component) for ep in done]
            if on_progress is not None:
                on_progress(len(episodes), len(tasks), sum(correct))

    def score(task: Task, text: str) -> bool:
        if agent_scorer is not None:
            return agent_scorer(task, text)
        # the same reading of a reward result as the runner's (a RewardResult, a mapping of
        # components or a plain number), so per-agent scores use the episodes' components
        value = normalize_reward(runner.reward_fn(task, text), what=f"the reward of task {task.task_id!r}")
        return _is_correct(value, success_component)

    hits: dict[str, list[bool]] = {}
    for ep in episodes:
        for aset in ep.transitions:
            for m in aset.members:
                hits.setdefault(m.agent, []).append(score(ep.task, m.text))
    per_agent = {a: sum(v) / len(v) for a, v in hits.items()}
    common, share = top_answer(episodes)
    result = EvalResult(
        workflow=workflow.name,
        correct=correct,
        task_ids=[t.task_id for t in tasks],
        accuracy=wilson_interval(sum(correct), len(correct)),
        per_agent=per_agent,
        seconds=time.perf_counter() - start,
        top_answer=common,
        top_answer_share=share,
    )
    return result, episodes


def write_eval_json(path: str | Path, result: EvalResult, **extra: Any) -> Path:
    """RESULT as JSON at PATH (write-temp + rename: a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps(result.to_dict(**extra), indent=1) + "\n")
