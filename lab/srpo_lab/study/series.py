"""Cells of a `record: series` study: a short training run kept as its per-step series.

A study of many short runs (the testbed mechanism study: 2,040 runs of seconds each) evaluates
nothing apart and needs no run folder: each cell is trained in this process and leaves one
compact record, written atomically when the run ends (a cell with a record is done):

    cells/<block>/<setting>/<level>/<method>/seed<k>.json
      {"run": {block, setting, level, method, seed}, "config": FILE, "overrides": [...],
       "code": COMMIT, "steps": N, "wall_seconds": S, "error": None | "Type: message",
       "series": {metric: [value per step, None where the step did not log it]}}

The series are the spec's `report.metrics`; a metric with `{k}` (e.g. `ratio/k{k}/log_std`) is
kept for every set size k the run logged, and `grad_norm/mean` is the mean over the policies of
their `grad_norm/<policy>` (the trainer logs one per policy). Values keep 5 significant digits.
A run that raises (a diverged run: NaN in a loss) is a result too: its record holds the error
and no steps. What the series mean (a collapse, a slope) is the study's own analysis.

A finished study may keep its records as one archive, <output>/runs.jsonl.gz (one line per
cell: {"cell": label, "record": ...}; `pack_archive`); the harness counts archived cells as
done, so the study resumes (new runs are written as files beside the archive) and its reports
read both.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from srpo_lab.study.cell_files import code_version, read_json, write_json
from srpo_lab.study.plan import plan_cells, record_path
from srpo_lab.study.spec import StudySpec

ARCHIVE = "runs.jsonl.gz"
GRAD_NORM_MEAN = "grad_norm/mean"


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.5g}")


def series_keys(metrics: tuple[str, ...], history: list[dict[str, float]]) -> list[str]:
    """The metrics, each `{k}` template expanded over the set sizes found in the history."""
    logged = {key for row in history for key in row}
    keys = []
    for metric in metrics:
        if "{k}" not in metric:
            keys.append(metric)
            continue
        pattern = re.compile("^" + re.escape(metric).replace(re.escape("{k}"), r"(\d+)") + "$")
        sizes = sorted({int(m.group(1)) for key in logged if (m := pattern.match(key))})
        keys += [metric.format(k=k) for k in sizes]
    return keys


def series_of(history: list[dict[str, float]], metrics: tuple[str, ...]) -> dict[str, list[float | None]]:
    """{metric: per-step values} of a run's logged rows (None where a step lacks the metric)."""
    out = {key: [_round(row.get(key)) for row in history]
           for key in series_keys(metrics, history) if key != GRAD_NORM_MEAN}
    grads = [[v for k, v in row.items() if k.startswith("grad_norm/")] for row in history]
    out[GRAD_NORM_MEAN] = [_round(sum(g) / len(g)) if g else None for g in grads]
    return out


def run_series_cell(spec: StudySpec, cell, scratch: Path | None = None) -> dict[str, Any]:
    """Trains one cell in this process, writes its record (atomically) and returns it. The run
    folder is temporary: made under `scratch` (default: a fresh temporary folder), then deleted."""
    from srpo.config.loading import check_environment
    from srpo.record.checkpoint import config_fingerprint
    from srpo.train.trainer import Trainer

    own_scratch = scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="srpo-series-")) if own_scratch else scratch
    run_dir = scratch / cell.label.replace("/", "_")
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        config, overrides = spec.cell_overrides(cell.setting, cell.method, cell.seed, run_dir, **cell.where())
        cfg = spec.cell_config(cell.setting, cell.method, cell.seed, run_dir, **cell.where())
        check_environment(cfg)
        start = time.perf_counter()
        error = None
        try:
            with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # a line per step
                history = Trainer(cfg).train().history
        except (ValueError, RuntimeError, FloatingPointError) as e:  # a diverged run is a result
            history, error = [], f"{type(e).__name__}: {e}"
        wall = time.perf_counter() - start
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    record = {"run": {"block": cell.block, "setting": cell.setting, "level": cell.level,
                      "method": cell.method, "seed": cell.seed},
              "config": config, "overrides": overrides[:-1],  # output_dir was temporary
              "code": code_version(),
              "spec_fingerprint": config_fingerprint(spec.cell_inputs(cell.setting, cell.method, cell.seed,
                                                                       **cell.where())),
              "steps": len(history), "wall_seconds": round(wall, 2), "error": error,
              "series": series_of(history, spec.report_metrics)}
    path = record_path(spec, cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record, compact=True)
    return record


def archive_path(spec: StudySpec) -> Path:
    return spec.output / ARCHIVE


def read_archive(spec: StudySpec) -> dict[str, dict[str, Any]]:
    """{cell label: record} of the study's archive ({} without one)."""
    path = archive_path(spec)
    if not path.is_file():
        return {}
    out: dict[str, dict[str, Any]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            try:
                row = json.loads(line)
                label, record = row["cell"], row["record"]
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}, line {number}: not a {{cell, record}} line ({e})") from e
            if label in out:
                raise ValueError(f"{path}, line {number}: cell {label} appears twice")
            out[label] = record
    return out


def pack_archive(spec: StudySpec, *, remove: bool = True) -> Path:
    """Writes every record of the study (archive and files, in plan order) into one archive and,
    with `remove`, deletes the per-run files it now holds. The bytes depend only on the records
    (no time stamp in the gzip header), so packing twice gives the same file."""
    from srpo.disk import atomic_write_bytes

    archived = read_archive(spec)
    rows, files = [], []
    for cell in plan_cells(spec):
        path = record_path(spec, cell)
        record = read_json(path) if path.exists() else archived.get(cell.label)
        if record is None:
            continue
        rows.append(json.dumps({"cell": cell.label, "record": record}, separators=(",", ":")) + "\n")
        if path.exists():
            files.append(path)
    path = archive_path(spec)
    atomic_write_bytes(path, gzip.compress("".join(rows).encode("utf-8"), mtime=0))
    if remove:
        for f in files:
            f.unlink()
        for d in sorted((spec.output / "cells").rglob("*"), reverse=True) if (spec.output / "cells").exists() else []:
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        if (spec.output / "cells").is_dir() and not any((spec.output / "cells").iterdir()):
            (spec.output / "cells").rmdir()
    return path
