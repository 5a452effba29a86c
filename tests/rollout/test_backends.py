"""Generation backends as plug-ins (srpo.rollout.backends), as task packs are: `rollout.backend`
names one, `rollout.<name>` is its own section, checked when the config loads (errors name the
dotted key), and the backend is built by the backend, not by an if-ladder. srpo's backends are
known without their entry points (a source checkout on PYTHONPATH has none); a third party's
comes through the entry point group "srpo.backends"."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import FakeEntryPoint
from pydantic import field_validator

from srpo.build import build_backend, build_rollout, load_tasks
from srpo.config import Config, ConfigError, from_dict, load_config, to_dict
from srpo.config.presets import PRESETS_DIR, preset_names
from srpo.models import build_tiny_model
from srpo.rollout import HFGenerateBackend, PolicySet, ScriptedBackend, backends
from srpo.rollout.backends import BackendSettings, BackendSpec, get_backend, known_backend_names
from srpo.rollout.backends.ctranslate2 import CTranslate2Settings
from srpo.rollout.backends.hf import HFSettings

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "srpo" / "presets" / "smoke.yaml"


class EchoSettings(BackendSettings):
    reply: str = "hello"  # what every agent says

    @field_validator("reply")
    @classmethod
    def _reply(cls, reply: str) -> str:
        if not reply:
            raise ValueError("must not be empty")
        return reply


def _build_echo(cfg, policies):
    reply = cfg.rollout.settings_of("echo").reply
    return ScriptedBackend(policies, lambda request: reply)


ECHO = BackendSpec(name="echo", description="a third party's: every agent says `reply`",
              build=_build_echo, settings=EchoSettings)


@pytest.fixture(scope="module")
def policies():
    return PolicySet.shared(*build_tiny_model(seed=0))


# --------------------------------------------------------------------------- discovery


def test_the_fallback_names_what_pyproject_declares():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["srpo.backends"] == backends.BUILTIN_BACKENDS


def test_srpos_engines_load_without_entry_points(no_entry_points):
    assert known_backend_names() == ["ctranslate2", "hf"]
    assert get_backend("hf").settings is HFSettings
    assert get_backend("ctranslate2").settings is CTranslate2Settings
    cfg = load_config(SMOKE, ["rollout.backend=ctranslate2"], check_machine=False)
    assert cfg.rollout.settings_of("ctranslate2") == CTranslate2Settings()


def test_an_unknown_engine_names_the_known_ones_and_the_closest(no_entry_points):
    with pytest.raises(ConfigError, match=r"^rollout\.backend: unknown generation backend 'ctranslat2'; "
                                          r"did you mean 'ctranslate2'\? known backends: \['ctranslate2', 'hf'\]"):
        load_config(SMOKE, ["rollout.backend=ctranslat2"])
    with pytest.raises(ConfigError,
                       match=r"unknown generation backend 'vllm'; known backends: \['ctranslate2', 'hf'\]"):
        load_config(SMOKE, ["rollout.backend=vllm"])


def test_a_third_party_engine_comes_through_entry_points(no_entry_points, policies):
    no_entry_points.append(FakeEntryPoint("echo", "their_pkg:BACKEND", ECHO))
    assert known_backend_names() == ["ctranslate2", "echo", "hf"]
    cfg = load_config(SMOKE, ["rollout.backend=echo", "rollout.echo.reply=four"])
    assert to_dict(cfg)["rollout"]["echo"] == {"reply": "four"}
    backend = build_backend(cfg, policies)
    assert isinstance(backend, ScriptedBackend)
    runner, workflow = build_rollout(cfg, policies=policies)
    episodes = runner.run(load_tasks(cfg.task, limit=1), workflow, group_size=2).episodes
    assert {m.text for ep in episodes for t in ep.transitions for m in t.members} == {"four"}
    # its section is checked when the config loads, by its own model, naming the dotted key
    with pytest.raises(ConfigError, match=r"^rollout\.echo\.reply: must not be empty"):
        load_config(SMOKE, ["rollout.backend=echo", "rollout.echo.reply=''"])
    with pytest.raises(ConfigError, match=r"^unknown key\(s\) \['rollout\.echo\.volume'\]; "
                                          r"known keys of rollout\.echo: \['reply'\]"):
        load_config(SMOKE, ["rollout.backend=echo", "rollout.echo.volume=3"])


def test_an_installed_entry_point_wins_over_the_fallback(no_entry_points):
    other = BackendSpec(name="hf", description="replaced", build=_build_echo)
    no_entry_points.append(FakeEntryPoint("hf", "their_pkg:BACKEND", other))
    assert get_backend("hf") is other


def test_an_entry_point_must_give_an_engine(no_entry_points):
    no_entry_points.append(FakeEntryPoint("bad", "their_pkg:BACKEND", {"name": "bad"}))
    with pytest.raises(ConfigError, match=r"rollout\.backend: generation backend 'bad' \(entry point\) is a dict, "
                                          r"not a srpo\.rollout\.backends\.BackendSpec value"):
        load_config(SMOKE, ["rollout.backend=bad"])


def test_an_engine_value_is_checked_when_it_is_made():
    with pytest.raises(ValueError, match="a name that is an identifier"):
        BackendSpec(name="my backend", description="", build=_build_echo)
    with pytest.raises(ValueError, match="build must be callable"):
        BackendSpec(name="e", description="", build=None)
    with pytest.raises(ValueError, match="settings must be a subclass of srpo.rollout.backends.BackendSettings"):
        BackendSpec(name="e", description="", build=_build_echo, settings=dict)


# --------------------------------------------------------------------------- config sections


def test_the_engines_settings_reach_their_backends(policies):
    hf = build_backend(load_config(SMOKE, ["rollout.hf.sampler=multinomial", "rollout.hf.share_prefill=false",
                                           "rollout.max_batch_size=3", "rollout.record_logprobs=false"]), policies)
    assert isinstance(hf, HFGenerateBackend)
    assert (hf.sampler, hf.share_prefill, hf.max_batch_size, hf.record_logprobs) == ("multinomial", False, 3, False)
    default = build_backend(load_config(SMOKE), policies)
    assert (default.sampler, default.share_prefill) == ("inverse_cdf", True)


@pytest.mark.parametrize("overrides, match", [
    (["rollout.hf.sampler=gumbel"],
     r"^rollout\.hf\.sampler: must be one of \['inverse_cdf', 'multinomial'\], got 'gumbel'"),
    (["rollout.hf.share_prefill=3"], r"^rollout\.hf\.share_prefill must be true or false, got 3"),
    (["rollout.hf=3"], r"^rollout\.hf must be a mapping \(the settings of backend 'hf'\), got 3"),
    (["rollout.backend=ctranslate2", "rollout.ctranslate2.compute_type=int4"],
     r"^rollout\.ctranslate2\.compute_type: must be one of \['float32', 'int8'\], got 'int4'"),
    (["rollout.backend=ctranslate2", "rollout.ctranslate2.threads=0"], r"^rollout\.ctranslate2\.threads: must be > 0"),
    (["rollout.backend=ctranslate2", "rollout.ctranslate2.threads=two"],
     r"^rollout\.ctranslate2\.threads must be an integer, got str 'two'"),
    (["rollout.ctranslate=1"], (r"^unknown key\(s\) \['rollout\.ctranslate'\]; did you mean 'rollout\.ctranslate2'\? "
                                r"known keys of rollout \(its own and the backends' sections\): \['backend', "
                                r"'ctranslate2', 'hf', 'max_batch_size', 'record_logprobs'\]")),
    # a section of a backend that is not selected: an error, not a setting ignored
    (["rollout.ctranslate2.threads=2"], (r"^rollout\.ctranslate2 holds settings of the backend 'ctranslate2', but "
                                         r"rollout\.backend is 'hf': remove the section or select that backend")),
])
def test_a_bad_engine_setting_names_its_dotted_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(SMOKE, overrides)


@pytest.mark.parametrize("old, new", [("sampler=multinomial", "hf.sampler"),
                                      ("share_prefill=false", "hf.share_prefill"),
                                      ("ct2_compute_type=int8", "ctranslate2.compute_type"),
                                      ("ct2_threads=2", "ctranslate2.threads")])
def test_the_flat_keys_of_before_name_their_new_place(tmp_path, old, new):
    key = old.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^rollout\.{key} is now rollout\.{new.replace('.', '[.]')} "):
        load_config(SMOKE, [f"rollout.{old}"])
    # in a file too (a run directory's config.yaml written before the backends had sections)
    path = tmp_path / "old.yaml"
    path.write_text(f"rollout: {{backend: hf, {old.replace('=', ': ')}}}\n")
    with pytest.raises(ConfigError, match=rf"^rollout\.{key} is now rollout\.{new.replace('.', '[.]')} "):
        load_config(path, check_machine=False)


def test_selecting_another_engine_drops_the_old_ones_section():
    ct2 = ["rollout.backend=ctranslate2"]
    default = load_config(SMOKE, ct2, check_machine=False)
    assert to_dict(default)["rollout"]["ctranslate2"] == {"compute_type": "float32", "threads": None}
    switched = load_config(SMOKE, [*ct2, "rollout.backend=hf"], check_machine=False)
    assert "ctranslate2" not in to_dict(switched)["rollout"]
    assert switched.rollout.settings_of("hf") == HFSettings()
    # a section given on the command line is kept, and so refused with the other backend
    with pytest.raises(ConfigError, match="rollout.ctranslate2 holds settings of the backend 'ctranslate2'"):
        load_config("default", ["rollout.backend=hf", "rollout.ctranslate2.threads=2"], check_machine=False)
    kept = load_config(SMOKE, ["rollout.backend=ctranslate2", "rollout.ctranslate2.threads=2"], check_machine=False)
    assert kept.rollout.settings_of("ctranslate2").threads == 2
    with pytest.raises(KeyError, match="rollout.hf: no such section"):
        kept.rollout.settings_of("hf")


@pytest.mark.parametrize("preset", preset_names())
@pytest.mark.parametrize("backend", [[], ["rollout.backend=hf"], ["rollout.backend=ctranslate2"]])
def test_the_resolved_config_round_trips(tmp_path, preset, backend):
    """What a run saves (RUN/config.yaml: yaml.safe_dump of the resolved config) loads again as
    the same config, for every preset and backend."""
    cfg = load_config(PRESETS_DIR / f"{preset}.yaml", backend, check_machine=False)
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    again = load_config(saved, check_machine=False)
    assert again == cfg and to_dict(again) == to_dict(cfg)
    assert from_dict(Config, to_dict(cfg)) == cfg
    assert set(to_dict(cfg)["rollout"]) == {"backend", "max_batch_size", "record_logprobs", cfg.rollout.backend}
