"""The marker of config fields that name a file or folder srpo reads, so that loading can resolve
them by one rule (srpo.config.loading.resolve_file_paths: a relative path written in a config
file is read from that file's folder, one typed as an override from the working directory).

    path: InputPath | None = None          # a pack setting naming a data file (task.path)
    name: FileReference = "single"         # "file.py:Class", a module path, or a registered name
    name: ModelPath = "tiny"               # "tiny" | "smollm2" | a local model folder

A task pack marks its own settings the same way (`from srpo.config import InputPath`). A field
not marked is never rewritten: output_dir, for one, is where the run writes, and stays relative
to the working directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated


def _is_model_folder(path: Path) -> bool:
    return (path / "config.json").is_file()


@dataclass(frozen=True)
class ReadsPath:
    """A field's value names something srpo reads.

    reference: the value is "file.py:NAME" when the part before the last ":" ends in ".py" (only
        that part is a path); any other value (a registered name, "package.module:NAME") is not.
    names: values that are names, not paths (model.name's "tiny").
    is_target: what must be at the path for it to be this field's file (a relative value typed
        on the command line that names no target is kept as typed, for the reader's own error).
    what: that target in words, for the error of a relative value in a file that names none.
    """

    reference: bool = False
    names: tuple[str, ...] = ()
    is_target: Callable[[Path], bool] = Path.exists
    what: str = "file or folder"

    def split(self, value: str) -> tuple[str, str] | None:
        """(path part, rest to append after it) of a value, or None when it names no path."""
        if value in self.names or not value:
            return None
        if self.reference:
            file, sep, attr = value.rpartition(":")
            return (file, sep + attr) if sep and file.endswith(".py") else None
        return value, ""


InputPath = Annotated[str, ReadsPath()]
FileReference = Annotated[str, ReadsPath(reference=True, is_target=Path.is_file, what=".py file")]
ModelPath = Annotated[str, ReadsPath(names=("tiny", "smollm2"), is_target=_is_model_folder,
                                     what="Hugging Face model folder (config.json)")]
