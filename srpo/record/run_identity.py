"""Which config fields a run's identity depends on: the one rule for resuming and for studies.

A run's fingerprint is the hash of its resolved config without the fields that may differ
between two processes computing the same run:

  * LOCATION_FIELDS: where the run lives and whether this launch continues it. Never part of
    what a run computes; a finished study cell is identified by everything else.
  * RESUMABLE_FIELDS: LOCATION_FIELDS plus what a resumed run may change without changing the
    steps already done: the total number of steps (extend a run), CPU threads, the device,
    evaluation and what is written besides the metrics (checkpoint cadence, plots, export).

The trainer stores `resume_fingerprint` in every checkpoint and refuses to resume from one
with another; the study harness keeps `result_fingerprint` in each finished cell's result.json
and refuses a cell whose spec changed since.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from srpo.record.checkpoint import config_fingerprint

LOCATION_FIELDS: tuple[str, ...] = ("output_dir", "resume")
RESUMABLE_FIELDS: tuple[str, ...] = LOCATION_FIELDS + (
    "train.steps", "train.threads", "device", "eval", "checkpoint",
)


def _without(config: Mapping[str, Any], dotted_fields: tuple[str, ...]) -> dict[str, Any]:
    data = copy.deepcopy(dict(config))
    for dotted in dotted_fields:
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.get(p, {})
        node.pop(leaf, None)
    return data


def config_differences(before: Mapping[str, Any], after: Mapping[str, Any], *,
                       skip: tuple[str, ...] = RESUMABLE_FIELDS) -> list[str]:
    """The dotted fields whose values differ between two resolved configs ("train.lr: 0.001 ->
    0.5"; a field one of them lacks shows as <absent>), `skip` and the fields under it left out."""
    absent = object()
    out: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if path and any(path == f or path.startswith(f + ".") for f in skip):
            return
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            for key in list(a) + [k for k in b if k not in a]:
                walk(a.get(key, absent), b.get(key, absent), f"{path}.{key}" if path else str(key))
        elif a != b:
            show = lambda v: "<absent>" if v is absent else repr(v)
            out.append(f"{path}: {show(a)} -> {show(b)}")

    walk(before, after, "")
    return out


def resume_fingerprint(config: Mapping[str, Any]) -> str:
    """The fingerprint a checkpoint must match to be resumed (RESUMABLE_FIELDS left out)."""
    return config_fingerprint(_without(config, RESUMABLE_FIELDS))


def result_fingerprint(config: Mapping[str, Any]) -> str:
    """The identity of a finished run's result (only LOCATION_FIELDS left out)."""
    return config_fingerprint(_without(config, LOCATION_FIELDS))
