"""`srpo methods` and `srpo presets`: what ships with srpo, one line each."""

from __future__ import annotations

import argparse


def methods_command(args: argparse.Namespace) -> int:
    from srpo.objective.methods import METHODS

    header = f"{'method':<9} {'ratio/clip':<13} {'clip':<13} {'advantage (unit: groups)':<36} aggregation"
    print(header)
    print("-" * len(header))
    for spec in METHODS.values():
        ratio = spec.ratio_unit + (f"/{spec.reduction}" if spec.ratio_unit == "set" else "")
        ratio += "+mtr" if spec.member_clip is not None else ""  # a member trust region too
        adv = f"{spec.advantage_unit}: {','.join(spec.group_keys)}"
        if spec.scale_keys:
            adv += f" (std by {','.join(spec.scale_keys)})"
        if spec.scale == "none":
            adv += " (no std)"
        clip = f"{spec.clip_low:g}/{spec.clip_high:g}"
        print(f"{spec.name:<9} {ratio:<13} {clip:<13} {adv:<36} {spec.aggregation}")
    if args.verbose:
        print()
        for spec in METHODS.values():
            print(f"{spec.name}: {spec.description}")
    return 0


def presets_command(args: argparse.Namespace) -> int:
    from srpo.config.presets import PRESETS_DIR, preset_names

    for name in preset_names():
        first = (PRESETS_DIR / f"{name}.yaml").read_text().splitlines()[:1]
        about = first[0].lstrip("# ").strip() if first and first[0].startswith("#") else ""
        print(f"{name:<22} {about}")
    return 0


def add_catalog_commands(sub: argparse._SubParsersAction) -> None:
    """Register `methods` and `presets`."""
    p = sub.add_parser("methods", help="list SRPO and the baselines as settings of the same parts")
    p.add_argument("-v", "--verbose", action="store_true", help="also print each method's description")
    p.set_defaults(handler=methods_command)
    p = sub.add_parser("presets", help="list the configs that ship with srpo (CONFIG may name one)")
    p.set_defaults(handler=presets_command)
