"""A study's report page: SPEC.output/report.html, a table of its cells linking each cell's own
report (RUN/report.html, written by `srpo train` at the end of the cell's run)."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from srpo.disk import atomic_write_text
from srpo.record.report import REPORT_FILE

_STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#1d2430}
table{border-collapse:collapse}th,td{border-bottom:1px solid #e6e9ee;padding:3px 10px;text-align:left}
th{background:#f0f2f5}.hint{color:#5b6472}"""


def write_study_page(output: Path, title: str, cells: list[dict[str, Any]]) -> Path:
    """cells: {"label", "dir" (the cell's folder), "accuracy", "ci_low", "ci_high", "done"} in
    plan order. A link appears where the cell's report exists; the rest say why not."""
    rows = []
    for c in cells:
        report = Path(c["dir"]) / REPORT_FILE
        if report.is_file():
            link = f'<a href="{escape(report.relative_to(output).as_posix())}">report</a>'
        elif not c["done"]:
            link = '<span class="hint">not run yet</span>'
        else:
            link = '<span class="hint">no report (a base evaluation, or checkpoint.report: false)</span>'
        acc = "-" if c.get("accuracy") is None else (
            f"{100 * c['accuracy']:.1f}% [{100 * c['ci_low']:.1f}, {100 * c['ci_high']:.1f}]")
        rows.append(f"<tr><td>{escape(c['label'])}</td><td>{acc}</td><td>{link}</td></tr>")
    html = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>"
            '<p>Tables and plots: <a href="results.md">results.md</a>. Each trained cell links its own '
            "report (learning curves, episode browser, evaluation diff).</p>"
            "<table><tr><th>cell (setting/method/seed)</th><th>held-out accuracy [95% CI]</th><th></th></tr>"
            + "".join(rows) + "</table></body></html>\n")
    return atomic_write_text(output / REPORT_FILE, html)  # whole or not at all, even on a full disk
