"""Command line of the study harness (benchmarks/study.py calls `main`; so does
`python -m srpo_lab.study.cli`).

    python benchmarks/study.py studies/cpu_onpolicy/cpu_main.yaml --jobs 2 --max-minutes 110
    python benchmarks/study.py studies/testbed_mechanism/spec.yaml --jobs 2   # a series study
"""

from __future__ import annotations

import argparse
import os
import subprocess
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
    p.add_argument("spec", help="study spec (studies/<name>/*.yaml)")
    p.add_argument("--quick", action="store_true", help="the spec's smoke-sized `quick` variant")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="start no new cell after this many minutes (resume later with the same command)")
    p.add_argument("--settings", help="only these settings (comma-separated)")
    p.add_argument("--methods", help="only these methods (comma-separated; 'base' = the base evaluations)")
    p.add_argument("--seeds", help="only these seeds (comma-separated)")
    p.add_argument("--blocks", help="only these blocks (comma-separated; a spec with `blocks`)")
    p.add_argument("--jobs", type=int, default=1,
                   help="cells run at once, each in its own process (give each train.threads=1 on a small CPU); "
                   "a series study: worker processes that split its pending runs")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # i of --jobs n
    p.add_argument("--pack", action="store_true",
                   help="a series study: move its per-run records into one archive, OUTPUT/runs.jsonl.gz")
    p.add_argument("--list", action="store_true", help="list the cells and their state; run nothing")
    p.add_argument("--report-only", action="store_true", help="only rewrite results.md, summary.json, plots")
    p.add_argument("--in-process", action="store_true",
                   help="run cells in this process (debugging; the default is one fresh process per cell)")
    return p


def main(argv: list[str] | None = None) -> int:
    from srpo_lab.study.report import write_report
    from srpo_lab.study.runner import (
        inprocess_launcher,
        is_done,
        plan_cells,
        record_path,
        run_study,
        subprocess_launcher,
    )
    from srpo_lab.study.series import archive_path, pack_archive, read_archive
    from srpo_lab.study.spec import load_spec

    args = build_parser().parse_args(argv)
    try:
        spec = load_spec(args.spec, quick=args.quick)
        settings, methods, blocks = _names(args.settings), _names(args.methods), _names(args.blocks)
        seeds = None if args.seeds is None else {int(s) for s in _names(args.seeds) or ()}
        for what, names, known in (("setting", settings, {s.name for s in spec.settings}),
                                   ("method", methods, {m.name for m in spec.methods} | {"base"}),
                                   ("seed", seeds, set(spec.seeds)),
                                   ("block", blocks, {b.name for b in spec.blocks if b.name is not None})):
            if names is not None and names - known:
                raise ConfigError(f"unknown {what}(s) {sorted(names - known)} (known: {sorted(known)})")
        # every cell config must build before anything runs: a typo fails now, not hours later
        # (one seed of each: the cells of a seed differ from another seed's only in `seed`)
        for cell in {cell.parts: cell for cell in plan_cells(spec)}.values():
            spec.cell_config(cell.setting, cell.method, cell.seed, cell.directory(spec.output), **cell.where())
    except (ConfigError, ValueError) as e:
        print(f"study: {e}", file=sys.stderr)
        return 2

    def only(cell) -> bool:
        return ((settings is None or cell.setting in settings)
                and (methods is None or (cell.method or "base") in methods)
                and (seeds is None or cell.seed in seeds)
                and (blocks is None or cell.block in blocks))

    if args.list:
        archived = set(read_archive(spec)) if spec.record == "series" else set()
        for cell in plan_cells(spec):
            if only(cell):
                d = cell.directory(spec.output)
                state = ("done" if is_done(spec, cell, archived) else ("partial" if d.exists() else "pending"))
                where = archive_path(spec) if cell.label in archived else record_path(spec, cell)
                print(f"{state:<8} {cell.label:<40} {where}")
        return 0
    if args.pack:
        if spec.record != "series":
            print("study: --pack is for `record: series` studies (an evaluation cell is a folder of files)",
                  file=sys.stderr)
            return 2
        print(f"[study] archive: {pack_archive(spec)}")
        return 0
    if args.worker is not None:  # one of --jobs n worker processes of a series study
        run_study(spec, only=only, max_minutes=args.max_minutes, worker=(args.worker, args.jobs),
                  log=lambda line: print(line, flush=True))
        return 0
    failed = []
    if spec.record == "series" and args.jobs > 1 and not args.report_only:
        status = _series_workers(argv if argv is not None else sys.argv[1:], args.jobs)
        paths = write_report(spec)
        print(f"[study] report: {paths['markdown']}")
        return status
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


def _series_workers(argv: list[str], jobs: int) -> int:
    """Starts `jobs` worker processes (one torch thread each) of this command line, each running
    the i-th of every `jobs` pending cells; waits for all. Returns the worst exit status."""
    procs = [subprocess.Popen([sys.executable, "-m", "srpo_lab.study.cli", *argv, "--worker", str(i)],
                              env={**os.environ, "OMP_NUM_THREADS": "1"}) for i in range(jobs)]
    return max(proc.wait() for proc in procs)


if __name__ == "__main__":
    sys.exit(main())
