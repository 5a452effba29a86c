"""srpo.plugins.Registry: the one lookup of packs, engines, workflows and command families.
Order (registered > installed > built-in reference > "file.py:NAME"), the check of what it
finds, the unknown-name error, and the four users on the same helper."""

from __future__ import annotations

import pytest
from conftest import FakeEntryPoint

from srpo import plugins
from srpo.plugins import Registry


def _accept(obj, name, where):
    if not isinstance(obj, int):
        raise ValueError(f"{where} is a {type(obj).__name__}, not an int")
    return obj


@pytest.fixture
def installed(monkeypatch):
    found = []
    monkeypatch.setattr(plugins, "entry_points", lambda group: [ep for ep in found if group == "test.group"])
    return found


def _registry(**kw):
    return Registry("number", plural="numbers", group="test.group", accept=_accept, **kw)


def test_order_registered_then_installed_then_builtin(installed, tmp_path):
    (tmp_path / "nums.py").write_text("SEVEN = 7\nTEXT = 'x'\n")
    reg = _registry(builtins={"pi": "math:pi", "e": "math:e"})
    with pytest.raises(ValueError, match=r"number 'pi' \(math:pi\) is a float, not an int"):
        reg.get("pi")  # a built-in reference is checked like anything else
    installed.append(FakeEntryPoint("pi", "their_pkg:PI", 3))
    assert reg.get("pi") == 3  # an installed entry point wins over the built-in reference
    reg.register("pi", 4)
    assert reg.get("pi") == 4  # and what is registered wins over both
    assert reg.names() == ["e", "pi"]
    assert [(n, getattr(s, "value", s)) for n, s in reg.sources()] == [("pi", "their_pkg:PI"), ("e", "math:e")]


def test_references_only_where_the_registry_takes_them(installed, tmp_path):
    ref = f"{tmp_path / 'nums.py'}:SEVEN"
    (tmp_path / "nums.py").write_text("SEVEN = 7\nTEXT = 'x'\n")
    with pytest.raises(ValueError, match=r"unknown number .*a package adds one with an entry point in the group "
                                         r"'test.group'"):
        _registry().get(ref)
    reg = _registry(references=True)
    assert reg.get(ref) == 7
    # the file runs once (a second get returns what the first loaded, the file since rewritten),
    # and a reference is not a registered plug-in: listings name plug-ins only
    (tmp_path / "nums.py").write_text("SEVEN = 8\nTEXT = 'x'\n")
    assert reg.get(ref) == 7
    assert ref not in reg and reg.registered() == {} and reg.names() == []
    reg.reset()
    assert reg.get(ref) == 8  # reset forgets what references loaded too
    with pytest.raises(ValueError, match=r"number '.*nums.py:TEXT' is a str, not an int"):
        reg.get(f"{tmp_path / 'nums.py'}:TEXT")
    with pytest.raises(ValueError, match=r"number '.*nums.py:NOPE': .* has no attribute 'NOPE'"):
        reg.get(f"{tmp_path / 'nums.py'}:NOPE")


def test_an_unknown_name_gets_the_closest_and_every_known_one(installed):
    installed.append(FakeEntryPoint("seven", "their_pkg:SEVEN", 7))
    reg = _registry(references=True, key="numbers.pick")
    reg.register("eight", 8)
    with pytest.raises(ValueError, match=r"^unknown number 'sevn' \(numbers.pick\); did you mean 'seven'\? "
                                         r"known numbers: \['eight', 'seven'\] \(or a user's number as 'file.py:NAME'"):
        reg.get("sevn")
    with pytest.raises(ValueError, match=r"^unknown number 'zzz' \(numbers.pick\); known numbers"):
        reg.get("zzz")


def test_on_register_and_reset():
    seen = []
    reg = Registry("number", plural="numbers", group="test.group", accept=_accept, on_register=seen.append)
    reg.register("one", 1)
    before = reg.registered()
    reg.register("two", 2)
    assert seen == [1, 2] and list(reg) == ["one", "two"]
    reg.reset(before)
    assert list(reg) == ["one"] and seen == [1, 2]


def test_the_four_lookups_are_this_one():
    from srpo.cli import COMMANDS
    from srpo.packs import PACKS
    from srpo.rollout.backends import BACKENDS
    from srpo.workflows.registry import WORKFLOWS

    assert all(isinstance(r, Registry) for r in (COMMANDS, PACKS, BACKENDS, WORKFLOWS))
    assert (PACKS.references, WORKFLOWS.references, BACKENDS.references) == (True, True, False)
    with pytest.raises(ValueError, match=r"did you mean 'math'\?"):
        PACKS.get("maths")
    with pytest.raises(ValueError, match=r"did you mean 'debate'\?"):
        WORKFLOWS.get("debait")
