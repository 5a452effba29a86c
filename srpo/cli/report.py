"""`srpo report RUN_DIR [--out FILE]`: one self-contained HTML page of a run (srpo.record.report)."""

from __future__ import annotations

import argparse
import sys


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from srpo.cli.destination import check_destination
    from srpo.record.report import REPORT_FILE, DiskFullError, write_report

    try:
        if Path(args.run_dir).is_dir() or args.out:  # a missing run is named as such below
            check_destination(args.out or Path(args.run_dir) / REPORT_FILE,
                              "--out" if args.out else "the report")
        path = write_report(args.run_dir, args.out)
    except ValueError as e:  # ReportError (a missing or damaged run), an unwritable destination
        print(f"srpo report: {e}", file=sys.stderr)
        return 2
    except DiskFullError as e:  # exit 1, as `srpo train` on a full disk: the run itself is fine
        hint = "nothing was changed (an earlier report stays as it was): free space and run srpo report again"
        print(
            f"srpo report: {e.with_hint(hint)}",
            file=sys.stderr,
        )
        return 1
    print(path)
    return 0


def add_report_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write one self-contained HTML report of a run (opens from disk)",
        description="Config and budget, held-out accuracy before/after with the paired "
        "test, learning curves, an episode browser of the active sets, and the "
        "before/after evaluation diff, in one HTML file with everything inlined.",
    )
    p.add_argument("run_dir", help="a run directory (srpo train's output_dir)")
    p.add_argument("--out", help="the HTML file to write (default: RUN_DIR/report.html)")
    p.set_defaults(handler=_cmd_report)
