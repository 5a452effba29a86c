"""The presets: the configs that ship with srpo (srpo/presets/<name>.yaml), named by their path
under that folder without the suffix: `default`, `smoke`, `math/debate`, `testbed/k4`, `gpu/math_gsm8k`.

Every command that takes a CONFIG takes a file path or a preset name; an existing file wins.
"""

from __future__ import annotations

from pathlib import Path

PRESETS_DIR = Path(__file__).resolve().parents[1] / "presets"


def preset_names() -> list[str]:
    """Every preset's name, sorted."""
    return sorted(p.relative_to(PRESETS_DIR).with_suffix("").as_posix() for p in PRESETS_DIR.rglob("*.yaml"))


def preset_path(name: str) -> Path | None:
    """The file of preset `name` (`math/debate`, or `math/debate.yaml`), None if there is none."""
    stem = name[: -len(".yaml")] if name.endswith(".yaml") else name
    if not stem or stem.startswith(("/", ".")) or ".." in Path(stem).parts:
        return None
    path = PRESETS_DIR / f"{stem}.yaml"
    return path if path.is_file() else None


def resolve_config_path(path: str | Path) -> Path:
    """A config file as given when it exists, else the preset of that name, else `path` as given
    (reading it then fails with an error that lists the presets)."""
    given = Path(path)
    if given.exists():
        return given
    return preset_path(str(path)) or given
