"""The mechanism study's plan: its spec (blocks of presets x levels x methods x seeds) and the
runs it lists, in priority order. Read by the runner (srpo.study.mechanism) and the report
(srpo.study.mechanism_report)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srpo.config.yaml_reader import load_yaml, read_config_text


@dataclass(frozen=True)
class Run:
    block: str
    preset: str
    level: str
    method: str
    seed: int

    @property
    def label(self) -> str:
        return f"{self.block}/{self.preset}/{self.level}/{self.method}/seed{self.seed}"

    def record_path(self, output: Path) -> Path:
        return output / "cells" / self.block / self.preset / self.level / self.method / f"seed{self.seed}.json"


def load_spec(path: str | Path) -> dict[str, Any]:
    spec = load_yaml(read_config_text(Path(path)), f"study spec {str(path)!r}")  # bounded, one line
    for key in ("name", "output", "presets", "methods", "blocks"):  # "levels" is a YAML anchor store
        if key not in spec:
            raise ValueError(f"{path}: the spec needs {key!r}")
    for name, block in spec["blocks"].items():
        for key in ("presets", "levels", "methods", "seeds"):
            if key not in block:
                raise ValueError(f"{path}: block {name!r} needs {key!r}")
        unknown = [m for m in block["methods"] if m not in spec["methods"]]
        unknown += [p for p in block["presets"] if p not in spec["presets"]]
        if unknown:
            raise ValueError(f"{path}: block {name!r} names {unknown}, not defined under methods/presets")
    return spec


def _seeds(value: Any) -> list[int]:
    """[0, 1, 2] or "0-19"."""
    if isinstance(value, str):
        lo, hi = value.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in value]


def plan_runs(spec: dict[str, Any]) -> list[Run]:
    """Blocks in spec order; within a block seed-major (every cell of seed 0 first)."""
    runs = []
    for name, block in spec["blocks"].items():
        for seed in _seeds(block["seeds"]):
            for preset, level, method in itertools.product(block["presets"], block["levels"], block["methods"]):
                runs.append(Run(name, preset, level, method, seed))
    return runs
