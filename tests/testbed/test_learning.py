"""Every method learns the testbed: two players cover a target of two symbols (chance ~0.44,
optimum 1.0) within 30 updates from a fixed seed, on-policy and with a rollout batch reused for
4 optimizer steps. A sign error or advantages credited to the wrong sets fail here (shown by
breaking each on purpose), before any study is run.

What it cannot catch: a normalizer that is wrong by a constant factor (a loss scaled by 2, an
advantage divided by the wrong constant). AdamW is invariant to a constant scale of the loss, so
such a run learns exactly as fast; the normalizers are checked against hand-computed values in
tests/unit (weights, reductions, advantages) instead.

Measured when written (2-core CPU): every case reaches a 5-step mean reward >= 0.9 by update
4-14 and holds 1.0 at the end; each run takes 1-2 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from srpo.config import load_config
from srpo.objective import METHODS, methods
from srpo.objective.advantages import AdvantageResult
from srpo.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
K2 = str(REPO / "srpo" / "presets" / "testbed" / "k2.yaml")
CASES = [(m, None) for m in sorted(METHODS)] + [("srpo", r) for r in ("pooled", "member_sum", "sum")]
REUSE = {"on_policy": [], "reuse_4": ["train.epochs=2", "train.minibatches=2"]}
TARGET = 0.95  # mean reward of the last 5 updates


def _rewards(tmp_path: Path, method: str = "srpo", reduction: str | None = None, *extra: str) -> list[float]:
    settings = f"{{reduction: {reduction}}}" if reduction else "{}"
    cfg = load_config(K2, [f"output_dir={tmp_path / 'run'}", f"train.method={method}",
                           f"train.method_settings={settings}", "train.lr=2e-2", "train.steps=30",
                           "seed=0", "checkpoint.report=false", "checkpoint.episodes_per_step=0", *extra])
    return [h["reward/mean"] for h in Trainer(cfg).train().history]


@pytest.mark.parametrize("reuse", sorted(REUSE))
@pytest.mark.parametrize("method, reduction", CASES)
def test_every_method_learns_the_testbed(tmp_path, method, reduction, reuse):
    rewards = _rewards(tmp_path, method, reduction, *REUSE[reuse])
    assert sum(rewards[:3]) / 3 < 0.7, rewards  # it starts near chance...
    assert sum(rewards[-5:]) / 5 >= TARGET, rewards  # ...and reaches the optimum


def _sabotaged(monkeypatch, how):
    real = methods.relative_advantages

    def broken(*args, **kwargs):
        res = real(*args, **kwargs)
        return AdvantageResult(how(res.advantages), res.num_groups, res.degenerate_groups)

    monkeypatch.setattr(methods, "relative_advantages", broken)


@pytest.mark.parametrize("bug, how", [
    ("sign flipped", lambda a: -a),
    ("advantages credited to the wrong sets (shifted by one)", lambda a: a.roll(1)),
])
def test_a_broken_objective_fails_the_learning_test(tmp_path, monkeypatch, bug, how):
    _sabotaged(monkeypatch, how)
    rewards = _rewards(tmp_path)
    assert sum(rewards[-5:]) / 5 < TARGET - 0.3, (bug, rewards)
