"""The `srpo` command line: a host for families of subcommands, found like task packs.

A command family is a function `add(subparsers)` that registers its subcommands on argparse's
subparsers object, each with a `handler(args) -> exit code` default (heavy imports inside the
handlers, so `srpo --help` stays fast). Families are found by srpo.plugins' one lookup, through
Python entry points (group "srpo.commands", declared in pyproject.toml), so a package adds a
subcommand the way it adds a task pack:

    [project.entry-points."srpo.commands"]
    mine = "my_pkg.cli:add_my_commands"      # def add_my_commands(sub): sub.add_parser("mine")...

srpo's own families (`BUILTIN_COMMANDS`) are also known without their entry points (a source
checkout on PYTHONPATH, never installed, has none) and are listed first, in their order; other
installed families follow by name. A family that cannot be loaded, or that adds a command name
already taken, is left out with one line on stderr naming it, so one broken package does not
take every other command with it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from srpo import __version__
from srpo.plugins import Registry

ENTRY_POINT_GROUP = "srpo.commands"
# srpo's own families, in the order `srpo --help` lists their commands, by the references
# pyproject.toml's entry points give them (tests/rollout/test_cli_commands.py keeps them equal)
BUILTIN_COMMANDS = {
    "catalog": "srpo.cli.catalog:add_catalog_commands",  # methods, presets
    "rollout": "srpo.cli.rollout:add_rollout_commands",  # rollout, workflows, packs
    "train": "srpo.cli.train:add_train_commands",  # train, eval, plot
    "search": "srpo.cli.search:add_search_commands",  # index
    "report": "srpo.cli.report:add_report_commands",  # report
}

AddCommands = Callable[[argparse._SubParsersAction], None]


def _accept(add: Any, name: str, where: str) -> AddCommands:
    if not callable(add):
        raise ValueError(f"it is a {type(add).__name__}, not a function add(subparsers)")
    return add


COMMANDS: Registry[AddCommands] = Registry("command family", plural="command families",
                                          group=ENTRY_POINT_GROUP, accept=_accept, builtins=BUILTIN_COMMANDS)


def command_families() -> list[tuple[str, Any]]:
    """(name, what registers it) for every family: srpo's own first (an installed entry point
    of the same name wins over its reference here), then the other installed ones by name. What
    registers it is an entry point (call .load()) or a "module:function" reference."""
    return COMMANDS.sources()


def _load_family(name: str, source: Any) -> AddCommands:
    # not COMMANDS.get(name): a family that fails to load is left out (add_command_families)
    return _accept(COMMANDS.load(source), name, name)


def add_command_families(sub: argparse._SubParsersAction) -> None:
    """Register every family's commands on `sub` (module doc); a broken one is left out."""
    for name, source in command_families():
        where = source if isinstance(source, str) else getattr(source, "value", name)
        try:
            _load_family(name, source)(sub)
        except Exception as e:
            print(f"srpo: the command family {name!r} ({where}) was left out: "
                  f"{type(e).__name__}: {e}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="srpo", description="Setwise Relative Policy Optimization for multi-agent LLM systems"
    )
    parser.add_argument("--version", action="version", version=f"srpo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_command_families(sub)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """argparse, plus `key=value` overrides anywhere on the line: after `--n 4 --out x` too.

    argparse gives a positional `nargs="*"` only the words before the first option; the rest
    come back unrecognized. Those that are `key=value` words join the command's overrides (in
    the order given, so a later one still wins); anything else stays an error.
    """
    args, extra = parser.parse_known_args(argv)
    takes = isinstance(getattr(args, "overrides", None), list)
    stray = [a for a in extra if not takes or a.startswith("-") or "=" not in a]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    return args


def main(argv: list[str] | None = None) -> int:
    """The `srpo` command. SIGINT and SIGTERM raise srpo.cli.interrupts.Interrupted here (only
    here: library code keeps Python's defaults); a command that does not say where it stopped
    (`srpo train` does) gets this one line, and the exit status is 130 / 143."""
    from srpo.cli.interrupts import Interrupted, handling_interrupts

    command = None
    with handling_interrupts():
        try:
            args = parse_args(build_parser(), argv)
            command = args.command
            return _run(args)
        except Interrupted as e:
            print(f"srpo{f' {command}' if command else ''}: stopped by {e.name} before it finished; "
                  f"the files it writes are written whole or not at all: run the same command again",
                  file=sys.stderr)
            return e.exit_code


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.handler(args) or 0)
    except Exception as e:  # a full disk in any command's writer (rollouts, eval --out, index): one line
        from srpo.disk import SymlinkRefused

        if isinstance(e, SymlinkRefused):  # a link where srpo writes: refused, its target untouched
            print(f"srpo {args.command}: {e}", file=sys.stderr)
            return 2
        line = _disk_full_line(e)
        if line is None:
            raise
        print(f"srpo {args.command}: {line}", file=sys.stderr)
        return 1


def _disk_full_line(error: BaseException) -> str | None:
    """The line for a full disk (None if `error` is not one). `srpo train` and `srpo report`
    say more (what of the run is intact); this is the floor for every other command."""
    from srpo.disk import as_disk_full

    full = as_disk_full(error, "a file (the writer did not say which)")
    if full is None:
        return None
    return f"{full}; its partial file was removed where srpo wrote it atomically: free space and run it again"


if __name__ == "__main__":
    sys.exit(main())
