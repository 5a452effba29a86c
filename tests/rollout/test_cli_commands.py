"""The command line as plug-ins (srpo.cli): families of subcommands come through the entry point
group "srpo.commands", as task packs do; srpo's own are known without their entry points (a
source checkout on PYTHONPATH has none) and listed first, in the same order as before; a
package's family adds a subcommand; a broken one is left out with a line naming it."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from srpo import cli, plugins
from srpo.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
# what `srpo --help` lists, in its order (as before the families became plug-ins)
COMMANDS = ["methods", "presets", "rollout", "workflows", "packs", "train", "eval", "plot", "index", "report"]


class _FakeEntryPoint:
    def __init__(self, name, value, obj):
        self.name, self.value, self._obj = name, value, obj

    def load(self):
        if isinstance(self._obj, Exception):
            raise self._obj
        return self._obj


@pytest.fixture
def no_entry_points(monkeypatch):
    """As in an environment where srpo is not installed: no entry point of the group."""
    found = []
    monkeypatch.setattr(plugins, "entry_points", lambda group: list(found))  # srpo.plugins' lookup
    return found


def commands(parser: argparse.ArgumentParser) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def add_hello_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hello", help="a third party's command")
    p.add_argument("--name", default="world")
    p.set_defaults(handler=lambda args: print(f"hello {args.name}") or 7)


def test_the_fallback_names_what_pyproject_declares_in_the_same_order():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert list(declared["srpo.commands"].items()) == list(cli.BUILTIN_COMMANDS.items())


def test_srpos_commands_without_entry_points(no_entry_points, capsys):
    assert commands(build_parser()) == COMMANDS
    assert main(["methods"]) == 0 and "srpo" in capsys.readouterr().out
    assert main(["presets"]) == 0 and "default" in capsys.readouterr().out


def test_srpo_help_lists_the_commands_in_their_order():
    out = subprocess.run([sys.executable, "-m", "srpo.cli", "--help"], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert "{" + ",".join(COMMANDS) + "}" in out.replace("\n", "").replace(" ", "")


def test_a_package_adds_a_command_through_an_entry_point(no_entry_points, capsys):
    no_entry_points.append(_FakeEntryPoint("hello", "their_pkg.cli:add_hello_commands", add_hello_commands))
    assert commands(build_parser()) == [*COMMANDS, "hello"]  # after srpo's own
    assert main(["hello", "--name", "srpo"]) == 7
    assert capsys.readouterr().out == "hello srpo\n"


def test_an_installed_entry_point_wins_over_the_fallback(no_entry_points):
    no_entry_points.append(_FakeEntryPoint("report", "their_pkg.cli:add", add_hello_commands))
    assert commands(build_parser()) == [c for c in COMMANDS if c != "report"] + ["hello"]


@pytest.mark.parametrize("broken, why", [
    (ImportError("No module named 'their_pkg'"), "ImportError: No module named 'their_pkg'"),
    ("not a function", "ValueError: it is a str, not a function add(subparsers)"),
    (lambda sub: sub.add_parser("train"), "ArgumentError: argument command: conflicting subparser: train"),
])
def test_a_broken_family_is_left_out_with_a_line_naming_it(no_entry_points, capsys, broken, why):
    no_entry_points.append(_FakeEntryPoint("broken", "their_pkg.cli:add", broken))
    parser = build_parser()
    err = capsys.readouterr().err
    assert err == f"srpo: the command family 'broken' (their_pkg.cli:add) was left out: {why}\n"
    assert commands(parser) == COMMANDS  # everything else is still there, train is srpo's
    assert main(["methods"]) == 0
