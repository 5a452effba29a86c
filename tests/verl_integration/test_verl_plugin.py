"""The `verl.plugins` entry point registers srpo's estimator, losses and trainer when verl is
imported (checked in fresh interpreters, so the registration comes from verl's own plugin
discovery and not from this test importing srpo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

# "verl.trainer": a submodule only the real verl package has
pytest.importorskip("verl.trainer")

PROBE = r"""
import json
import verl  # plugin discovery happens here
from verl.trainer.ppo import core_algos as c
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
out = {"losses": sorted(k for k in c.POLICY_LOSS_REGISTRY if k.startswith("srpo")),
       "advs": sorted(k for k in c.ADV_ESTIMATOR_REGISTRY if k.startswith("srpo")),
       "trainers": sorted(k for k in TRAINER_REGISTRY if k.startswith("srpo"))}
import srpo.integrations.verl.loss as L, srpo.integrations.verl.advantage as A
if out["losses"]:
    out["same_loss"] = c.get_policy_loss_fn("srpo") is L.POLICY_LOSS_FNS["srpo"]
    out["same_adv"] = c.get_adv_estimator_fn("srpo") is A.set_relative_advantage
    out["same_adv_event"] = c.get_adv_estimator_fn("srpo_event") is A.set_relative_advantage_by_event
print("RESULT" + json.dumps(out))
"""


def _probe(env_extra: dict[str, str]) -> dict:
    env = {**os.environ, **env_extra}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT") :])


def test_entry_point_is_declared():
    eps = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert eps.get("srpo") == "srpo.integrations.verl.plugin"


def test_importing_verl_registers_srpo_parts():
    out = _probe({})
    assert out["losses"] == ["srpo", "srpo_member_sum", "srpo_pooled", "srpo_seq", "srpo_sum"]
    assert out["advs"] == ["srpo", "srpo_event"]
    assert out["trainers"] == ["srpo_sync"]
    # the registered functions are srpo's adapters themselves, not copies
    assert out["same_loss"] and out["same_adv"] and out["same_adv_event"]


def test_plugins_off_registers_nothing():
    out = _probe({"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert out["losses"] == [] and out["advs"] == [] and out["trainers"] == []
