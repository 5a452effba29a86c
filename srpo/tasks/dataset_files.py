"""Reading dataset records from local files (or, when asked explicitly, the hub), for every loader.

A record reader yields (location, record) pairs: `location` names the file and the line (JSONL)
or record (JSON array, Parquet), so every loader's error can say exactly where the bad record is.

    read_records(path)                          .jsonl / .ndjson / .json (JSON Lines, or one JSON
                                                array when the file starts with "[") / .parquet
    record_source(path, hub_id, config, split)  exactly one of a local file or an opt-in hub id
    require_field(record, where, field)         a present, non-blank field or a ValueError naming it
    load_tasks(records, to_task, limit)         Tasks with unique ids (to_task may skip with None)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from srpo.types import Task

Record = dict[str, Any]
Located = Iterator[tuple[str, Record]]


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file; a byte that is not UTF-8 is a ValueError naming the
    file and the line."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:line {lineno}: not UTF-8 text (byte {raw[e.start]:#04x}); "
                                 f"save the file as UTF-8") from None


def _loads(text: str, where: str) -> Any:
    """json.loads, its errors (nesting past Python's recursion limit too) naming `where`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: invalid JSON ({e.msg})") from None
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply to read (a record is a flat object)") from None


def iter_jsonl(path: Path) -> Located:
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:line {lineno}"
        record = _loads(line, where)
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
        yield where, record


def iter_json_array(path: Path) -> Located:
    text = "".join(line for _, line in _lines(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: invalid JSON at line {e.lineno} ({e.msg})") from e
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read (records are flat objects)") from None
    for i, record in enumerate(data):
        where = f"{path}:record {i}"
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
        yield where, record


def _py(value: Any) -> Any:
    """A numpy scalar as its Python value (pandas fallback only)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def iter_parquet(path: Path) -> Located:
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


def _first_char(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as f:  # the readers name a bad byte
        while chunk := f.read(4096):
            if stripped := chunk.lstrip():
                return stripped[0]
    return ""


def read_records(path: str | Path) -> Located:
    """(location, record) pairs of a local JSONL, JSON-array or Parquet file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset file not found: {path} (srpo never downloads data by default; pass a "
            f"local .jsonl/.json/.parquet path, or hub_id=... to opt in to datasets.load_dataset)"
        )
    suffix = path.suffix.lower()
    if suffix == ".json" and _first_char(path) == "[":
        return iter_json_array(path)
    if suffix in (".jsonl", ".json", ".ndjson"):
        return iter_jsonl(path)
    if suffix == ".parquet":
        return iter_parquet(path)
    raise ValueError(f"{path}: unsupported file type {suffix!r}; use .jsonl, .json or .parquet")


def hub_records(hub_id: str, hub_config: str | None, split: str) -> Located:
    """Records of a Hugging Face hub dataset; only reached when the caller passed hub_id."""
    import datasets

    ds = datasets.load_dataset(hub_id, hub_config, split=split)
    for i, record in enumerate(ds):
        yield f"{hub_id}[{split}]:record {i}", dict(record)


def record_source(path: str | Path | None, hub_id: str | None, hub_config: str | None, split: str) -> Located:
    if (path is None) == (hub_id is None):
        raise ValueError("pass exactly one of path= (a local file) or hub_id= (opt-in download)")
    return read_records(path) if path is not None else hub_records(hub_id, hub_config, split)


def require_field(record: Record, where: str, field: str) -> Any:
    """The field's value; absent, null or blank text is an error naming the file and the line
    or record (a task with an empty question would be rolled out and scored as if it were one)."""
    value = record.get(field)
    if value is None:
        raise ValueError(f"{where}: record is missing required field {field!r}")
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{where}: required field {field!r} is empty")
    return value


def load_tasks(
    records: Iterable[tuple[str, Record]],
    to_task: Callable[[int, str, Record], Task | None],
    limit: int | None,
) -> list[Task]:
    """Up to `limit` Tasks; to_task(index, where, record) may return None to skip a record.
    A repeated task id is an error naming both places."""
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for index, (where, record) in enumerate(records):
        if limit is not None and len(tasks) >= limit:
            break
        task = to_task(index, where, record)
        if task is None:
            continue
        if task.task_id in seen:
            raise ValueError(f"{where}: duplicate task id {task.task_id!r} (first at {seen[task.task_id]})")
        seen[task.task_id] = where
        tasks.append(task)
    return tasks
