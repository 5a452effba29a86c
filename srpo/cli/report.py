"""`srpo report RUN_DIR [--out FILE]`: one self-contained HTML page of a run (srpo.train.report)."""

from __future__ import annotations

import argparse
import sys


def _cmd_report(args: argparse.Namespace) -> int:
    from srpo.train.report import DiskFullError, ReportError, write_report

    try:
        path = write_report(args.run_dir, args.out)
    except ReportError as e:  # a missing or damaged run directory: one line naming it
        print(f"srpo report: {e}", file=sys.stderr)
        return 2
    except DiskFullError as e:  # exit 1, as `srpo train` on a full disk: the run itself is fine
        print(f"srpo report: {e.with_hint('nothing was changed (an earlier report stays as it was): free space and run srpo report again')}",
              file=sys.stderr)
        return 1
    print(path)
    return 0


def add_report_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write one self-contained HTML report of a run (opens from disk)",
                       description="Config and budget, held-out accuracy before/after with the paired "
                       "test, learning curves, an episode browser of the active sets, and the "
                       "before/after evaluation diff, in one HTML file with everything inlined.")
    p.add_argument("run_dir", help="a run directory (srpo train's output_dir)")
    p.add_argument("--out", help="the HTML file to write (default: RUN_DIR/report.html)")
    p.set_defaults(handler=_cmd_report)
