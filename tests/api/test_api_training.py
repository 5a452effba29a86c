"""SRPOTrainer end to end on the tiny model: a datasets.Dataset with TRL-style rewards, a model
object (trained in place, fully or with LoRA), a custom workflow class (docs/python-api.md's
example, verbatim), a reward that fails, resuming, and the same run as `srpo train`'s."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from srpo import SRPOConfig, SRPOTrainer
from srpo.config import load_config
from srpo.models import build_tiny_model
from srpo.train.metrics import run_dependent
from srpo.train.trainer import Trainer
from srpo.workflows.base import RewardFailure

# SRPOTrainer registers workflows process-wide: undo this file's registrations (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("workflows_registered_here_stay_here")


DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"
QUIET = {"checkpoint.plots": False, "checkpoint.tensorboard": False, "checkpoint.report": False}
ROWS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1), "level": i % 3} for i in range(8)]
HELDOUT = [{"prompt": f"What is {i} + 2?", "answer": str(i + 2), "level": 0} for i in range(2)]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def varied(completion: str, task: dict) -> float:
    """Rewards that vary across a random model's outputs: non-zero advantages, weights move."""
    return sum(map(ord, completion)) % 7 / 7


def args(tmp_path: Path, **fields) -> SRPOConfig:
    fields.setdefault("overrides", {**QUIET, "checkpoint.export": False})
    return SRPOConfig(steps=1, group_size=2, tasks_per_step=2, max_new_tokens=8,
                      output_dir=str(tmp_path / "run"), **fields)


def train_rows(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r]


def test_a_datasets_dataset_with_trl_style_and_weighted_rewards_trains(tmp_path):
    datasets = pytest.importorskip("datasets")

    def trl_length(prompts, completions, level, **kwargs):  # TRL's batched form, a column by name
        return [len(c) / 10 + lv for c, lv in zip(completions, level)]

    result = SRPOTrainer(
        model="tiny", workflow="parallel", workflow_params={"k": 2},
        reward_funcs=[varied, trl_length], train_dataset=datasets.Dataset.from_list(ROWS),
        eval_dataset=datasets.Dataset.from_list(HELDOUT),
        args=args(tmp_path, reward_weights=[1.0, 0.5]),
    ).train()
    (row,) = train_rows(result.run_dir)
    assert {"rollout/reward/varied", "rollout/reward/trl_length"} <= set(row)
    assert row["rollout/reward/mean"] == pytest.approx(row["rollout/reward/varied"]
                                                       + row["rollout/reward/trl_length"])
    assert row["sets/k2/count"] > 0 and row["sets/k1/count"] > 0  # 2 solvers, then the aggregator
    assert result.before.n == result.after.n == 2
    saved = json.loads((result.run_dir / "eval" / "after.json").read_text())
    assert saved["task_ids"] == ["eval-0", "eval-1"]


@pytest.mark.parametrize("lora", [False, True])
def test_a_pretrained_model_object_is_trained_in_place(tmp_path, lora):
    model, tok = build_tiny_model(seed=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = SRPOTrainer(model=model, processing_class=tok, workflow="single",
                          reward_funcs=varied, train_dataset=ROWS,
                          args=args(tmp_path, lora=lora, lr=1e-2, overrides=QUIET))
    result = trainer.train()
    assert result.steps_done == 1 and math.isfinite(result.history[0]["loss"])
    assert trainer.config.policies.kind == ("lora" if lora else "shared")
    after = model.state_dict()
    if lora:  # peft wrapped the given model: its base is frozen, its adapter moved
        adapters = [k for k in after if "lora_B" in k]
        assert adapters and any(float(after[k].abs().sum()) > 0 for k in adapters)
        assert (result.run_dir / "export" / "shared" / "adapter_config.json").is_file() or \
            (result.run_dir / "export" / "shared" / "config.json").is_file()
    else:
        assert any(not torch.equal(before[k], after[k]) for k in before)
        assert (result.run_dir / "export" / "shared" / "config.json").is_file()


def doc_example() -> str:
    text = DOC.read_text()
    block = text.split("<!-- python-api-custom-workflow:start -->", 1)[1].split(
        "<!-- python-api-custom-workflow:end -->", 1)[0]
    return re.fullmatch(r"\s*```python\n(.*?)```\s*", block, re.S).group(1)


def test_the_docs_custom_workflow_example_runs_verbatim(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "python_api_doc"}
    exec(compile(doc_example(), str(DOC), "exec"), namespace)
    result, trainer = namespace["result"], namespace["trainer"]
    assert trainer.config.workflow.name == "propose_and_check"
    assert trainer.config.workflow.params == {"hint": "Reply with the number only."}
    assert trainer.config.agents["proposer"].system_prompt is None  # a plain role
    (row,) = list(train_rows(tmp_path / result.run_dir))[:1]
    assert row["sets/k1/count"] > 0
    assert result.steps_done == 2 and result.before.n == result.after.n == 4


def test_a_reward_that_raises_stops_the_run_with_srpos_error(tmp_path):
    def broken(completion, task):
        raise KeyError("expected")

    trainer = SRPOTrainer(model="tiny", workflow="parallel", workflow_params={"k": 2},
                          reward_funcs=broken, train_dataset=ROWS, args=args(tmp_path))
    with pytest.raises(RewardFailure, match=r"reward failed for task 'train-\d' \(answer of agent "
                                            r"'aggregator', workflow 'parallel'\): RewardFunctionError: "
                                            r"reward_funcs \('broken'\) raised KeyError: 'expected'"):
        trainer.train()


def test_a_nan_reward_stops_the_run_with_srpos_error(tmp_path):
    trainer = SRPOTrainer(model="tiny", reward_funcs=lambda c, task: math.nan, train_dataset=ROWS,
                          eval_dataset=HELDOUT, args=args(tmp_path))
    with pytest.raises(RewardFailure, match=r"reward failed for task 'eval-0' \(answer of agent "
                                            r"'solver', workflow 'single'\): RewardFunctionError: "
                                            r"reward_funcs \('reward'\) returned nan"):
        trainer.train()  # the evaluation before training is the first rollout


def test_a_python_run_resumes(tmp_path):
    def make(steps: int, **overrides) -> SRPOTrainer:
        return SRPOTrainer(model="tiny", workflow="single", reward_funcs=varied,
                           train_dataset=ROWS,
                           args=SRPOConfig(steps=steps, group_size=2, tasks_per_step=2,
                                           max_new_tokens=8, output_dir=str(tmp_path / "run"),
                                           overrides={**QUIET, "checkpoint.export": False, **overrides}))

    make(1).train()
    result = make(2, resume=True).train()
    assert result.steps_done == 2
    assert [r["step"] for r in train_rows(result.run_dir)] == [1, 2]


def test_the_api_runs_the_same_as_srpo_train_on_the_same_config(tmp_path):
    quiet = [f"{k}={str(v).lower()}" for k, v in QUIET.items()] + ["checkpoint.export=false"]
    cfg = load_config("smoke", ["train.steps=1", "eval.size=2", f"output_dir={tmp_path / 'cli'}", *quiet])
    by_config = Trainer(cfg).train()
    by_api = SRPOTrainer(args=SRPOConfig(config="smoke", steps=1, eval_size=2, output_dir=str(tmp_path / "api"),
                                         overrides={**QUIET, "checkpoint.export": False})).train()

    def numbers(run: Path) -> list[dict]:
        return [run_dependent(r) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]

    assert numbers(by_api.run_dir) == numbers(by_config.run_dir)
    assert by_api.after.correct == by_config.after.correct
