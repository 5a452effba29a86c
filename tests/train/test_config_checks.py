"""Bad settings refused when the config loads (or, for training-only rules, by the trainer's
preflight), each with a ConfigError naming the dotted key: no run gets as far as building a
model, training a step or writing a checkpoint with them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from srpo.config import Config, ConfigError, load_config
from srpo.objective.methods import METHODS
from srpo.train.preflight import check_group_size, preflight

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "srpo" / "presets" / "smoke.yaml"


# --------------------------------------------------------------------------- names that become paths


@pytest.mark.parametrize("bad", ["../../x", "a/b", "a\\b", "..", ".hidden", "-flag", "", "a..b",
                                 "x" * 129, "name with space"])
def test_a_policy_name_that_is_not_a_plain_file_name_is_refused(bad):
    with pytest.raises(ConfigError, match=r"policies\.names\[1\] must be a plain file name") as e:
        # a JSON string is a YAML flow scalar: the name arrives exactly as written here
        load_config(SMOKE, ["policies.kind=separate", f"policies.names=[shared, {json.dumps(bad)}]"])
    assert repr(bad) in str(e.value)


def test_a_policies_models_key_that_is_not_a_plain_file_name_is_refused():
    with pytest.raises(ConfigError, match=r"policies\.models \(a key\) .*'\.\./up'"):
        load_config(None, ["policies.kind=separate", "policies.names=[shared]",
                           "policies.models={'../up': {name: tiny}}"])


def test_plain_policy_names_still_load():
    cfg = load_config(SMOKE, ["policies.kind=separate", "policies.names=[shared, Solver_2.v1-b]"])
    assert cfg.policies.names == ["shared", "Solver_2.v1-b"]


# --------------------------------------------------------------------------- machine and threads


def test_output_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "taken").write_text("not a directory")
    with pytest.raises(ConfigError, match=r"output_dir '.*taken' exists as a file"):
        load_config(SMOKE, [f"output_dir={tmp_path / 'taken'}"])
    with pytest.raises(ConfigError, match=r"output_dir '.*taken/run' is under the file"):
        load_config(SMOKE, [f"output_dir={tmp_path / 'taken' / 'run'}"])


def test_output_dir_whose_nearest_existing_parent_is_not_writable_is_refused(tmp_path, monkeypatch):
    # the tests may run as root, for whom every folder is writable: os.access reports the folder
    # read-only, as it would for another user
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    with pytest.raises(ConfigError, match=r"output_dir '.*locked/a/b'.*'.*locked' is not writable"):
        load_config(SMOKE, [f"output_dir={locked / 'a' / 'b'}"])
    # the {time} template is checked at the folder above it
    with pytest.raises(ConfigError, match=r"locked' is not writable"):
        load_config(SMOKE, [f"output_dir={locked / 'run-{time}' / 'x'}"])
    assert load_config(SMOKE, [f"output_dir={tmp_path / 'free' / 'run-{time}'}"]).output_dir.endswith("run-{time}")


def test_cuda_device_without_cuda_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError, match=rf"device '{device}': CUDA is not available.*use device=cpu"):
            load_config(SMOKE, [f"device={device}"])
    assert load_config(SMOKE, ["device=cpu"]).device == "cpu"


def test_a_caller_that_uses_no_device_may_skip_the_machine_checks(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    (tmp_path / "taken").write_text("")
    cfg = load_config(SMOKE, ["device=cuda", f"output_dir={tmp_path / 'taken'}"], check_machine=False)
    assert cfg.device == "cuda"


def test_cuda_device_loads_where_cuda_is_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert load_config(SMOKE, ["device=cuda"]).device == "cuda"


@pytest.mark.parametrize("threads", [0, -2])
def test_threads_below_one_are_refused(threads):
    with pytest.raises(ConfigError, match=rf"train\.threads must be >= 1 \(or null: torch's default\), got {threads}"):
        load_config(SMOKE, [f"train.threads={threads}"])


def test_threads_null_and_positive_load():
    assert load_config(SMOKE, ["train.threads=null"]).train.threads is None
    assert load_config(SMOKE, ["train.threads=2"]).train.threads == 2


def test_the_projects_cpu_configs_still_load():
    for path in [
        SMOKE,
        ROOT / "srpo" / "presets" / "search_smoke.yaml",
        *sorted((ROOT / "srpo" / "presets" / "math").glob("*.yaml")),
    ]:
        assert load_config(path).device == "cpu", path


# --------------------------------------------------------------------------- group size


@pytest.mark.parametrize("method", sorted(METHODS))
def test_group_size_one_is_refused_for_training_with_every_method(method):
    cfg = load_config(SMOKE, ["group_size=1", f"train.method={method}"])  # loads: rollouts may use it
    with pytest.raises(
        ConfigError,
        match=r"group_size must be >= 2 .*every relative advantage is 0 "
        r"and nothing is learned; use group_size >= 2",
    ):
        check_group_size(cfg)


def test_group_size_two_passes_preflight(tmp_path):
    preflight(load_config(SMOKE, ["group_size=2", f"output_dir={tmp_path / 'run'}"]))


def test_preflight_checks_the_machine_of_a_config_built_in_code(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="CUDA is not available"):
        preflight(Config(device="cuda"))


# --------------------------------------------------------------------------- numbers written as text


def test_float_written_with_an_exponent_and_no_dot_loads_from_a_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "train:\n  lr: 1e-5\n  policy_lr: {shared: 2E-6}\n  adam_betas: [0.9, 1e-1]\nsampling:\n  temperature: 7e-1\n"
    )
    cfg = load_config(path)
    assert cfg.train.lr == 1e-5 and isinstance(cfg.train.lr, float)
    assert cfg.train.policy_lr == {"shared": 2e-6} and cfg.train.adam_betas == [0.9, 0.1]
    assert cfg.sampling.temperature == 0.7


def test_float_written_with_an_exponent_and_no_dot_loads_from_an_override():
    cfg = load_config(SMOKE, ["train.lr=3e-6", "task.reward.timeout_s=1e1"])
    assert cfg.train.lr == 3e-6 and cfg.task.reward.timeout_s == 10.0


@pytest.mark.parametrize("text", ["fast", "nan", "inf", "1e-5x", ""])
def test_text_that_is_not_a_finite_number_stays_a_type_error(text):
    with pytest.raises(ConfigError, match=rf"train\.lr must be a number, got str '{text}'"):
        load_config(SMOKE, [f"train.lr='{text}'"])


def test_math_format_rule_is_one_of_the_rewards_rules():
    assert load_config(SMOKE, ["task.reward.format_rule=bare"]).task.reward.format_rule == "bare"
    with pytest.raises(ConfigError, match=r"task\.reward\.format_rule must be one of .*'bare'\], got 'xml'"):
        load_config(SMOKE, ["task.reward.format_rule=xml"])
