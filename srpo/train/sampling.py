"""What a step trains on: its tasks, their rollouts, and DAPO's dynamic sampling.

    tasks = tasks_for_step(pool, step, tasks_per_step=4, seed=0)   # a function of the step alone
    sampler.rollout_step(step) -> StepRollout(episodes, generated, metrics, prepared)

Tasks are a deterministic function of the step (resuming needs only the step number); every
rollout of a step (and every extra draw of it) has its own workflow seed.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

from srpo.batch import FlatBatch, build_flat_batch
from srpo.config import Config
from srpo.objective.aggregation import short_step_scale
from srpo.objective.methods import MethodSpec, informative_sets, prepare_step
from srpo.record.progress import RunProgress
from srpo.rollout.policies import PolicySet
from srpo.rollout.runner import rollout_metrics
from srpo.train.seeds import rollout_seed, task_order_seed
from srpo.types import Episode, Task


def tasks_for_step(pool: Sequence[Task], step: int, *, tasks_per_step: int, seed: int,
                   rank: int = 0, world: int = 1) -> list[Task]:
    """The step's tasks: consecutive slices of a per-epoch shuffle of the pool. With several
    processes each rank owns whole tasks (groups and sets never cross ranks)."""
    n = tasks_per_step
    order = list(range(len(pool)))
    epoch, offset = divmod(step * n, len(pool))
    random.Random(task_order_seed(seed, epoch)).shuffle(order)
    picked = [order[(offset + j) % len(pool)] for j in range(n)]
    if len(set(picked)) < len(picked):
        raise ValueError(f"train.tasks_per_step ({n}) exceeds task.train_size ({len(pool)})")
    return [pool[i] for i in picked[rank::world]]


def prepare(spec: MethodSpec, episodes: Sequence[Episode], pad_id: int,
            device: str | torch.device) -> tuple[FlatBatch, dict[str, float]]:
    """The rollout batch on the device with its advantages, and the advantage metrics."""
    return prepare_step(spec, build_flat_batch(episodes, pad_id).to(device), None)


@dataclass
class StepRollout:
    episodes: list[Episode]  # what the step trains on
    generated: list[Episode]  # everything generated (dynamic sampling's dropped draws too)
    metrics: dict[str, float]  # rollout/dynamic/* (empty without dynamic sampling)
    prepared: tuple[FlatBatch, dict[str, float]] | None = None  # `prepare` of episodes, if made
    # the factor on the step's loss (train.dynamic_sampling_short_steps; 1 without dynamic sampling)
    loss_scale: float = 1.0


class Sampler:
    """Rolls out a step's tasks with the runner, G episodes each."""

    def __init__(self, cfg: Config, runner, workflow, policies: PolicySet, train_tasks: Sequence[Task], *,
                 spec: MethodSpec, pad_id: int, rank: int, world: int, progress: RunProgress):
        self.cfg, self.runner, self.workflow, self.policies = cfg, runner, workflow, policies
        self.train_tasks, self.spec, self.pad_id = train_tasks, spec, pad_id
        self.rank, self.world, self.progress = rank, world, progress

    def tasks_for_step(self, step: int) -> list[Task]:
        return tasks_for_step(self.train_tasks, step, tasks_per_step=self.cfg.train.tasks_per_step,
                              seed=self.cfg.seed, rank=self.rank, world=self.world)

    def rollout(self, step: int, tasks: list[Task] | None = None, draw: int = 0) -> list[Episode]:
        """G episodes of each of the step's tasks (or of `tasks`, an extra draw of the step)."""
        # fresh workflow draws every step (and every extra draw of a step)
        self.runner.seed = rollout_seed(self.cfg.seed, step, draw)
        for model in self.policies.models():
            model.eval()
        with torch.no_grad():
            tasks = self.tasks_for_step(step) if tasks is None else tasks
            total = len(tasks) * self.cfg.group_size
            with self.progress.bar("rollout", total=total, transient=True, info="generating round 1") as bar:
                def on_round(r: int, done: int, n: int) -> None:
                    bar.update(completed=done, info=f"round {r} done, generating round {r + 1}"
                               if done < n else f"{r} rounds")
                return self.runner.run(tasks, self.workflow, group_size=self.cfg.group_size,
                                       on_round=on_round).episodes

    def draw_tasks(self, step: int, draw: int, drawn: Collection[str]) -> list[Task]:
        """Draw `draw` (>= 1) of a step's dynamic sampling: tasks_per_step fresh tasks, a
        deterministic function of the step, the draw and the tasks drawn before it."""
        rng = random.Random(f"{self.cfg.seed}/dynamic/{step}/{draw}")
        fresh = [task for task in self.train_tasks if task.task_id not in drawn]
        return rng.sample(fresh, min(self.cfg.train.tasks_per_step, len(fresh)))

    def rollout_step(self, step: int) -> StepRollout:
        """The step's episodes to train on, and every episode generated.

        Without dynamic sampling both are the step's rollout. With it (DAPO's dynamic sampling):
        a task is kept only if its group is informative (some advantage of the method is
        non-zero); more tasks are drawn (deterministically from the step and the draw, never one
        already drawn this step) and rolled out until tasks_per_step are kept or
        dynamic_sampling_max_draws rollouts were made. The rest is generated and dropped: it is
        counted in the rollout metrics (rollout/episodes, rollout/tokens/generated) and in
        rollout/dynamic/*. If no task of any draw is informative, the first draw is kept (its
        update is a zero step). When the kept episodes are one whole draw, the batch built to
        judge it is the step's (StepRollout.prepared).

        With dynamic_sampling_at_once every draw is rolled out in one rollout (one batch per
        policy and round) and judged after: the same tasks and the same choice in draw order, at
        the cost of the draws a sequential step would not have needed (docs/training.md). A step
        still short after them rolls out up to dynamic_sampling_extra_draws more draws, one at a
        time, as the sequential mode does, stopping when full.
        """
        t = self.cfg.train
        if not t.dynamic_sampling:
            first = self.rollout(step)
            return StepRollout(first, first, {})
        if t.dynamic_sampling_at_once:
            draws = [self.tasks_for_step(step)]
            draw_of = dict.fromkeys((task.task_id for task in draws[0]), 0)  # every task drawn -> its draw
            for d in range(1, t.dynamic_sampling_max_draws):
                extra = self.draw_tasks(step, d, draw_of.keys())
                if not extra:
                    break
                draw_of.update(dict.fromkeys((task.task_id for task in extra), d))
                draws.append(extra)
            generated = self.rollout(step, [task for tasks in draws for task in tasks])
            n_first = len(draws[0]) * self.cfg.group_size
            first = generated[:n_first]
            pending, n_draws = generated, len(draws)
            cap = n_draws + t.dynamic_sampling_extra_draws  # then one at a time while short
        else:
            first = self.rollout(step)
            generated = list(first)
            draw_of = dict.fromkeys((e.task.task_id for e in first), 0)  # every task drawn -> its draw
            pending, n_draws = first, 1
            cap = t.dynamic_sampling_max_draws
        kept_tasks, kept, judged_batches = [], [], []
        informative_judged = 0
        while True:
            kept_tasks, kept, prepared, informative = self._keep_informative(pending, kept_tasks, kept)
            informative_judged += informative
            judged_batches.append((pending, prepared))
            if len(kept_tasks) >= t.tasks_per_step or n_draws >= cap:
                break
            extra = self.draw_tasks(step, n_draws, draw_of.keys())
            if not extra:
                break
            draw_of.update(dict.fromkeys((task.task_id for task in extra), n_draws))
            pending = self.rollout(step, extra, draw=n_draws)
            generated += pending
            n_draws += 1
        kept = kept or first
        kept_ids = {id(e) for e in kept}
        dropped = [e for e in generated if id(e) not in kept_ids]
        tokens = rollout_metrics(dropped).get("tokens/generated", 0.0) if dropped else 0.0
        whole = [p for episodes, p in judged_batches if len(episodes) == len(kept)
                 and all(a is b for a, b in zip(episodes, kept))]
        scale = short_step_scale(t.dynamic_sampling_short_steps, len(kept_tasks), t.tasks_per_step)
        # the draws a sequential step would have rolled out: up to the one holding the last kept
        # task when the step filled, else every draw made (at once, the rest was generated anyway)
        filled = len(kept_tasks) >= t.tasks_per_step
        needed = 1 + max(draw_of[task_id] for task_id in kept_tasks) if filled else n_draws
        return StepRollout(kept, generated, {
            "rollout/dynamic/draws": float(n_draws),
            "rollout/dynamic/loss_scale": scale,
            "rollout/dynamic/informative_tasks": float(len(kept_tasks)),
            "rollout/dynamic/informative_judged": float(informative_judged),
            "rollout/dynamic/draws_needed": float(needed),
            "rollout/dynamic/dropped_episodes": float(len(dropped)),
            "rollout/dynamic/dropped_tokens": float(tokens),
        }, whole[0] if whole else None, scale)

    def _keep_informative(self, pending: list[Episode], kept_tasks: list[str], kept: list[Episode]
                          ) -> tuple[list[str], list[Episode], tuple[FlatBatch, dict[str, float]], int]:
        """Judge `pending` (one batch with the method's advantages: a group's are non-zero when
        its own rewards differ, whatever else the batch holds) and append its informative tasks,
        in order, to copies of kept_tasks / kept until tasks_per_step are kept. Returns them, the
        judged batch and how many of pending's tasks were informative (kept or not)."""
        prepared = prepare(self.spec, pending, self.pad_id, self.cfg.device)
        batch = prepared[0]
        informative = {batch.set_task[s] for s in informative_sets(batch).nonzero().flatten().tolist()}
        kept_tasks, kept = list(kept_tasks), list(kept)
        for task_id in dict.fromkeys(e.task.task_id for e in pending):
            if task_id in informative and len(kept_tasks) < self.cfg.train.tasks_per_step:
                kept_tasks.append(task_id)
                kept += [e for e in pending if e.task.task_id == task_id]
        return kept_tasks, kept, prepared, len(informative)
