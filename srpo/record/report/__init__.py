"""`srpo report RUN_DIR`: one self-contained HTML file of a run (srpo.record.report.data collects,
srpo.record.report.render writes; srpo_lab.study.page links a study's cells)."""

from __future__ import annotations

from pathlib import Path

from srpo.disk import DiskFullError, atomic_write_text, writing
from srpo.record.report.data import ReportError, collect_run
from srpo.record.report.render import render_html

REPORT_FILE = "report.html"


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Writes the report of `run_dir` to `out` (default RUN_DIR/report.html); returns the path.
    Raises ReportError naming what is missing or damaged, and DiskFullError naming the file on a
    full disk (its temp file removed, an earlier report left as it was)."""
    html = render_html(collect_run(run_dir))
    path = Path(out) if out is not None else Path(run_dir) / REPORT_FILE
    with writing(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, html)


__all__ = ["REPORT_FILE", "DiskFullError", "ReportError", "collect_run", "render_html", "write_report"]
