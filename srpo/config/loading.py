"""Loading a config: a YAML file plus `key=value` overrides, validated by the schema once; the
rule for relative paths of files srpo reads (written in a config file: from that file's folder;
typed as an override: from the working directory; output_dir: always the working directory; see
"file paths" below); and the checks of what a config needs of this machine (check_environment)."""

from __future__ import annotations

import copy
import difflib
import errno
import os
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from pydantic import BaseModel, ValidationError

from srpo.config.errors import ConfigError, _declared, _is_section, config_error
from srpo.config.paths import ReadsPath
from srpo.config.presets import resolve_config_path
from srpo.config.schema import GENERIC_TASK_KEYS, Config, TaskConfig
from srpo.config.yaml_reader import load_yaml, read_config_text
from srpo.packs import get_pack


def from_dict(cls: type[BaseModel], data: Mapping[str, Any]) -> Any:
    """Build section `cls` from a mapping, recursively; ConfigError names any bad key."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise config_error(cls, e) from e


def to_dict(config: BaseModel) -> dict[str, Any]:
    """The config as plain data (YAML-safe), e.g. to save next to a run."""
    return config.model_dump()


def _field_type(cls: Any, path: Sequence[str]) -> Any:
    """The declared type at a dotted path (Any when it goes below a free-form mapping)."""
    tp: Any = cls
    for part in path:
        tp = _declared(tp)
        if _is_section(tp):
            if part not in tp.model_fields:
                return None  # unknown key: validation reports it with the known ones
            tp = tp.model_fields[part].annotation
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return Any
    return tp


def parse_override(text: str, cls: Any = None) -> tuple[list[str], Any]:
    """"a.b=value" -> (["a", "b"], parsed value). String fields take the text verbatim."""
    if "=" not in text:
        raise ConfigError(
            f"override {text!r} must look like key=value (e.g. sampling.temperature=0.7)"
        )
    key, raw = text.split("=", 1)
    path = key.strip().split(".")
    if not all(path):
        raise ConfigError(f"override {text!r}: bad key {key!r}")
    tp = _field_type(cls, path) if cls is not None else Any
    str_only = tp is str or (
        typing.get_origin(tp) in (Union, types.UnionType)
        and set(typing.get_args(tp)) == {str, type(None)}
        and raw.strip() not in ("null", "~")
    )
    if str_only:
        return path, raw
    return path, load_yaml(raw, f"override {key.strip()}")  # bounded as a config file is


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[str], cls: Any = None
) -> dict[str, Any]:
    """Set each `a.b.c=value` in a nested dict (in place; intermediate dicts are created)."""
    for text in overrides:
        path, value = parse_override(text, cls)
        set_dotted(data, path, value, where=f"override {text!r}")
    return data


def set_dotted(data: dict[str, Any], path: Sequence[str], value: Any, *, where: str = "") -> None:
    """data[a][b][c] = value for path [a, b, c] (in place; missing sections are created)."""
    if not path or not all(path):
        raise ConfigError(f"{where or 'key'}: bad key {'.'.join(path)!r}")
    node = data
    for i, part in enumerate(path[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"{where or '.'.join(path)}: {'.'.join(path[: i + 1])} is a value, not a section")
        node = child
    node[path[-1]] = value


def reset_params_of_a_changed_workflow(before: dict[str, Any], after: dict[str, Any],
                                       overrides: Sequence[str]) -> None:
    """An override that names another workflow (`workflow.name=...`, `srpo train --workflow`)
    starts it from its own defaults: the file's `workflow.params` belong to the file's workflow
    and would fail on (or silently configure) another one. Params given on the command line
    (`workflow.params.x=`, `workflow.params={...}`, `workflow={...}`) are kept."""
    if after["workflow"]["name"] == before["workflow"]["name"]:
        return
    keys = [o.split("=", 1)[0].strip() for o in overrides]
    if any(k in ("workflow", "workflow.params") for k in keys):  # params given whole
        return
    after["workflow"]["params"] = {}
    apply_overrides(after, [o for o, k in zip(overrides, keys) if k.startswith("workflow.params.")], Config)


def reset_settings_of_a_changed_task_pack(before: dict[str, Any], after: dict[str, Any],
                                          overrides: Sequence[str]) -> None:
    """An override that names another task pack (`task.name=search`) starts it from its own
    settings: the file's pack settings (math's `task.source`...) belong to the file's pack. The
    split fields and task settings given on the command line (`task.search.corpus=...`) stay."""
    if after["task"]["name"] == before["task"]["name"]:
        return
    keys = [o.split("=", 1)[0].strip() for o in overrides]
    if "task" in keys:  # the task section given whole
        return
    given = {k.split(".")[1] for k in keys if k.startswith("task.")}
    for key in list(after["task"]):
        if key not in GENERIC_TASK_KEYS and key not in given:
            del after["task"][key]


def reset_section_of_a_changed_engine(before: dict[str, Any], after: dict[str, Any],
                                      overrides: Sequence[str]) -> None:
    """An override that names another engine (`rollout.backend=hf`) drops the file's section of
    the old one (`rollout.ctranslate2`): its settings belong to that engine, and a section of
    an engine not selected is an error. A section given on the command line stays."""
    keys = [o.split("=", 1)[0].strip() for o in overrides]
    old = before["rollout"]["backend"]
    if "rollout" in keys or after["rollout"]["backend"] == old:  # the section given whole, or no change
        return
    if not any(k == f"rollout.{old}" or k.startswith(f"rollout.{old}.") for k in keys):
        after["rollout"].pop(old, None)


# --------------------------------------------------------------------------- file paths
#
# The rule for values that name a file or folder srpo reads (fields marked with
# srpo.config.paths.ReadsPath: model.name, workflow.name and task.name when they name a .py
# file, a pack's data files such as task.path or task.search.corpus_path / questions_path /
# index_dir). Written here once:
#
#   * a relative path written in a config file is read from that file's folder (a config and
#     the files beside it move together); one that names nothing there is a ConfigError naming
#     the key, the value and the folder;
#   * a relative path typed as an override (`key=value`) is read from the working directory,
#     where it was typed; one that names nothing there is kept as typed, so the error of what
#     reads it quotes what was typed;
#   * an absolute path is kept, and not checked here (a preset's /path/to/... placeholders);
#   * the config object holds the resolved, absolute paths, so the config.yaml a run saves
#     names the same files from any directory (`srpo eval RUN`, a resume from elsewhere);
#   * output_dir is not such a value: it is where the run writes, relative to the working
#     directory, and stays as written.
#
# Presets are config files too, read from srpo/presets/; none names a relative input path
# (tests/train/test_config_paths.py keeps it so), so they load the same from any directory.


def _reads_path(field: Any) -> ReadsPath | None:
    """The ReadsPath marker of a pydantic field (on the field, or inside its Optional)."""
    for item in field.metadata:
        if isinstance(item, ReadsPath):
            return item
    for arg in typing.get_args(field.annotation):
        if typing.get_origin(arg) is typing.Annotated:
            return next((m for m in arg.__metadata__ if isinstance(m, ReadsPath)), None)
    return None


def _path_values(data: dict[str, Any], cls: Any, prefix: str = ""):
    """(mapping, key, dotted key, marker) of every marked string value in `data`, a mapping of
    section `cls` (nested sections and mappings of sections included; the task section's pack
    settings by the pack that `task.name` names, looked up after that value was visited, so a
    caller that resolves it as it goes finds the pack file meant)."""
    for name, field in cls.model_fields.items():
        value = data.get(name)
        marker = _reads_path(field)
        if marker is not None and isinstance(value, str):
            yield data, name, prefix + name, marker
        elif isinstance(value, dict):
            tp = _declared(field.annotation)
            if _is_section(tp):
                yield from _path_values(value, tp, f"{prefix}{name}.")
            elif typing.get_origin(tp) is dict and _is_section(_declared(typing.get_args(tp)[1])):
                for key, item in value.items():
                    if isinstance(item, dict):
                        yield from _path_values(item, _declared(typing.get_args(tp)[1]),
                                                f"{prefix}{name}.{key}.")
    if cls is TaskConfig:
        try:
            settings = get_pack(data.get("name", TaskConfig.model_fields["name"].default)).settings
        except ValueError:  # an unknown pack: validation says so, naming task.name
            return
        if settings is not None:
            yield from _path_values(data, settings, prefix)


def resolve_file_paths(data: dict[str, Any], cls: Any, folder: Path, where: str) -> None:
    """In place: each relative path written in the config file `where` (a mapping of `cls`)
    becomes the absolute path under the file's `folder`; ConfigError naming the key, the value
    and the folder when nothing is there (the rule above)."""
    for mapping, key, dotted, marker in _path_values(data, cls):  # lazily: task.name first
        parts = marker.split(mapping[key])
        if parts is None or Path(parts[0]).is_absolute():
            continue
        target = (folder / parts[0]).resolve()
        if not marker.is_target(target):
            here = Path(parts[0]).resolve()
            hint = (f"; {here} (from the working directory) is one: give a path relative to "
                    f"the working directory on the command line ({dotted}=...), or write it "
                    f"absolute" if marker.is_target(here) else "")
            raise ConfigError(f"{dotted} {mapping[key]!r} in {where}: there is no {marker.what} "
                              f"at {target} (a relative path in a config file is read from that "
                              f"file's folder, {folder}){hint}")
        mapping[key] = str(target) + parts[1]


def resolve_typed_paths(data: dict[str, Any], cls: Any) -> None:
    """In place: each relative path that names its target from the working directory (the
    values typed as overrides; those of the file are absolute by now) becomes absolute; one
    that names nothing is kept as typed (the rule above)."""
    for mapping, key, _, marker in _path_values(data, cls):
        parts = marker.split(mapping[key])
        if parts is None or Path(parts[0]).is_absolute():
            continue
        target = Path(parts[0]).resolve()
        if marker.is_target(target):
            mapping[key] = str(target) + parts[1]


def load_config(path: str | Path | None = None, overrides: Sequence[str] = (),
                cls: type = Config, *, check_machine: bool = True) -> Any:
    """Config from a YAML file (None = all defaults) plus `key=value` overrides.

    Paths of files srpo reads resolve by the rule above: those written in the file from the
    file's folder, those typed as overrides from the working directory; the config holds them
    absolute. check_machine: also check_environment (CUDA for a cuda device, a writable
    output_dir); False for a caller that uses neither (e.g. one that only builds workflows and
    rewards).
    """
    data = {}
    if path is not None:
        file = resolve_config_path(path)
        data = read_config_file(file)
        resolve_file_paths(data, cls, file.resolve().parent, f"config file {str(file)!r}")
    cfg = from_dict(cls, data)
    if overrides:
        # Overrides edit the complete config (defaults included), then everything is re-validated.
        full = to_dict(cfg)
        edited = apply_overrides(copy.deepcopy(full), overrides, cls)
        resolve_typed_paths(edited, cls)
        if cls is Config:
            reset_params_of_a_changed_workflow(full, edited, overrides)
            reset_settings_of_a_changed_task_pack(full, edited, overrides)
            reset_section_of_a_changed_engine(full, edited, overrides)
        cfg = from_dict(cls, edited)
    if check_machine and isinstance(cfg, Config):
        check_environment(cfg)
    return cfg


def read_config_file(path: Path) -> dict[str, Any]:
    """The mapping a config file holds, read within the bounds of srpo.config.yaml_reader
    (size, nesting, aliases, duplicate keys); every problem a one-line ConfigError naming it."""
    where = f"config file {str(path)!r}"
    if not path.is_file():
        from srpo.config.presets import preset_names

        close = difflib.get_close_matches(str(path).removesuffix(".yaml"), preset_names(), n=3)
        hint = (f"; did you mean the preset {' or '.join(close)}?" if close
                else " (nor a preset: `srpo presets` lists them)")
        raise ConfigError(f"{where} does not exist{hint}")
    data = load_yaml(read_config_text(path), where)
    if data is None:  # nothing, only comments, or `null`: surely not the file meant
        raise ConfigError(
            f"{where} is empty (or holds only comments): a config file holds a "
            f"mapping of settings, e.g. `train: {{steps: 2}}`"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must hold a mapping at top level, got {type(data).__name__}")
    return data


def check_environment(cfg: Config) -> None:
    """What a config needs of this machine: its device and a writable output_dir.

    Called by load_config (and by the trainer's preflight, for configs built in code); not by
    Config itself, so a config written for another machine can still be built and inspected.
    """
    _check_device(cfg.device)
    _check_output_dir(cfg.output_dir)
    _check_rollout_memory(cfg)


# A lower bound of the host memory one generated token takes in a step's records (its id, its
# sampling log-prob, its loss-mask entry and the batch tensors built from them; the prompt, the
# model and generation's own buffers come on top)
BYTES_PER_GENERATED_TOKEN = 64


def _available_memory() -> int | None:
    """Bytes of memory available to a new allocation (MemAvailable), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _check_rollout_memory(cfg: Config) -> None:
    """Refuse a step whose rollouts surely do not fit this machine's memory, before any model
    is loaded: rollouts a step (schema.rollouts_per_step) x the largest max_new_tokens of any
    agent x BYTES_PER_GENERATED_TOKEN, a lower bound (one output per episode), against the
    memory available now."""
    from srpo.config.schema import rollouts_per_step

    tokens = max([cfg.sampling.max_new_tokens, *(a.sampling.get("max_new_tokens", 0) for a in cfg.agents.values())])
    need = rollouts_per_step(cfg) * tokens * BYTES_PER_GENERATED_TOKEN
    available = _available_memory()
    if available is not None and need > available:
        raise ConfigError(
            f"group_size ({cfg.group_size}) x train.tasks_per_step ({cfg.train.tasks_per_step}) "
            f"rollouts of up to {tokens} tokens (sampling.max_new_tokens) need at least "
            f"{need / 2**30:.1f} GiB for their records alone, more than the "
            f"{available / 2**30:.1f} GiB of memory available on this machine; lower group_size, "
            f"train.tasks_per_step or sampling.max_new_tokens"
        )


def _check_device(device: str) -> None:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"device {device!r}: CUDA is not available on this machine "
            f"(torch.cuda.is_available() is False); use device=cpu"
        )
    index = torch.device(device).index  # the schema checked that torch parses it
    if device.startswith("cuda") and index is not None and index >= torch.cuda.device_count():
        raise ConfigError(
            f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA "
            f"device(s) (cuda:0 to cuda:{torch.cuda.device_count() - 1})"
        )
    if device == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(
            "device 'mps': MPS is not available on this machine "
            "(torch.backends.mps.is_available() is False); use device=cpu"
        )


def _check_output_dir(output_dir: str) -> None:
    path = Path(output_dir)
    if "{time}" in output_dir:
        # the run fills in "{time}" when it starts: check the folder above the templated part
        parts = path.parts
        first = next(i for i, part in enumerate(parts) if "{time}" in part)
        path = Path(*parts[:first]) if first else Path(".")
    existing = path
    try:
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
    except OSError as e:  # a name longer than the filesystem allows (300 characters), a link loop
        longest = max(path.parts, key=len)
        shown = output_dir if len(output_dir) <= 80 else output_dir[:60] + "..."
        raise ConfigError(
            f"output_dir {shown!r} cannot be a directory: {e.strerror or e}"
            + (
                f" (a name of {len(os.fsencode(longest))} bytes; file systems allow at most 255)"
                if e.errno == errno.ENAMETOOLONG
                else ""
            )
        ) from None
    if not existing.is_dir():
        where = "exists as a file" if existing == path else f"is under the file {str(existing)!r}"
        raise ConfigError(f"output_dir {output_dir!r} {where}: it must be a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"output_dir {output_dir!r}: {str(existing)!r} is not writable, so the run could not write its files there"
        )
