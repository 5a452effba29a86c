"""The harness's series studies (record: series): blocks x settings x levels x methods x seeds,
each cell a short in-process run kept as its per-step series, resumable from files and from the
study's archive (tiny model)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from srpo.config import ConfigError
from srpo_lab.study.cli import main as study_main
from srpo_lab.study.report import series_summary
from srpo_lab.study.runner import Cell, is_done, iter_results, plan_cells, record_path, run_study
from srpo_lab.study.series import archive_path, pack_archive, read_archive, series_keys, series_of
from srpo_lab.study.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "srpo" / "presets" / "smoke.yaml")


def _series_spec(out: Path, **extra) -> dict:
    data = {
        "name": "tiny-series",
        "output": str(out),
        "record": "series",
        "config": SMOKE,
        "common": {"train.steps": 2, "train.tasks_per_step": 2, "eval.before": False, "eval.after": False,
                   "checkpoint.export": False, "checkpoint.plots": False, "checkpoint.report": False,
                   "sampling.max_new_tokens": 4},
        "settings": {"parallel2": {"set": {"workflow.params.k": 2}}},
        "levels": {"r1": {"set": {"train.epochs": 1}}, "r2": {"set": {"train.epochs": 2}}},
        "methods": {"srpo": {"set": {"train.method": "srpo"}}, "grpo": {"set": {"train.method": "grpo"}}},
        "report": {"metrics": ["reward/mean", "loss", "adv/k{k}/abs_mean", "grad_norm/mean"]},
        "blocks": {"first": {"levels": ["r1", "r2"], "methods": ["srpo"], "seeds": "0-1"},
                   "second": {"levels": ["r2"], "seeds": [0], "common": {"train.steps": 1}}},
    }
    data.update(extra)
    return data


def test_blocks_plan_in_order_seed_major_and_layer_the_block_and_level():
    spec = parse_spec(_series_spec(Path("out")))
    assert [c.label for c in plan_cells(spec)] == [
        "first/parallel2/r1/srpo/seed0", "first/parallel2/r2/srpo/seed0",
        "first/parallel2/r1/srpo/seed1", "first/parallel2/r2/srpo/seed1",
        "second/parallel2/r2/srpo/seed0", "second/parallel2/r2/grpo/seed0",
    ]
    assert spec.seeds == (0, 1) and not spec.base_eval  # a series study evaluates nothing apart
    cell = Cell("parallel2", "grpo", 0, "second", "r2")
    assert record_path(spec, cell) == Path("out/cells/second/parallel2/r2/grpo/seed0.json")
    cfg = spec.cell_config(cell.setting, cell.method, cell.seed, Path("run"), **cell.where())
    assert cfg.train.steps == 1 and cfg.train.epochs == 2 and cfg.train.method == "grpo"  # block, level, method
    config, overrides = spec.cell_overrides(cell.setting, cell.method, cell.seed, Path("run"), **cell.where())
    assert config == SMOKE and "train.steps=1" in overrides and "train.steps=2" not in overrides
    assert overrides[-3:] == ["train.method=grpo", "seed=0", "output_dir=run"]


@pytest.mark.parametrize("change, message", [
    ({"blocks": {"b": {"settings": ["nope"], "seeds": [0]}}}, "unknown entries"),
    ({"blocks": {"b": {"levels": ["r9"], "seeds": [0]}}}, "unknown entries"),
    ({"blocks": {"b": {"colour": 1, "seeds": [0]}}}, "unknown key"),
    ({"blocks": {"b": {"methods": ["srpo"]}}}, "needs `seeds`"),
    ({"blocks": {"b": {"seeds": "3-1"}}}, "range"),
    ({"record": "diary"}, "record must be one of"),
    ({"base_eval": True}, "no evaluations"),
    ({"record": "evaluation"}, "for `record: series` studies"),
])
def test_bad_series_specs_are_refused_with_the_problem_named(change, message):
    with pytest.raises(ConfigError, match=message):
        parse_spec(_series_spec(Path("out"), **change))


def test_levels_need_blocks():
    data = _series_spec(Path("out"), seeds=[0])
    del data["blocks"]
    with pytest.raises(ConfigError, match="crossed in blocks"):
        parse_spec(data)


def test_series_keep_every_set_size_logged_and_the_mean_gradient_norm():
    history = [{"reward/mean": 0.5, "clip/k1/frac": 0.0, "clip/k2/frac": 0.25, "grad_norm/a": 1.0,
                "grad_norm/b": 3.0},
               {"reward/mean": 0.123456789, "clip/k2/frac": 0.5}]
    metrics = ("reward/mean", "clip/k{k}/frac", "grad_norm/mean")
    assert series_keys(metrics, history) == ["reward/mean", "clip/k1/frac", "clip/k2/frac", "grad_norm/mean"]
    assert series_of(history, metrics) == {"reward/mean": [0.5, 0.12346], "clip/k1/frac": [0.0, None],
                                           "clip/k2/frac": [0.25, 0.5], "grad_norm/mean": [2.0, None]}


def test_a_series_study_runs_resumes_from_its_archive_and_reports(tmp_path, capsys):
    data = _series_spec(tmp_path / "study")
    data["blocks"] = {"first": {"levels": ["r1", "r2"], "methods": ["srpo"], "seeds": [0]}}
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    assert study_main([str(spec_path)]) == 0
    spec = parse_spec(data)
    for cell in plan_cells(spec):
        record = json.loads(record_path(spec, cell).read_text())
        assert record["steps"] == 2 and record["error"] is None and len(record["series"]["reward/mean"]) == 2
        assert record["run"] == {"block": "first", "setting": "parallel2", "level": cell.level,
                                 "method": "srpo", "seed": 0}
        assert set(record["series"]) >= {"reward/mean", "loss", "grad_norm/mean", "adv/k1/abs_mean", "adv/k2/abs_mean"}
    assert not (tmp_path / "study" / "cells" / "first" / "parallel2" / "r1" / "srpo" / "seed0").exists()
    summary = json.loads((spec.output / "summary.json").read_text())
    assert summary["cells"]["first/parallel2/r2/srpo"]["runs"] == 1 and summary["missing"] == []
    assert "| first/parallel2/r1/srpo | 1/1 | 0 |" in (spec.output / "results.md").read_text()

    # packed into one archive: the files go, every record stays readable, nothing reruns
    before = {c.label: r for c, r in iter_results(spec)}
    assert study_main([str(spec_path), "--pack"]) == 0
    assert not (spec.output / "cells").exists() and archive_path(spec).is_file()
    assert read_archive(spec) == before
    assert gzip.decompress(archive_path(spec).read_bytes()).decode().count("\n") == 2
    calls = []
    done, _ = run_study(spec, launch=lambda argv, log: calls.append(argv) or 0, log=calls.append)
    assert done == [] and calls == []
    capsys.readouterr()
    assert study_main([str(spec_path), "--list"]) == 0
    assert capsys.readouterr().out.count("runs.jsonl.gz") == 2

    # a new seed runs beside the archive; packing again folds it in, in plan order
    data["blocks"]["first"]["seeds"] = [0, 1]
    spec_path.write_text(yaml.safe_dump(data))
    spec = parse_spec(data)
    assert study_main([str(spec_path), "--seeds", "1"]) == 0
    new = Cell("parallel2", "srpo", 1, "first", "r1")
    assert record_path(spec, new).is_file() and is_done(spec, new)
    assert series_summary(spec)["cells"]["first/parallel2/r1/srpo"]["runs"] == 2
    pack_archive(spec)
    assert list(read_archive(spec)) == [c.label for c in plan_cells(spec)] and not record_path(spec, new).exists()


def test_a_run_that_raises_is_a_record_with_its_error(tmp_path, monkeypatch):
    from srpo.train import trainer

    def diverge(self):
        raise FloatingPointError("loss is nan")

    monkeypatch.setattr(trainer.Trainer, "train", diverge)
    data = _series_spec(tmp_path / "study")
    data["blocks"] = {"first": {"levels": ["r1"], "methods": ["grpo"], "seeds": [0]}}
    spec = parse_spec(data)
    done, failed = run_study(spec, log=lambda s: None)
    record = json.loads(record_path(spec, done[0]).read_text())
    assert not failed and record["error"] == "FloatingPointError: loss is nan" and record["steps"] == 0
    assert series_summary(spec)["cells"]["first/parallel2/r1/grpo"]["raised"] == 1


def test_pack_is_for_series_studies(tmp_path, capsys):
    data = _series_spec(tmp_path / "s")
    for key in ("record", "levels", "blocks"):
        del data[key]
    data["seeds"] = [0]
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    assert study_main([str(spec_path), "--pack"]) == 2
    assert "series" in capsys.readouterr().err
