"""GSM8K and MATH-500 as Tasks, from local files the user already has.

Nothing is downloaded unless the caller passes a hub id explicitly (`hub_id=`), which goes
through `datasets.load_dataset`. Local files: JSON Lines (.jsonl / .json, one object a line)
or Parquet (.parquet). Errors name the file, the line (JSONL) or record (Parquet) and the field.

GSM8K record:   {"question": str, "answer": "<worked solution> #### <final>"}
MATH-500 record: {"problem": str, "answer": str, "solution"?, "subject"?, "level"?,
                  "unique_id"?}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from srpo.types import Task

Record = dict[str, Any]


def _iter_jsonl(path: Path) -> Iterator[tuple[str, Record]]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:line {lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: invalid JSON ({e.msg})") from e
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            yield where, record


def _iter_parquet(path: Path) -> Iterator[tuple[str, Record]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - depends on the environment
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError(f"reading {path} needs pyarrow or pandas") from e
        rows = [{k: _py(v) for k, v in r.items()} for r in pd.read_parquet(path).to_dict("records")]
    else:
        rows = pq.read_table(path).to_pylist()  # plain Python values, no numpy scalars
    for i, record in enumerate(rows):
        yield f"{path}:record {i}", record


def _py(value: Any) -> Any:
    """A numpy scalar as its Python value (pandas fallback only)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def read_records(path: str | Path) -> Iterator[tuple[str, Record]]:
    """(location, record) pairs of a local JSONL or Parquet file; location names line/record."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset file not found: {path} (srpo never downloads data by default; pass a "
            f"local .jsonl/.parquet path, or hub_id=... to opt in to datasets.load_dataset)"
        )
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return _iter_jsonl(path)
    if suffix == ".parquet":
        return _iter_parquet(path)
    raise ValueError(f"{path}: unsupported file type {suffix!r}; use .jsonl or .parquet")


def _hub_records(hub_id: str, hub_config: str | None, split: str) -> Iterator[tuple[str, Record]]:
    """Records of a Hugging Face hub dataset; only reached when the caller passed hub_id."""
    import datasets

    ds = datasets.load_dataset(hub_id, hub_config, split=split)
    for i, record in enumerate(ds):
        yield f"{hub_id}[{split}]:record {i}", dict(record)


def _require(record: Record, where: str, field: str) -> Any:
    value = record.get(field)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{where}: record is missing required field {field!r}")
    return value


def _load(
    records: Iterable[tuple[str, Record]],
    to_task: Callable[[int, str, Record], Task],
    limit: int | None,
) -> list[Task]:
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for index, (where, record) in enumerate(records):
        if limit is not None and len(tasks) >= limit:
            break
        task = to_task(index, where, record)
        if task.task_id in seen:
            raise ValueError(
                f"{where}: duplicate task id {task.task_id!r} (first at {seen[task.task_id]})"
            )
        seen[task.task_id] = where
        tasks.append(task)
    return tasks


def _source(path: str | Path | None, hub_id: str | None, hub_config: str | None, split: str):
    if (path is None) == (hub_id is None):
        raise ValueError("pass exactly one of path= (a local file) or hub_id= (opt-in download)")
    return read_records(path) if path is not None else _hub_records(hub_id, hub_config, split)


def gsm8k_final_answer(solution: str) -> str | None:
    """The final answer after the last "####" of a GSM8K solution, commas removed, else None."""
    if "####" not in solution:
        return None
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return final or None


def load_gsm8k(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = "main",
    split: str = "test",
    limit: int | None = None,
    id_prefix: str = "gsm8k",
) -> list[Task]:
    """GSM8K as Tasks: prompt = question, answer = the number after "####" (commas removed).

    path: a local .jsonl/.parquet file; or hub_id (e.g. "openai/gsm8k", with hub_config and
    split) to opt in to a download. task_id = f"{id_prefix}/{split}/{index}" (file order).
    The worked solution is kept in metadata["solution"].
    """
    records = _source(path, hub_id, hub_config, split)

    def to_task(index: int, where: str, record: Record) -> Task:
        question = str(_require(record, where, "question"))
        solution = str(_require(record, where, "answer"))
        final = gsm8k_final_answer(solution)
        if final is None:
            raise ValueError(f"{where}: field 'answer' has no final answer after '####'")
        return Task(
            task_id=f"{id_prefix}/{split}/{index}",
            prompt=question,
            answer=final,
            source="gsm8k",
            metadata={"solution": solution, "record": where},
        )

    return _load(records, to_task, limit)


def load_math500(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = None,
    split: str = "test",
    limit: int | None = None,
    id_prefix: str = "math500",
) -> list[Task]:
    """MATH-500 as Tasks: prompt = problem, answer = answer (LaTeX, as given).

    path: a local .jsonl/.parquet file; or hub_id (e.g. "HuggingFaceH4/MATH-500") to opt in to
    a download. task_id = f"{id_prefix}/{unique_id}" when the record has one, else
    f"{id_prefix}/{split}/{index}". solution, subject and level go to metadata when present.
    """
    records = _source(path, hub_id, hub_config, split)

    def to_task(index: int, where: str, record: Record) -> Task:
        problem = str(_require(record, where, "problem"))
        answer = str(_require(record, where, "answer")).strip()
        unique_id = record.get("unique_id")
        task_id = f"{id_prefix}/{unique_id}" if unique_id else f"{id_prefix}/{split}/{index}"
        metadata = {k: record[k] for k in ("solution", "subject", "level", "unique_id")
                    if record.get(k) is not None}
        metadata["record"] = where
        return Task(task_id=task_id, prompt=problem, answer=answer, source="math500",
                    metadata=metadata)

    return _load(records, to_task, limit)
