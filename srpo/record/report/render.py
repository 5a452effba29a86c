"""The report's HTML: one self-contained file (styles, plotly.js, the data and the app inlined).

No network and no server: the file opens from disk. The charts are plotly.js's basic bundle
(scatter, bar; MIT), vendored from the npm package plotly.js-basic-dist-min 4.1.1 as
assets/plotly-basic.min.js (1.2 MB; the full bundle of the plotly Python package is 4.8 MB and
took 1.6 s to parse here); the episode browser is plain JavaScript (assets/report.js).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from srpo.jsonl import escape_unsafe

_MARKERS = ("/*TITLE*/", "/*CSS*/", "/*PLOTLY*/", "/*DATA*/", "/*APP*/")


def _asset(name: str) -> str:
    return resources.files("srpo.record.report").joinpath("assets", name).read_text(encoding="utf-8")


def _script_safe(text: str, what: str) -> str:
    """Text placed inside <script>: it must not close the element."""
    if "</script" in text.lower():
        raise ValueError(f"{what} contains '</script' and cannot be inlined")
    return text


def data_json(data: dict[str, Any]) -> str:
    """The data as JSON safe inside <script type="application/json">: '<' is escaped as \\u003c,
    so no model output can close the element or open a comment."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    return escape_unsafe(text).replace("<", "\\u003c")  # U+2028/9, U+0085, lone surrogates


def render_html(data: dict[str, Any]) -> str:
    """The whole report as one HTML string."""
    from html import escape

    template = _asset("report.html")
    pieces = {
        "/*TITLE*/": escape(f"srpo report: {data['run']['name']}"),
        "/*CSS*/": _asset("report.css"),
        "/*PLOTLY*/": _script_safe(_asset("plotly-basic.min.js"), "plotly-basic.min.js"),
        "/*DATA*/": data_json(data),
        "/*APP*/": _script_safe(_asset("report.js"), "report.js"),
    }
    out, rest = [], template
    for marker in _MARKERS:  # split once per marker: inserted text is never searched again
        before, sep, rest = rest.partition(marker)
        if not sep:
            raise ValueError(f"report template lacks {marker}")
        out += [before, pieces[marker]]
    out.append(rest)
    return "".join(out)
