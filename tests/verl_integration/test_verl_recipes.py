"""The verl recipes compose with verl 0.9.1's own config, pass verl's config validation and the
srpo_sync checks, and their data preparation writes rows the agent loop reads back exactly."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

# "verl.trainer", not "verl": see test_verl_plugin.py
pytest.importorskip("verl.trainer")

import pandas as pd
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

from srpo.integrations.verl.episode import setup_from_config, task_from_row
from srpo.integrations.verl.trainer import check_srpo_trainer_config

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "verl"


@pytest.mark.parametrize("name,gpus,largest_set", [
    ("srpo_math_parallel", 8, 3), ("srpo_search_parallel", 8, 3), ("srpo_smoke", 1, 3),
])
def test_recipe_configs_compose_and_validate(name, gpus, largest_set):
    with initialize_config_dir(config_dir=str(RECIPES / "config"), version_base=None):
        cfg = compose(name, overrides=["actor_rollout_ref.rollout.agent.agent_loop_config_path=/abs/agent_loop.yaml"])
    check_srpo_trainer_config(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert cfg.trainer.use_v1 and cfg.trainer.v1.trainer_mode == "srpo_sync"
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "srpo_workflow"
    assert cfg.trainer.n_gpus_per_node == gpus
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu >= largest_set


def test_recipe_workflow_configs_build():
    math = setup_from_config(str(RECIPES / "workflows" / "math_parallel.yaml"))
    assert math.workflow.name == "parallel" and math.workflow.k == 3
    smoke = setup_from_config(str(RECIPES / "workflows" / "smoke_parallel.yaml"))
    assert smoke.workflow.k == 3 and set(smoke.agents) >= {"solver", "aggregator"}


def test_reward_settings_verl_does_not_apply_are_named():
    """The default job sets train.cut_answers: none, which the verl agent loop does not apply."""
    with pytest.warns(UserWarning, match=r"train.cut_answers='none' not applied under verl"):
        setup_from_config(str(RECIPES / "workflows" / "smoke_parallel.yaml"), ["train.cut_answers=none"])
    with pytest.warns(UserWarning, match=r"train.overlong_penalty=0.5 not applied under verl"):
        setup_from_config(str(RECIPES / "workflows" / "smoke_parallel.yaml"), ["train.overlong_penalty=0.5"])
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setup_from_config(str(RECIPES / "workflows" / "smoke_parallel.yaml"))


def test_prepare_data_rows_round_trip(tmp_path):
    cmd = [sys.executable, str(RECIPES / "prepare_data.py"), str(RECIPES / "workflows" / "smoke_parallel.yaml"),
           "--out", str(tmp_path), "--train", "6", "--val", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    train = pd.read_parquet(tmp_path / "train.parquet")
    val = pd.read_parquet(tmp_path / "val.parquet")
    assert len(train) == 6 and len(val) == 3
    assert set(train["agent_name"]) == {"srpo_workflow"}
    from srpo.build import load_tasks
    from srpo.config import load_config
    from srpo.tasks.math import MathReward

    cfg = load_config(str(RECIPES / "workflows" / "smoke_parallel.yaml"))
    tasks = load_tasks(cfg.task, split="train", limit=6)
    for (_, row), task in zip(train.iterrows(), tasks):
        back = task_from_row(row.to_dict())  # exact, up to JSON (tuples in metadata become lists)
        assert back == dataclasses.replace(task, metadata=json.loads(json.dumps(task.metadata)))
        assert MathReward()(back, f"\\boxed{{{task.answer}}}").total == 1.0  # still scores
        assert row["prompt"][0]["content"] == task.prompt
        assert row["reward_model"]["ground_truth"] == task.answer
    # held-out rows are not train rows (srpo's disjoint splits)
    assert not set(val["prompt"].map(lambda p: p[0]["content"])) & {t.prompt for t in tasks}
