"""Everything a run's report shows, read from its directory into one JSON-able dict.

    data = collect_run("runs/smoke")     # ReportError naming the file when something is missing or damaged

Reads RUN/config.yaml, RUN/metrics.jsonl, RUN/episodes/step-*.jsonl.gz, RUN/eval/<label>.json and
RUN/eval/<label>.episodes.jsonl.gz. Nothing here renders; srpo.record.report.render turns the dict into HTML.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from srpo.config.errors import ConfigError
from srpo.config.yaml_reader import load_yaml, read_config_text
from srpo.record import episodes_log
from srpo.record.accuracy import paired_comparison
from srpo.record.drift import drift_warnings
from srpo.record.metrics_log import read_metrics


class ReportError(ValueError):
    """A run directory the report cannot be made from; the message names the problem."""


def _finite(x: Any) -> Any:
    """JSON has no NaN or inf: they become null (the charts show a gap)."""
    return x if not isinstance(x, float) or math.isfinite(x) else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ReportError(f"{path} is not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path} does not hold a JSON object")
    return data


def _eval_record(path: Path) -> dict[str, Any]:
    """RUN/eval/<label>.json, its shape checked (what srpo.record.evaluate writes): `task_ids`
    (text) and `correct` (true / false) of one length, `step` a number or absent; a file of
    another shape is a ReportError naming it and the field, not a KeyError later."""
    data = _read_json(path)
    ids, correct, step = data.get("task_ids"), data.get("correct"), data.get("step")
    problem = (
        "no 'task_ids' list of task ids" if not isinstance(ids, list) or not all(isinstance(t, str) for t in ids)
        else "no 'correct' list of true / false" if not isinstance(correct, list)
        or not all(isinstance(c, (bool, int)) for c in correct)
        else f"'correct' has {len(correct)} entries for {len(ids)} task ids" if len(correct) != len(ids)
        else "'step' is not a step number" if step is not None and (not isinstance(step, int) or isinstance(step, bool))
        else None
    )
    if problem is not None:
        raise ReportError(f"{path} is not an evaluation file srpo wrote ({problem})")
    return data


def _config(run: Path) -> dict[str, Any]:
    path = run / "config.yaml"
    if not path.is_file():
        raise ReportError(f"{run} has no config.yaml: not a run directory (srpo train writes one)")
    try:
        cfg = load_yaml(read_config_text(path), str(path))  # bounded: a run dir may hold anything
    except (OSError, ConfigError) as e:
        raise ReportError(f"{path} is not readable YAML ({e})") from None
    if not isinstance(cfg, dict):
        raise ReportError(f"{path} does not hold a config mapping")
    return cfg


def _metrics(run: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training rows, evaluation rows) of RUN/metrics.jsonl."""
    try:
        rows = read_metrics(run)
    except FileNotFoundError:
        raise ReportError(f"{run} has no metrics.jsonl: the run logged no step yet") from None
    except ValueError as e:
        raise ReportError(str(e)) from None
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval/accuracy" in r]
    return train, evals


def _series(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """{"steps": [N], "series": {key: [N] values or null}} of the training rows."""
    keys = sorted({k for r in rows for k in r if k != "step"})
    return {"steps": [r["step"] for r in rows],
            "series": {k: [_finite(r.get(k)) for r in rows] for k in keys}}


def _final_answers(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The outputs of an episode's last transition: what its final answer was read from, and
    those it did not read (the singletons of unconsumed outputs the transition left out,
    marked "unread")."""
    source = lambda t: t.get("unconsumed_from") or t["event"]
    last = source(rec["transitions"][-1])
    return [{"agent": m["agent"], "text": m["text"], **({"unread": True} if t.get("unconsumed_from") else {})}
            for t in rec["transitions"] if source(t) == last for m in t["members"]]


def _eval_episodes(run: Path, label: str) -> dict[str, dict[str, Any]]:
    path = run / "eval" / f"{label}.episodes.jsonl.gz"
    if not path.is_file():
        return {}
    try:
        return {r["task_id"]: r for r in episodes_log.read_records(path, strict=True)}
    except ValueError as e:
        raise ReportError(str(e)) from None


def _evaluation(run: Path) -> dict[str, Any]:
    """Before / after accuracy, the paired test, and per problem the answers of both."""
    files = {p.stem: p for p in sorted((run / "eval").glob("*.json"))}
    evals = {name: _eval_record(p) for name, p in files.items()}
    # in run order: before, step-N by step, after
    order = {n: (n != "before", n == "after", e.get("step") or 0) for n, e in evals.items()}
    evals = dict(sorted(evals.items(), key=lambda item: order[item[0]]))
    out: dict[str, Any] = {"runs": [
        {k: _finite(e.get(k)) for k in ("label", "step", "workflow", "n", "accuracy", "ci_low", "ci_high", "per_agent")}
        | {"name": name} for name, e in evals.items()]}
    before, after = evals.get("before"), evals.get("after")
    if not (before and after):
        return out
    if before.get("task_ids") != after.get("task_ids"):
        raise ReportError(f"{files['before']} and {files['after']} evaluate different problems")
    c = paired_comparison(before["correct"], after["correct"])
    out["paired"] = {"n": c.n, "before": c.before, "after": c.after, "diff": c.diff.estimate,
                     "diff_low": c.diff.low, "diff_high": c.diff.high, "gained": c.gained,
                     "lost": c.lost, "p_value": c.p_value}
    eb, ea = _eval_episodes(run, "before"), _eval_episodes(run, "after")
    problems = []
    for tid, cb, ca in zip(before["task_ids"], before["correct"], after["correct"]):
        b, a = eb.get(tid), ea.get(tid)
        ref = a or b or {}
        problems.append({
            "task_id": tid, "question": ref.get("question"), "gold": ref.get("gold"),
            "before": {"correct": bool(cb), "reward": b and b["reward"], "answers": b and _final_answers(b)},
            "after": {"correct": bool(ca), "reward": a and a["reward"], "answers": a and _final_answers(a)},
        })
    out["problems"] = problems
    return out


def _budget(cfg: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the run planned and what it spent (rollouts, members, tokens, seconds)."""
    t = cfg.get("train", {})

    def total(key: str) -> float:
        return float(sum(r.get(key) or 0.0 for r in rows))

    return {
        "workflow": cfg.get("workflow", {}).get("name"),
        "method": t.get("method"),
        "model": cfg.get("model", {}).get("name"),
        "policies": cfg.get("policies", {}).get("kind"),
        "steps_planned": t.get("steps"),
        "steps_done": len(rows),
        "tasks_per_step": t.get("tasks_per_step"),
        "group_size": cfg.get("group_size"),
        "episodes": total("rollout/episodes"),
        "members": total("rollout/members/count"),
        "tokens_generated": total("rollout/tokens/generated"),
        "episodes_dropped": total("rollout/dynamic/dropped_episodes"),
        "train_seconds": float(sum(sum(v or 0.0 for k, v in r.items() if k.startswith("time/")) for r in rows)),
    }


def _episodes(run: Path) -> list[dict[str, Any]]:
    out = []
    for path, _ in episodes_log.step_files(run):
        try:
            out += episodes_log.read_records(path, strict=True)
        except ValueError as e:
            raise ReportError(str(e)) from None
    return out


def collect_run(run_dir: str | Path) -> dict[str, Any]:
    """The report's data (module doc). Raises ReportError naming a missing or damaged file."""
    run = Path(run_dir)
    if not run.exists():
        raise ReportError(f"no run directory at {run}")
    if not run.is_dir():
        raise ReportError(f"{run} is not a directory (give a run directory: srpo report RUN_DIR)")
    cfg = _config(run)
    train, evals = _metrics(run)
    return {
        "run": {"name": run.resolve().name},
        "config": cfg,
        "budget": _budget(cfg, train),
        "metrics": _series(train),
        # drifts the console warned about, recomputed from the whole log (srpo.record.drift)
        "warnings": [w.line() for w in drift_warnings(train)],
        "eval_rows": [{k: _finite(v) for k, v in r.items()} for r in evals],
        "evaluation": _evaluation(run),
        "episodes": _episodes(run),
    }
