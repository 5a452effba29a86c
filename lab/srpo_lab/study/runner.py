"""Runs a study's cells, one training run each, resumable at any point.

Layout under the spec's output folder (with blocks and levels: cells/<block>/<setting>/<level>/
<method>/...; a `record: series` study leaves one compact cells/.../seed<k>.json per cell instead,
srpo_lab.study.series, or one archive of them, runs.jsonl.gz, once finished):

    cells/<setting>/<method>/seed<k>/   config.yaml (complete), train.log, metrics.jsonl,
                                        eval/after.json (per-item correctness), result.json
    cells/<setting>/base/seed<k>/       the untrained model's held-out evaluation

A cell is done when its result.json exists; result.json records the config fingerprint, and a
done cell whose spec changed since is an error (never a silent mix of two configs). A cell that
was interrupted resumes from its latest checkpoint (`resume=true`, exact on one process) or, with
none, starts over. Checkpoints are deleted once a cell is done (its metrics and evaluation stay).
Cells run seed-major (every setting and method of seed 0 first), so a partial study is balanced.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from srpo.config import to_dict
from srpo.jsonl import loads_lines
from srpo.record.checkpoint import config_fingerprint, latest_checkpoint
from srpo.record.run_identity import result_fingerprint
from srpo_lab.study.cell_files import code_version
from srpo_lab.study.cell_files import read_json as _read_json
from srpo_lab.study.cell_files import write_json as _write_json
from srpo_lab.study.plan import Cell, is_done, plan_cells, record_path
from srpo_lab.study.spec import StudySpec

__all__ = ["Cell", "CellFailed", "code_version", "inprocess_launcher", "is_done", "iter_results", "plan_cells",
           "read_metrics", "record_path", "run_cell", "run_study", "subprocess_launcher"]

# launch(argv, log_path) -> exit status; argv are `srpo` CLI arguments
Launcher = Callable[[list[str], Path], int]


def subprocess_launcher(argv: list[str], log: Path) -> int:
    """Each cell in a fresh interpreter: what a reader rerunning the cell's command gets."""
    with open(log, "a") as f:
        return subprocess.run([sys.executable, "-m", "srpo.cli", *argv], stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode


def inprocess_launcher(argv: list[str], log: Path) -> int:
    """Cells in this process (tests): same code path, no interpreter start-up per cell."""
    from srpo.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        status = main(argv)
    with open(log, "a") as f:
        f.write(buf.getvalue())
    return status


class CellFailed(RuntimeError):
    pass


def _log_tail(log: Path, lines: int = 15) -> str:
    if not log.exists():
        return "(no log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def read_metrics(path: Path) -> list[dict[str, float]]:
    """metrics.jsonl rows, one per logged step (evaluation rows included)."""
    if not path.exists():
        return []
    return loads_lines(path.read_text(encoding="utf-8"), str(path))  # "\n" only: srpo.jsonl


def _training_totals(rows: list[dict[str, float]]) -> dict[str, float]:
    """What the budget actually was: rollouts, members and tokens generated over the run."""
    steps = [r for r in rows if "rollout/episodes" in r]
    out = {"steps": float(len(steps))}
    for key, name in (("rollout/episodes", "episodes"), ("rollout/members/count", "members"),
                      ("rollout/tokens/generated", "tokens_generated"),
                      # dynamic sampling: generated, counted above, then dropped before the update
                      ("rollout/dynamic/dropped_episodes", "episodes_dropped"),
                      ("rollout/dynamic/dropped_tokens", "tokens_dropped")):
        out[name] = float(sum(r.get(key, 0.0) for r in steps))
    out["train_seconds"] = float(sum(sum(v for k, v in r.items() if k.startswith("time/")) for r in steps))
    return out


def run_cell(spec: StudySpec, cell: Cell, launch: Launcher = subprocess_launcher) -> dict[str, Any]:
    """Runs (or resumes, or skips) one cell; returns its result.json content (a series study's
    cell: its record, srpo_lab.study.series)."""
    if spec.record == "series":
        from srpo_lab.study.series import run_series_cell

        return run_series_cell(spec, cell)
    d = cell.directory(spec.output)
    cfg = spec.cell_config(cell.setting, cell.method, cell.seed, d, **cell.where())
    cfg_dict = to_dict(cfg)
    fingerprint = result_fingerprint(cfg_dict)  # of the resolved config: recorded, for reference
    spec_fingerprint = config_fingerprint(spec.cell_inputs(cell.setting, cell.method, cell.seed, **cell.where()))
    result_path = d / "result.json"
    if result_path.exists():
        done = _read_json(result_path)
        # a cell is identified by what the spec says about it; results written before the spec
        # fingerprint existed are identified by their resolved config, as then
        same = (done.get("spec_fingerprint") == spec_fingerprint if "spec_fingerprint" in done
                else done.get("fingerprint") == fingerprint)
        if not same:
            raise CellFailed(
                f"{cell.label}: {result_path} was produced by another config (the spec or the "
                f"setting's file changed since). Delete the cell folder to rerun it, or restore "
                "the spec"
            )
        return done
    resume = cell.method is not None and (d / "checkpoints").exists() and latest_checkpoint(d) is not None
    if not resume and d.exists():
        shutil.rmtree(d)  # a partial cell without a checkpoint: start over, nothing stale left
    d.mkdir(parents=True, exist_ok=True)
    config_path = d / "config.yaml"
    # always the spec's config (a run rewrites config.yaml with its own overrides, if any)
    config_path.write_text(yaml.safe_dump(cfg_dict, sort_keys=False))
    log = d / "train.log"
    code = code_version()  # at launch: the code the cell's process imports
    start = time.perf_counter()
    if cell.method is None:
        argv = ["eval", str(config_path), "--out", str(d / "eval" / "base.json")]
    else:
        argv = ["train", str(config_path)] + (["resume=true"] if resume else [])
    status = launch(argv, log)
    wall = time.perf_counter() - start
    if status != 0:
        raise CellFailed(f"{cell.label}: `srpo {' '.join(argv)}` exited with {status}; last lines of {log}:\n"
                         f"{_log_tail(log)}")
    eval_file = d / "eval" / ("base.json" if cell.method is None else "after.json")
    if not eval_file.exists():
        raise CellFailed(f"{cell.label}: finished but wrote no {eval_file} (is eval.size 0?)")
    evaluation = _read_json(eval_file)
    result = {
        "setting": cell.setting,
        "method": cell.method or "base",
        "seed": cell.seed,
        "fingerprint": fingerprint,
        "spec_fingerprint": spec_fingerprint,
        "wall_seconds": wall,  # of the last (resumed) part; train_seconds covers every step
        "resumed": resume,
        "code": code,
        "accuracy": evaluation["accuracy"],
        "ci_low": evaluation["ci_low"],
        "ci_high": evaluation["ci_high"],
        "n": evaluation["n"],
        "per_agent": evaluation["per_agent"],
        "task_ids": evaluation["task_ids"],
        "correct": evaluation["correct"],
        **_training_totals(read_metrics(d / "metrics.jsonl")),
    }
    _write_json(result_path, result)
    for heavy in ("checkpoints", "export", "tensorboard"):
        shutil.rmtree(d / heavy, ignore_errors=True)
    return result


def iter_results(spec: StudySpec) -> Iterator[tuple[Cell, dict[str, Any] | None]]:
    """Every planned cell with its result (None when not run yet); a series study's records
    come from its per-run files and its archive (srpo_lab.study.series.read_archive)."""
    archived: dict[str, dict[str, Any]] = {}
    if spec.record == "series":
        from srpo_lab.study.series import read_archive

        archived = read_archive(spec)
    for cell in plan_cells(spec):
        path = record_path(spec, cell)
        yield cell, (_read_json(path) if path.exists() else archived.get(cell.label))


def run_study(
    spec: StudySpec,
    *,
    launch: Launcher = subprocess_launcher,
    max_minutes: float | None = None,
    only: Callable[[Cell], bool] | None = None,
    log: Callable[[str], None] = print,
    jobs: int = 1,
    worker: tuple[int, int] | None = None,
) -> tuple[list[Cell], list[tuple[Cell, str]]]:
    """Runs every pending cell (those `only` accepts) until done or out of time, `jobs` cells at
    a time (each its own process; on a small CPU, several 1-thread cells beat one 2-thread cell).
    A failed cell is reported and the rest go on. Returns (cells done, (cell, error) failures).
    A series study runs its cells in this process, one after the other (its runs are seconds
    long: a process each would double them); `worker` (i, n) takes the i-th of every n
    pending cells, for n worker processes (srpo_lab.study.cli --jobs n)."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if spec.record == "series":
        return _run_series(spec, max_minutes=max_minutes, only=only, log=log, worker=worker)
    if jobs > 1 and launch is inprocess_launcher:
        raise ValueError("jobs > 1 needs the subprocess launcher (cells in one process share global state)")
    spec.output.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    done: list[Cell] = []
    failed: list[tuple[Cell, str]] = []
    durations: list[float] = []
    lock = threading.Lock()
    cells = [c for c in plan_cells(spec) if only is None or only(c)]
    queue = list(enumerate(cells))
    stopped = False

    def pending(cell: Cell) -> bool:
        return not is_done(spec, cell)

    def worker() -> None:
        nonlocal stopped
        while True:
            with lock:
                if not queue or stopped:
                    return
                i, cell = queue.pop(0)
                todo = pending(cell)
                if todo and max_minutes is not None:
                    elapsed = time.perf_counter() - start
                    expected = max(durations) if durations else 0.0
                    if elapsed + expected > 60 * max_minutes:
                        stopped = True
                        left = sum(1 for c in cells if pending(c))
                        log(f"[study] time budget of {max_minutes:g} min reached after {elapsed / 60:.1f} min; "
                            f"{left} cells left: run the same command again to continue")
                        return
                if todo:
                    log(f"[study] {i + 1}/{len(cells)} {cell.label} ...")
            t0 = time.perf_counter()
            try:
                result = run_cell(spec, cell, launch)
            except CellFailed as e:
                with lock:
                    failed.append((cell, str(e)))
                    log(f"[study] FAILED {e}")
                continue
            with lock:
                if todo:
                    durations.append(time.perf_counter() - t0)
                    log(f"[study] {cell.label}: held-out {100 * result['accuracy']:.1f}% of {result['n']} "
                        f"({time.perf_counter() - t0:.0f} s)")
                done.append(cell)

    threads = [threading.Thread(target=worker, name=f"study-{k}") for k in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    order = {c: i for i, c in enumerate(cells)}
    done.sort(key=order.__getitem__)
    failed.sort(key=lambda f: order[f[0]])
    return done, failed


def _run_series(spec: StudySpec, *, max_minutes: float | None, only: Callable[[Cell], bool] | None,
                log: Callable[[str], None], worker: tuple[int, int] | None
                ) -> tuple[list[Cell], list[tuple[Cell, str]]]:
    """A series study's pending cells (this worker's share), in plan order, in this process."""
    from srpo_lab.study.series import read_archive

    archived = set(read_archive(spec))
    cells = [c for c in plan_cells(spec) if (only is None or only(c)) and not is_done(spec, c, archived)]
    index, count = worker or (0, 1)
    mine = cells[index::count]
    start = time.perf_counter()
    durations: list[float] = []
    done: list[Cell] = []
    for i, cell in enumerate(mine):
        expected = max(durations[-20:]) if durations else 0.0
        if max_minutes is not None and time.perf_counter() - start + expected > 60 * max_minutes:
            log(f"[worker {index}] time is up; {len(mine) - i} runs left: run the same command again to continue")
            break
        t0 = time.perf_counter()
        record = run_cell(spec, cell)
        durations.append(time.perf_counter() - t0)
        done.append(cell)
        log(f"[worker {index}] {i + 1}/{len(mine)} {cell.label}: {record['steps']} steps"
            f"{'' if record['error'] is None else ', raised: ' + record['error']} ({durations[-1]:.1f} s)")
    return done, []
