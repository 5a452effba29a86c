"""Command line of the study harness (benchmarks/study.py calls `main`)."""

from __future__ import annotations

import argparse
import sys

from srpo.config import ConfigError


def _names(text: str | None) -> set[str] | None:
    return None if text is None else {t.strip() for t in text.split(",") if t.strip()}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="study",
        description="Run a study (settings x methods x seeds, equal budgets) from a YAML spec; "
        "rerun the same command to resume where it stopped.",
    )
    p.add_argument("spec", help="study spec (benchmarks/studies/*.yaml)")
    p.add_argument("--quick", action="store_true", help="the spec's smoke-sized `quick` variant")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="start no new cell after this many minutes (resume later with the same command)")
    p.add_argument("--settings", help="only these settings (comma-separated)")
    p.add_argument("--methods", help="only these methods (comma-separated; 'base' = the base evaluations)")
    p.add_argument("--seeds", help="only these seeds (comma-separated)")
    p.add_argument("--jobs", type=int, default=1,
                   help="cells run at once, each in its own process (give each train.threads=1 on a small CPU)")
    p.add_argument("--list", action="store_true", help="list the cells and their state; run nothing")
    p.add_argument("--report-only", action="store_true", help="only rewrite results.md, summary.json, plots")
    p.add_argument("--in-process", action="store_true",
                   help="run cells in this process (debugging; the default is one fresh process per cell)")
    return p


def main(argv: list[str] | None = None) -> int:
    from srpo.study.report import write_report
    from srpo.study.runner import inprocess_launcher, plan_cells, run_study, subprocess_launcher
    from srpo.study.spec import load_spec

    args = build_parser().parse_args(argv)
    try:
        spec = load_spec(args.spec, quick=args.quick)
        settings, methods = _names(args.settings), _names(args.methods)
        seeds = None if args.seeds is None else {int(s) for s in _names(args.seeds) or ()}
        for what, names, known in (("setting", settings, {s.name for s in spec.settings}),
                                   ("method", methods, {m.name for m in spec.methods} | {"base"}),
                                   ("seed", seeds, set(spec.seeds))):
            if names is not None and names - known:
                raise ConfigError(f"unknown {what}(s) {sorted(names - known)} (known: {sorted(known)})")
        # every cell config must build before anything runs: a typo fails now, not hours later
        for cell in plan_cells(spec):
            spec.cell_config(cell.setting, cell.method, cell.seed, cell.directory(spec.output))
    except (ConfigError, ValueError) as e:
        print(f"study: {e}", file=sys.stderr)
        return 2

    def only(cell) -> bool:
        return ((settings is None or cell.setting in settings)
                and (methods is None or (cell.method or "base") in methods)
                and (seeds is None or cell.seed in seeds))

    if args.list:
        for cell in plan_cells(spec):
            if only(cell):
                d = cell.directory(spec.output)
                state = "done" if (d / "result.json").exists() else ("partial" if d.exists() else "pending")
                print(f"{state:<8} {cell.label:<40} {d}")
        return 0
    failed = []
    if not args.report_only:
        launch = inprocess_launcher if args.in_process else subprocess_launcher
        try:
            _, failed = run_study(spec, launch=launch, max_minutes=args.max_minutes, only=only, jobs=args.jobs)
        except ValueError as e:
            print(f"study: {e}", file=sys.stderr)
            return 2
    paths = write_report(spec)
    print(f"[study] report: {paths['markdown']}")
    if failed:
        print(f"[study] {len(failed)} cell(s) failed: " + ", ".join(c.label for c, _ in failed), file=sys.stderr)
        return 1
    return 0
