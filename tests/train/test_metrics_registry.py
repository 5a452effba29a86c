"""Every key the trainer logs is declared once with its reduction (srpo.train.metrics) and
documented in docs/metrics.md; micro-batches and optimizer steps combine by that reduction."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from srpo.config import load_config
from srpo.train.metrics import (
    METRICS,
    REDUCTIONS,
    UndeclaredMetric,
    combine,
    declared,
    template_regex,
    undeclared,
)
from srpo.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
PRESETS = REPO / "srpo" / "presets"
DOC = REPO / "docs" / "metrics.md"
QUIET = ["checkpoint.plots=false", "checkpoint.export=false", "checkpoint.tensorboard=false",
         "checkpoint.report=false", "train.threads=1"]
# the runs whose logs hold every key: each option that adds keys, and a testbed (per-policy keys
# of four separate policies, sets of 4)
RUNS = {
    "smoke": ["smoke", "train.steps=1", "eval.size=4"],
    "off_policy": ["smoke", "train.steps=1", "eval.size=0", "train.epochs=2", "train.minibatches=2"],
    "kl_entropy": ["smoke", "train.steps=1", "eval.size=0", "train.kl_beta=0.05", "train.entropy_alpha=0.01"],
    "tis": ["smoke", "train.steps=1", "eval.size=0", "train.tis_cap=2.0", "model.dtype=bfloat16"],
    "dynamic": ["smoke", "eval.size=4", "eval.every=1", "train.steps=2",
                "train.dynamic_sampling=true"],
    "testbed": ["testbed/k4", "train.steps=1", "train.epochs=2"],
}


def _documented_templates() -> list[str]:
    """Every `key` written in code spans on docs/metrics.md (with {name} placeholders)."""
    return sorted(set(re.findall(r"`([a-z_]+(?:/[^`\s]+)?)`", DOC.read_text())))


@pytest.fixture(scope="module")
def logged_keys(tmp_path_factory) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for name, (preset, *overrides) in RUNS.items():
        run = tmp_path_factory.mktemp(name)
        path = PRESETS / f"{preset}.yaml"
        Trainer(load_config(path, [*overrides, *QUIET, f"output_dir={run}"])).train()
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        keys[name] = {k for row in rows for k in row if k != "step"}
    return keys


def test_every_logged_key_is_declared_and_documented(logged_keys):
    every = set().union(*logged_keys.values())
    # the runs exercise what they are for (else the check below would pass on missing keys)
    assert {"approx_kl", "mismatch/kl", "rollout/tokens/generated", "grad_norm/shared"} <= logged_keys["smoke"]
    assert {"eval/accuracy", "eval/agent/solver"} <= logged_keys["smoke"]
    assert {"kl_ref", "entropy_bonus"} <= logged_keys["kl_entropy"]
    assert {"mismatch/is_weight", "mismatch/is_truncated", "memory/peak_rss_gb"} <= logged_keys["tis"]
    assert {"rollout/dynamic/draws", "rollout/dynamic/dropped_tokens"} <= logged_keys["dynamic"]
    assert {"grad_norm/player_4_0_3", "sets/k4/count", "clip/k4/frac"} <= logged_keys["testbed"]
    assert undeclared(every) == []
    patterns = [template_regex(t) for t in _documented_templates()]
    missing = sorted(k for k in every if not any(p.match(k) for p in patterns))
    assert missing == [], f"logged keys not in docs/metrics.md: {missing}"


def test_every_declared_template_is_documented_with_a_known_reduction():
    documented = set(_documented_templates())
    assert len({m.template for m in METRICS}) == len(METRICS)  # declared once
    assert all(m.reduction in REDUCTIONS for m in METRICS)
    assert sorted(m.template for m in METRICS if m.template not in documented) == []


def test_micro_batches_and_optimizer_steps_combine_by_the_declared_reduction():
    assert declared("loss").reduction == "sum" and declared("ratio/k3/log_mean").reduction == "mean"
    assert declared("length/solver/max").reduction == "max"
    micro = [{"loss": 0.25, "clip/all/frac": 0.1, "ratio/clamp_count": 1.0},
             {"loss": 0.5, "clip/all/frac": 0.3, "ratio/clamp_count": 2.0}]
    step = combine(micro)
    assert step == {"clip/all/frac": pytest.approx(0.2), "loss": 0.75, "ratio/clamp_count": 3.0}
    # over optimizer steps a summed metric is the mean step's, a max stays a max
    steps = combine([step, {"loss": 0.25, "clip/all/frac": 0.4, "length/all/max": 3.0},
                     {"length/all/max": 5.0}], over="steps")
    assert steps["loss"] == pytest.approx(0.5) and steps["clip/all/frac"] == pytest.approx(0.3)
    assert steps["ratio/clamp_count"] == 3.0 and steps["length/all/max"] == 5.0


def test_an_undeclared_key_is_an_error_not_an_average():
    with pytest.raises(UndeclaredMetric, match=r"'policy/new_thing' is not declared"):
        combine([{"policy/new_thing": 1.0}, {"policy/new_thing": 3.0}])
    with pytest.raises(ValueError, match="over must be"):
        combine([], over="epochs")
