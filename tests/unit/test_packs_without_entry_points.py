"""srpo's own task packs are known without their entry points (a source checkout on PYTHONPATH,
never installed, has none: `unknown task pack 'math' ... known packs: []` before), while
third-party packs still come through entry points."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from conftest import FakeEntryPoint

from srpo import packs
from srpo.packs import TaskPack

ROOT = Path(__file__).resolve().parents[2]


def test_the_fallback_names_what_pyproject_declares():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["srpo.task_packs"] == packs.BUILTIN_PACKS


def test_srpos_packs_load_without_entry_points(no_entry_points):
    assert packs.known_pack_names() == ["math", "search", "testbed"]
    assert get_names(packs.load_all_packs()) == ["math", "search", "testbed"]
    assert packs.get_pack("math").success_component == "correct"
    assert [w.name for w in packs.get_pack("testbed").workflows] == ["cover"]


def test_a_config_naming_a_builtin_pack_loads_without_entry_points(no_entry_points):
    from srpo.config import load_config

    cfg = load_config(ROOT / "srpo" / "presets" / "smoke.yaml", ["task.name=testbed", "workflow.name=cover"])
    assert cfg.task.name == "testbed"


def test_unknown_names_still_list_the_builtin_packs(no_entry_points):
    with pytest.raises(ValueError, match=r"known packs: \['math', 'search', 'testbed'\]"):
        packs.get_pack("nope")


def test_third_party_packs_still_come_through_entry_points(no_entry_points):
    mine = TaskPack(name="mine", description="a third party's", load_tasks=lambda c, s, n: [],
                    make_reward=lambda c: (lambda task, text: 0.0))
    no_entry_points.append(FakeEntryPoint("mine", "their_pkg:PACK", mine))
    assert packs.known_pack_names() == ["math", "mine", "search", "testbed"]
    assert packs.get_pack("mine") is mine


def test_an_installed_entry_point_wins_over_the_fallback(no_entry_points):
    other = TaskPack(name="math", description="replaced", load_tasks=lambda c, s, n: [],
                     make_reward=lambda c: (lambda task, text: 0.0))
    no_entry_points.append(FakeEntryPoint("math", "their_pkg:PACK", other))
    assert packs.get_pack("math") is other


def get_names(loaded):
    return [p.name for p in loaded]
