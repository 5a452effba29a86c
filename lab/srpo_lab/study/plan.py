"""A study's plan: its cells, in the order they run, and where each one's record lies."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from srpo_lab.study.spec import StudySpec


@dataclass(frozen=True)
class Cell:
    setting: str
    method: str | None  # None: the untrained base model (evaluation only)
    seed: int
    block: str | None = None  # None: a study without blocks
    level: str | None = None  # None: a study without levels (and every base cell)

    @property
    def parts(self) -> tuple[str, ...]:
        """The folder names of the cell under cells/ (its label without the seed)."""
        return tuple(p for p in (self.block, self.setting, self.level, self.method or "base") if p is not None)

    @property
    def label(self) -> str:
        return "/".join((*self.parts, f"seed{self.seed}"))

    def directory(self, output: Path) -> Path:
        return output.joinpath("cells", *self.parts, f"seed{self.seed}")

    def where(self) -> dict[str, str | None]:
        """The keywords of StudySpec.cell_config / cell_inputs / cell_overrides for this cell."""
        return {"block": self.block, "level": self.level}


def plan_cells(spec: StudySpec) -> list[Cell]:
    """Blocks in spec order; within a block seed-major (every cell of seed 0 first, so a partial
    study is balanced); each setting's base evaluation before its levels and methods."""
    cells = []
    for block in spec.blocks:
        for seed in block.seeds:
            for s in block.settings:
                if spec.base_eval:
                    cells.append(Cell(s, None, seed, block.name))
                for level in block.levels:
                    cells.extend(Cell(s, m, seed, block.name, level) for m in block.methods)
    return cells


def record_path(spec: StudySpec, cell: Cell) -> Path:
    """The file whose existence makes a cell done: result.json in its folder, or for a series
    study its compact record beside where the folder would be (cells/.../seed<k>.json)."""
    d = cell.directory(spec.output)
    return d.with_suffix(".json") if spec.record == "series" else d / "result.json"


def is_done(spec: StudySpec, cell: Cell, archived: set[str] = frozenset()) -> bool:
    """A cell is done when its record exists, as a file or in the study's archive (labels)."""
    return cell.label in archived or record_path(spec, cell).exists()
