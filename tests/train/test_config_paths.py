"""The rule for relative paths of files srpo reads (srpo.config.loading): written in a config
file, from that file's folder; typed as an override, from the working directory; held absolute;
output_dir left as written. Checked on task.path (a pack's data file) with the GSM8K fixture."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from srpo.config import ConfigError, load_config, to_dict
from srpo.config.presets import PRESETS_DIR

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "math" / "gsm8k.jsonl"
TASK = {"source": "gsm8k", "train_size": 4, "heldout_size": 2}


def _config(folder: Path, **task) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump({"task": {**TASK, **task}, "output_dir": "runs/x"}))
    return path


def test_a_path_written_in_a_file_resolves_from_the_file_folder(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    shutil.copy(FIXTURE, tmp_path / "conf" / "data.jsonl")
    config = _config(tmp_path / "conf", path="data.jsonl")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(config)
    assert cfg.task.path == str((tmp_path / "conf" / "data.jsonl").resolve())
    assert cfg.output_dir == "runs/x"  # where the run writes: relative to the working directory


def test_an_override_resolves_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "cwd").mkdir()
    shutil.copy(FIXTURE, tmp_path / "cwd" / "typed.jsonl")
    config = _config(tmp_path / "conf", path=str(FIXTURE))
    monkeypatch.chdir(tmp_path / "cwd")
    cfg = load_config(config, ["task.path=typed.jsonl"])
    assert cfg.task.path == str((tmp_path / "cwd" / "typed.jsonl").resolve())


def test_a_missing_file_names_the_key_the_value_and_the_folder(tmp_path, monkeypatch):
    config = _config(tmp_path / "conf", path="data.jsonl")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"task.path 'data.jsonl' in .*there is no .* at .*conf.data.jsonl "
                                          r"\(a relative path in a config file is read from that file's folder"):
        load_config(config)
    # the file sits in the working directory instead: the error says so and how to name it
    shutil.copy(FIXTURE, tmp_path / "data.jsonl")
    with pytest.raises(ConfigError, match=r"\(from the working directory\) is one: give a path relative"):
        load_config(config)


def test_the_saved_config_names_the_same_file_from_anywhere(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    shutil.copy(FIXTURE, tmp_path / "conf" / "data.jsonl")
    cfg = load_config(_config(tmp_path / "conf", path="data.jsonl"))
    saved = tmp_path / "run" / "config.yaml"
    saved.parent.mkdir()
    saved.write_text(yaml.safe_dump(to_dict(cfg)))
    monkeypatch.chdir(tmp_path / "run")
    assert load_config(saved).task.path == cfg.task.path


@pytest.mark.parametrize("path", sorted(PRESETS_DIR.rglob("*.yaml")), ids=lambda p: p.stem)
def test_no_preset_names_a_relative_input_path(path):
    """Presets are read from the package folder: a relative input path in one would point there."""
    task = (yaml.safe_load(path.read_text()) or {}).get("task", {}) or {}
    values = [
        task.get("path"),
        *((task.get("search") or {}).get(k) for k in ("corpus_path", "questions_path", "index_dir")),
    ]
    assert all(v is None or Path(v).is_absolute() for v in values), f"{path.name}: {values}"
