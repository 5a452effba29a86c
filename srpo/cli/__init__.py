"""The `srpo` command line. Each family of subcommands registers itself on the parser."""

from __future__ import annotations

import argparse
import sys

from srpo import __version__


def _cmd_methods(args: argparse.Namespace) -> int:
    from srpo.objective.methods import METHODS

    header = f"{'method':<9} {'ratio/clip':<10} {'clip':<13} {'advantage (unit: groups)':<36} aggregation"
    print(header)
    print("-" * len(header))
    for spec in METHODS.values():
        ratio = spec.ratio_unit + (f"/{spec.reduction}" if spec.ratio_unit == "set" else "")
        adv = f"{spec.advantage_unit}: {','.join(spec.group_keys)}"
        if spec.scale_keys:
            adv += f" (std by {','.join(spec.scale_keys)})"
        if spec.scale == "none":
            adv += " (no std)"
        clip = f"{spec.clip_low:g}/{spec.clip_high:g}"
        print(f"{spec.name:<9} {ratio:<10} {clip:<13} {adv:<36} {spec.aggregation}")
    if args.verbose:
        print()
        for spec in METHODS.values():
            print(f"{spec.name}: {spec.description}")
    return 0


def _cmd_presets(args: argparse.Namespace) -> int:
    from srpo.config.presets import PRESETS_DIR, preset_names

    for name in preset_names():
        first = (PRESETS_DIR / f"{name}.yaml").read_text().splitlines()[:1]
        about = first[0].lstrip("# ").strip() if first and first[0].startswith("#") else ""
        print(f"{name:<22} {about}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="srpo", description="Setwise Relative Policy Optimization for multi-agent LLM systems"
    )
    parser.add_argument("--version", action="version", version=f"srpo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("methods", help="list SRPO and the baselines as settings of the same parts")
    p.add_argument("-v", "--verbose", action="store_true", help="also print each method's description")
    p.set_defaults(handler=_cmd_methods)
    p = sub.add_parser("presets", help="list the configs that ship with srpo (CONFIG may name one)")
    p.set_defaults(handler=_cmd_presets)
    # Each family registers its own subcommands; their heavy imports happen inside the handlers.
    from srpo.cli.report import add_report_commands
    from srpo.cli.rollout import add_rollout_commands
    from srpo.cli.search import add_search_commands
    from srpo.cli.train import add_train_commands

    add_rollout_commands(sub)
    add_train_commands(sub)
    add_search_commands(sub)
    add_report_commands(sub)
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
    args = parse_args(build_parser(), argv)
    try:
        return int(args.handler(args) or 0)
    except Exception as e:  # a full disk in any command's writer (rollouts, eval --out, index): one line
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
