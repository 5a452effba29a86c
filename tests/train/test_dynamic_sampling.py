"""DAPO's dynamic sampling as a setting: more tasks are rolled out until the step holds
tasks_per_step informative groups (or the draw cap is hit); what was generated and dropped is
logged and counted in the rollout budget."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from srpo.batch import build_flat_batch
from srpo.config import load_config
from srpo.objective import prepare_step
from srpo.objective.methods import informative_sets
from srpo.train.trainer import Trainer
from srpo.train.update import skipped_sets

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")
QUIET = ["checkpoint.plots=false", "checkpoint.export=false", "checkpoint.tensorboard=false", "eval.size=0"]
# G = 2 on the random tiny model: about half of the tasks' groups are degenerate
SHAPE = ["group_size=2", "train.tasks_per_step=4", "train.steps=1"]


def _trainer(tmp_path: Path, *extra: str) -> Trainer:
    return Trainer(load_config(SMOKE, [f"output_dir={tmp_path}", *QUIET, *SHAPE, *extra]))


def _informative_task_count(trainer: Trainer, episodes) -> int:
    batch, _ = prepare_step(trainer.spec, build_flat_batch(episodes, trainer.pad_id), None)
    return len({batch.set_task[s] for s in informative_sets(batch).nonzero().flatten().tolist()})


def test_dynamic_sampling_keeps_only_informative_tasks_and_counts_what_it_dropped(tmp_path):
    plain = _trainer(tmp_path / "plain")
    first = plain.sampler.rollout(0)
    assert _informative_task_count(plain, first) < 4  # the step's own draw is not enough

    trainer = _trainer(tmp_path / "dynamic", "train.dynamic_sampling=true", "train.dynamic_sampling_max_draws=4")
    step = trainer.sampler.rollout_step(0)
    kept, generated, m = step.episodes, step.generated, step.metrics
    kept_tasks = list(dict.fromkeys(e.task.task_id for e in kept))
    assert len(kept_tasks) == m["rollout/dynamic/informative_tasks"] == 4
    assert _informative_task_count(trainer, kept) == 4  # every kept group is informative
    assert all(sum(e.task.task_id == t for e in kept) == 2 for t in kept_tasks)  # whole groups of G
    assert 2 <= m["rollout/dynamic/draws"] <= 4
    assert len(generated) == 8 * m["rollout/dynamic/draws"]  # 4 tasks x G 2 per draw
    # sequential: it stopped at the draw that filled the step; every informative task it saw counts
    assert m["rollout/dynamic/draws_needed"] == m["rollout/dynamic/draws"]
    assert m["rollout/dynamic/informative_judged"] == _informative_task_count(trainer, generated) >= 4
    assert m["rollout/dynamic/dropped_episodes"] == len(generated) - len(kept)
    kept_ids = {id(e) for e in kept}
    dropped_tokens = sum(mm.num_trained_tokens for e in generated if id(e) not in kept_ids
                         for s in e.transitions for mm in s.members)
    assert m["rollout/dynamic/dropped_tokens"] == dropped_tokens > 0
    tasks_drawn = [e.task.task_id for e in generated]
    assert len(set(tasks_drawn)) == len(tasks_drawn) // 2  # no task drawn twice in a step


def test_the_draw_cap_bounds_the_rollouts_and_the_run_logs_the_budget(tmp_path):
    trainer = _trainer(tmp_path, "train.dynamic_sampling=true", "train.dynamic_sampling_max_draws=1")
    step = trainer.sampler.rollout_step(0)
    kept, generated, m = step.episodes, step.generated, step.metrics
    assert m["rollout/dynamic/draws"] == 1 and len(generated) == 8
    assert m["rollout/dynamic/informative_tasks"] < 4  # the cap stopped it short
    assert m["rollout/dynamic/draws_needed"] == 1  # short: every draw made
    assert m["rollout/dynamic/informative_judged"] == m["rollout/dynamic/informative_tasks"]
    assert m["rollout/dynamic/dropped_episodes"] == 8 - len(kept)
    # a whole run: the logged rollout budget counts every generated episode, the dropped ones too
    run = _trainer(tmp_path / "run", "train.dynamic_sampling=true", "train.dynamic_sampling_max_draws=3")
    (row,) = run.train().history
    assert row["rollout/episodes"] == 8 * row["rollout/dynamic/draws"]
    # the smoke workflow has 2 sets an episode (3 solvers, then the aggregator)
    assert row["rollout/episodes"] - row["rollout/dynamic/dropped_episodes"] == row["sets/all/count"] / 2


def test_dynamic_sampling_is_refused_for_data_parallel_runs(tmp_path, monkeypatch):
    from srpo.train import trainer as trainer_module
    from srpo.train.distributed import DistContext

    monkeypatch.setattr(trainer_module, "init_distributed", lambda device: DistContext(0, 2, 0))
    with pytest.raises(ValueError, match="train.dynamic_sampling runs in one process only"):
        _trainer(tmp_path, "train.dynamic_sampling=true")


def test_drawing_at_once_rolls_out_every_draw_in_one_rollout_and_keeps_in_draw_order(tmp_path):
    trainer = _trainer(tmp_path, "train.dynamic_sampling=true", "train.dynamic_sampling_max_draws=3",
                       "train.dynamic_sampling_at_once=true")
    calls = []
    rollout = trainer.sampler.rollout
    trainer.sampler.rollout = lambda step, tasks=None, draw=0: calls.append(tasks) or rollout(step, tasks, draw)
    step = trainer.sampler.rollout_step(0)
    kept, generated, m = step.episodes, step.generated, step.metrics
    assert len(calls) == 1 and len(calls[0]) == 12  # 3 draws of 4 tasks, one rollout
    assert m["rollout/dynamic/draws"] == 3 and len(generated) == 24
    # the same tasks a sequential step draws, in the same order
    sequential = _trainer(tmp_path / "seq", "train.dynamic_sampling=true", "train.dynamic_sampling_max_draws=3")
    first = sequential.sampler.tasks_for_step(0)
    drawn = {t.task_id for t in first}
    second = sequential.sampler.draw_tasks(0, 1, drawn)
    third = sequential.sampler.draw_tasks(0, 2, drawn | {t.task_id for t in second})
    assert [t.task_id for t in calls[0]] == [t.task_id for t in first + second + third]
    # kept: the first informative tasks in draw order, whole groups, at most tasks_per_step
    batch, _ = prepare_step(trainer.spec, build_flat_batch(generated, trainer.pad_id), None)
    informative = {batch.set_task[s] for s in informative_sets(batch).nonzero().flatten().tolist()}
    expected = [t.task_id for t in calls[0] if t.task_id in informative][:4]
    assert list(dict.fromkeys(e.task.task_id for e in kept)) == expected
    assert m["rollout/dynamic/informative_tasks"] == len(expected) > 0
    assert m["rollout/dynamic/dropped_episodes"] == 24 - len(kept) == 24 - 2 * len(expected)
    # every informative task of the 3 draws, and the draws a sequential step would have made: up to
    # the one holding the 4th kept task (draw d holds calls[0][4d : 4d + 4]), or all 3 when short
    assert m["rollout/dynamic/informative_judged"] == len(informative)
    order = [t.task_id for t in calls[0]]
    needed = 1 + order.index(expected[-1]) // 4 if len(expected) == 4 else 3
    assert m["rollout/dynamic/draws_needed"] == needed
    # a whole run trains on it
    (row,) = _trainer(tmp_path / "run", "train.dynamic_sampling=true",
                      "train.dynamic_sampling_at_once=true").train().history
    assert row["rollout/episodes"] == 24


# ------------------------------------------------ short steps (train.dynamic_sampling_short_steps)

def test_short_step_scale_by_hand():
    from srpo.objective.aggregation import short_step_scale

    assert short_step_scale("full", 1, 6) == 1.0
    assert short_step_scale("scaled", 1, 6) == pytest.approx(1 / 6)
    assert short_step_scale("scaled", 6, 6) == 1.0
    assert short_step_scale("scaled", 0, 6) == 0.0
    with pytest.raises(ValueError, match="dynamic_sampling_short_steps 'tiny'"):
        short_step_scale("tiny", 1, 6)
    with pytest.raises(ValueError, match="tasks_per_step >= 1"):
        short_step_scale("scaled", 1, 0)


def test_short_steps_setting_is_checked(tmp_path):
    from srpo.config.schema import ConfigError

    with pytest.raises(ConfigError, match="train.dynamic_sampling_short_steps"):
        load_config(SMOKE, [f"output_dir={tmp_path}", "train.dynamic_sampling=true",
                            "train.dynamic_sampling_short_steps=half"])
    # the default is "scaled" (the measured recipe); without dynamic sampling it has nothing to
    # scale (every step keeps its tasks, the loss factor stays 1)
    cfg = load_config(SMOKE, [f"output_dir={tmp_path}"])
    assert not cfg.train.dynamic_sampling and cfg.train.dynamic_sampling_short_steps == "scaled"
    assert load_config(None, [f"output_dir={tmp_path}"]).train.dynamic_sampling_short_steps == "scaled"
    plain = Trainer(cfg.model_copy(update={"output_dir": str(tmp_path / "plain")}))
    assert plain.sampler.rollout_step(0).loss_scale == 1.0


def test_a_short_step_scaled_makes_the_update_its_share_of_the_plan(tmp_path):
    """With the draw cap at 1, the step keeps k < 4 informative tasks: "scaled" multiplies its loss
    by k / 4, so every gradient of the first optimizer step is k / 4 of the "full" one (the same
    rollout, the same weights before the step); after it, AdamW differs only through that factor."""
    import torch

    grads = {}
    for mode in ("full", "scaled"):
        trainer = _trainer(tmp_path / mode, "train.dynamic_sampling=true", "train.dynamic_sampling_max_draws=1",
                           f"train.dynamic_sampling_short_steps={mode}", "train.grad_clip=0")
        step = trainer.sampler.rollout_step(0)
        k = step.metrics["rollout/dynamic/informative_tasks"]
        assert 0 < k < 4
        assert step.metrics["rollout/dynamic/loss_scale"] == step.loss_scale == (1.0 if mode == "full" else k / 4)
        batch, _ = step.prepared or prepare_step(trainer.spec, build_flat_batch(step.episodes, trainer.pad_id), None)
        skipped = skipped_sets(batch, trainer.cfg.train).tolist()
        old, ref, _ = trainer.updater.old_and_ref_logprobs(batch, [s for s in range(batch.num_sets) if not skipped[s]])
        batch = dataclasses.replace(batch, old_logprobs=old, ref_logprobs=ref)
        captured: list[torch.Tensor] = []

        def keep_gradient(opt, args, kwargs, into=captured):  # the gradient the optimizer sees
            into.append(torch.cat([p.grad.flatten() for g in opt.param_groups for p in g["params"]
                                   if p.grad is not None]))

        for opt in trainer.updater.optimizers.values():
            opt.register_step_pre_hook(keep_gradient)
        trainer.update(batch, skipped=skipped, loss_scale=step.loss_scale)
        grads[mode] = (torch.cat(captured), step.loss_scale)
    full, scaled = grads["full"][0], grads["scaled"][0]
    assert full.abs().sum() > 0
    torch.testing.assert_close(scaled, full * grads["scaled"][1], rtol=1e-5, atol=1e-9)


def test_extra_draws_follow_the_at_once_draws_only_while_a_step_is_short(tmp_path):
    """At once 1 draw (4 tasks, G 2 on the random tiny model: short), then up to 3 more, one at a
    time: the step keeps drawing until 4 informative tasks are kept or the extra draws run out;
    the tasks are those the sequential mode draws, never one twice."""
    at_once = ["train.dynamic_sampling=true", "train.dynamic_sampling_at_once=true",
               "train.dynamic_sampling_max_draws=1"]
    short = _trainer(tmp_path / "short", *at_once).sampler.rollout_step(0)
    assert short.metrics["rollout/dynamic/draws"] == 1 and short.metrics["rollout/dynamic/informative_tasks"] < 4

    trainer = _trainer(tmp_path / "extra", *at_once, "train.dynamic_sampling_extra_draws=3")
    calls = []
    rollout = trainer.sampler.rollout
    trainer.sampler.rollout = lambda step, tasks=None, draw=0: calls.append((draw, tasks)) or rollout(step, tasks, draw)
    step = trainer.sampler.rollout_step(0)
    m = step.metrics
    n = int(m["rollout/dynamic/draws"])
    assert 2 <= n <= 4 and len(calls) == n and [d for d, _ in calls] == list(range(n))
    assert len(calls[0][1]) == 4 and all(len(tasks) == 4 for _, tasks in calls[1:])
    assert m["rollout/dynamic/informative_tasks"] == 4 or n == 4  # full, or the extra draws ran out
    assert len(step.generated) == 8 * n
    tasks_drawn = [e.task.task_id for e in step.generated]
    assert len(set(tasks_drawn)) == len(tasks_drawn) // 2  # no task drawn twice
    # the extra draws are the sequential mode's draws 1, 2, ...
    sequential = _trainer(tmp_path / "seq", "train.dynamic_sampling=true", "train.dynamic_sampling_max_draws=4")
    first = sequential.sampler.tasks_for_step(0)
    second = sequential.sampler.draw_tasks(0, 1, {t.task_id for t in first})
    assert [t.task_id for t in calls[1][1]] == [t.task_id for t in second]
    # a kept step's informative tasks stop at tasks_per_step
    assert len(dict.fromkeys(e.task.task_id for e in step.episodes)) == m["rollout/dynamic/informative_tasks"] <= 4


def test_extra_draws_are_checked(tmp_path):
    from srpo.config.schema import ConfigError

    with pytest.raises(ConfigError, match="dynamic_sampling_extra_draws needs"):
        load_config(SMOKE, [f"output_dir={tmp_path}", "train.dynamic_sampling=true",
                            "train.dynamic_sampling_extra_draws=2"])
    with pytest.raises(ConfigError, match="dynamic_sampling_extra_draws must be >= 0"):
        load_config(SMOKE, [f"output_dir={tmp_path}", "train.dynamic_sampling=true",
                            "train.dynamic_sampling_at_once=true", "train.dynamic_sampling_extra_draws=-1"])
