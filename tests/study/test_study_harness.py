"""The study harness: spec validation, cell configs, runs, resumption, reports (tiny model)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from srpo.config import ConfigError
from srpo_lab.study.cli import main as study_main
from srpo_lab.study.report import summarize, write_report
from srpo_lab.study.runner import (
    CellFailed,
    inprocess_launcher,
    plan_cells,
    read_metrics,
    run_cell,
    run_study,
)
from srpo_lab.study.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "srpo" / "presets" / "smoke.yaml")


def _spec_data(out: Path, **extra) -> dict:
    data = {
        "name": "tiny-study",
        "output": str(out),
        "config": SMOKE,
        "common": {"train.steps": 2, "train.tasks_per_step": 2, "eval.size": 4, "checkpoint.every": 1,
                   "checkpoint.export": False, "checkpoint.plots": False, "sampling.max_new_tokens": 6},
        "settings": {
            "single": {"set": {"workflow.name": "single", "workflow.params": {}}},
            "parallel2": {"set": {"workflow.params.k": 2}},
        },
        "methods": {"srpo": {"set": {"train.method": "srpo"}},
                    "grpo": {"set": {"train.method": "grpo"}}},
        "seeds": [0, 1],
        "reference": "srpo",
        "report": {"metrics": ["reward/mean", "clip/all/frac"]},
        "quick": {"output": str(out) + "-quick", "seeds": [0], "methods": ["srpo"],
                  "common": {"train.steps": 1}},
    }
    data.update(extra)
    return data


def test_cells_run_seed_major_with_base_first():
    spec = parse_spec(_spec_data(Path("out")))
    labels = [c.label for c in plan_cells(spec)]
    assert labels == [
        "single/base/seed0", "single/srpo/seed0", "single/grpo/seed0",
        "parallel2/base/seed0", "parallel2/srpo/seed0", "parallel2/grpo/seed0",
        "single/base/seed1", "single/srpo/seed1", "single/grpo/seed1",
        "parallel2/base/seed1", "parallel2/srpo/seed1", "parallel2/grpo/seed1",
    ]


def test_cell_config_layers_common_setting_method_seed(tmp_path):
    spec = parse_spec(_spec_data(tmp_path))
    cfg = spec.cell_config("parallel2", "grpo", 1, tmp_path / "cell")
    assert cfg.workflow.name == "parallel" and cfg.workflow.params == {"k": 2}
    assert cfg.train.method == "grpo" and cfg.train.steps == 2 and cfg.eval.size == 4
    assert cfg.seed == 1 and cfg.output_dir == str(tmp_path / "cell") and cfg.resume is False
    assert cfg.task.train_size == 32  # from the base config file, untouched
    base = spec.cell_config("single", None, 0, tmp_path / "b")
    assert base.workflow.name == "single" and base.train.method == "srpo"


def test_quick_variant_replaces_output_seeds_and_methods(tmp_path):
    spec = parse_spec(_spec_data(tmp_path), quick=True)
    assert spec.output == Path(str(tmp_path) + "-quick")
    assert spec.seeds == (0,) and [m.name for m in spec.methods] == ["srpo"]
    assert spec.common["train.steps"] == 1 and spec.common["eval.size"] == 4
    assert spec.name == "tiny-study-quick"


@pytest.mark.parametrize("change, message", [
    ({"methods": {"srpo": {"set": {"train.method": "srpo", "group_size": 8}}}}, "rollout budget"),
    ({"methods": {"srpo": {"set": {"sampling.temperature": 0.5}}}}, "rollout budget"),
    ({"seeds": []}, "seeds"),
    ({"seeds": [0, 0]}, "duplicates"),
    ({"colour": 1}, "unknown key"),
    ({"reference": "ppo"}, "unknown method"),
    ({"settings": {"x": {"set": {}, "extra": 1}}}, "unknown key"),
    ({"settings": {}}, "at least one"),
])
def test_bad_specs_are_refused_with_the_problem_named(tmp_path, change, message):
    with pytest.raises((ConfigError, KeyError), match=message):
        parse_spec(_spec_data(tmp_path, **change))


def test_a_bad_config_key_in_a_setting_fails_before_anything_runs(tmp_path):
    data = _spec_data(tmp_path / "s", settings={"x": {"set": {"train.nonsense": 1}}})
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    assert study_main([str(spec_path)]) == 2
    assert not (tmp_path / "s" / "cells").exists()


def _one_setting(tmp_path: Path, **extra) -> dict:
    data = _spec_data(tmp_path / "study", **extra)
    data["settings"] = {"parallel2": data["settings"]["parallel2"]}
    return data


def test_study_runs_every_cell_and_reports(tmp_path, monkeypatch):
    spec = parse_spec(_one_setting(tmp_path))
    done, failed = run_study(spec, launch=inprocess_launcher, log=lambda s: None)
    assert not failed and len(done) == 6
    for cell in plan_cells(spec):
        d = cell.directory(spec.output)
        result = json.loads((d / "result.json").read_text())
        assert result["n"] == 4 and len(result["correct"]) == 4 and len(result["task_ids"]) == 4
        assert not (d / "checkpoints").exists()  # heavy outputs removed once done
        if cell.method is not None:
            assert result["steps"] == 2 and result["episodes"] == 2 * 2 * 2  # steps x tasks x G
    # every method got the same rollouts
    runs = [json.loads((c.directory(spec.output) / "result.json").read_text())
            for c in plan_cells(spec) if c.method]
    assert len({(r["steps"], r["episodes"], r["members"]) for r in runs}) == 1
    import srpo_lab.study.report as report

    reads = []  # the report reads each finished cell's metrics once, for every table and plot
    monkeypatch.setattr(report, "read_metrics", lambda path: reads.append(path) or read_metrics(path))
    paths = write_report(spec)
    assert sorted(reads) == sorted(c.directory(spec.output) / "metrics.jsonl" for c in plan_cells(spec))
    text = paths["markdown"].read_text()
    assert "| parallel2 |" in text and "macro-average" in text and "Paired comparison with `srpo`" in text
    summary = json.loads(paths["summary"].read_text())
    assert summary["missing"] == []
    assert summary["cells"]["parallel2"]["srpo"]["seeds"] == 2
    assert (spec.output / "plots" / "reward_mean.png").exists()
    # parallel k=2: sets of 2 (solvers) and 1 (aggregator) appear in the set-size diagnostics
    assert set(summary["by_set_size"]["srpo"]["clip/k{k}/frac"]) == {"1", "2"}
    assert "Diagnostics by set size" in text and (spec.output / "plots" / "by_set_size.png").exists()
    # the study's page links each trained cell's own report (written by srpo train)
    page = paths["html"].read_text()
    for cell in plan_cells(spec):
        link = f'href="cells/{cell.setting}/{cell.method}/seed{cell.seed}/report.html"'
        assert (link in page) == (cell.method is not None)
        assert (cell.directory(spec.output) / "report.html").is_file() == (cell.method is not None)
    # a second invocation finds everything done and reruns nothing
    calls = []
    done2, _ = run_study(spec, launch=lambda argv, log: calls.append(argv) or 0, log=lambda s: None)
    assert len(done2) == 6 and calls == []


def test_interrupted_cell_resumes_from_its_checkpoint_and_matches_an_uninterrupted_one(tmp_path):
    spec = parse_spec(_one_setting(tmp_path, seeds=[0]))
    cell = [c for c in plan_cells(spec) if c.method == "srpo"][0]
    whole = run_cell(spec, cell, inprocess_launcher)
    whole_metrics = (cell.directory(spec.output) / "metrics.jsonl").read_text().splitlines()

    other = parse_spec(_one_setting(tmp_path, seeds=[0], output=str(tmp_path / "interrupted")))
    d = cell.directory(other.output)
    # simulate an interruption after step 1: the cell's own config, stopped early
    d.mkdir(parents=True)
    cfg_path = d / "config.yaml"
    from srpo.config import to_dict

    cfg_path.write_text(yaml.safe_dump(to_dict(other.cell_config(cell.setting, cell.method, 0, d)), sort_keys=False))
    assert inprocess_launcher(["train", str(cfg_path), "train.steps=1", "eval.after=false"], d / "train.log") == 0
    assert (d / "checkpoints").exists() and not (d / "result.json").exists()
    resumed = run_cell(other, cell, inprocess_launcher)
    assert resumed["resumed"] is True
    assert resumed["correct"] == whole["correct"] and resumed["steps"] == whole["steps"]
    resumed_rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    whole_rows = [json.loads(x) for x in whole_metrics]
    for key in ("loss", "reward/mean", "rollout/tokens/generated", "grad_norm/shared"):
        a = [r[key] for r in whole_rows if key in r]
        b = [r[key] for r in resumed_rows if key in r]
        assert len(a) == 2 and a == pytest.approx(b, abs=1e-6), key


def test_a_done_cell_whose_spec_changed_is_an_error_not_a_silent_mix(tmp_path):
    spec = parse_spec(_one_setting(tmp_path, seeds=[0]))
    cell = [c for c in plan_cells(spec) if c.method == "grpo"][0]
    run_cell(spec, cell, inprocess_launcher)
    data = _one_setting(tmp_path, seeds=[0])
    data["common"]["train.lr"] = 0.5
    changed = parse_spec(data)
    with pytest.raises(CellFailed, match="another config"):
        run_cell(changed, cell, inprocess_launcher)


def test_a_done_cell_survives_a_code_change_that_only_adds_config_fields(tmp_path):
    """The cell's identity is what the spec says about it: a later srpo whose resolved config
    differs (a new field, a renamed default section) keeps finished cells; the result records
    the code it ran with."""
    spec = parse_spec(_one_setting(tmp_path, seeds=[0]))
    cell = [c for c in plan_cells(spec) if c.method == "grpo"][0]
    first = run_cell(spec, cell, inprocess_launcher)
    path = cell.directory(spec.output) / "result.json"
    stored = json.loads(path.read_text())
    stored["fingerprint"] = "resolved-config-of-an-older-srpo"
    path.write_text(json.dumps(stored))
    again = run_cell(spec, cell, inprocess_launcher)  # not rerun: the same result comes back
    assert again["correct"] == first["correct"] and again["fingerprint"] == stored["fingerprint"]
    del stored["spec_fingerprint"]  # a result written before spec fingerprints: the old rule
    path.write_text(json.dumps(stored))
    with pytest.raises(CellFailed, match="another config"):
        run_cell(spec, cell, inprocess_launcher)


def test_a_failing_cell_is_reported_and_the_others_go_on(tmp_path):
    spec = parse_spec(_one_setting(tmp_path, seeds=[0]))

    def launch(argv, log):
        if "grpo" in argv[1]:
            log.write_text("boom: something broke\n")
            return 3
        return inprocess_launcher(argv, log)

    done, failed = run_study(spec, launch=launch, log=lambda s: None)
    assert [c.label for c, _ in failed] == ["parallel2/grpo/seed0"]
    assert "exited with 3" in failed[0][1] and "boom" in failed[0][1]
    assert len(done) == 2
    summary = summarize(spec)
    assert summary["missing"] == ["parallel2/grpo/0"]


def test_rerunning_a_cell_from_its_config_gives_the_same_numbers(tmp_path):
    """What docs/results.md promises: `srpo train CELL/config.yaml output_dir=...` reproduces it."""
    spec = parse_spec(_one_setting(tmp_path, seeds=[0]))
    cell = [c for c in plan_cells(spec) if c.method == "srpo"][0]
    run_cell(spec, cell, inprocess_launcher)
    d = cell.directory(spec.output)
    rerun = tmp_path / "rerun"
    subprocess.run([sys.executable, "-m", "srpo.cli", "train", str(d / "config.yaml"), f"output_dir={rerun}"],
                   check=True, capture_output=True, cwd=ROOT)
    a = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (rerun / "metrics.jsonl").read_text().splitlines()]
    for key in ("loss", "reward/mean", "grad_norm/shared", "eval/accuracy"):
        assert [r[key] for r in a if key in r] == pytest.approx([r[key] for r in b if key in r], abs=1e-6)
    assert (json.loads((d / "eval" / "after.json").read_text())["correct"]
            == json.loads((rerun / "eval" / "after.json").read_text())["correct"])


def _fake_result(root: Path, setting: str, method: str, seed: int, correct: list[bool]) -> None:
    d = root / "cells" / setting / method / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({
        "setting": setting, "method": method, "seed": seed, "accuracy": sum(correct) / len(correct),
        "correct": correct, "task_ids": [f"t{i}" for i in range(len(correct))], "n": len(correct),
        "steps": 2, "episodes": 8, "members": 24, "tokens_generated": 100.0, "train_seconds": 1.0,
        "wall_seconds": 2.0,
    }))


def test_summary_numbers_match_a_hand_computation(tmp_path):
    spec = parse_spec(_spec_data(tmp_path, seeds=[0, 1, 2]))
    s, g = {}, {}
    accs = {("single", 0): (3, 1), ("single", 1): (2, 2), ("single", 2): (4, 1),
            ("parallel2", 0): (2, 2), ("parallel2", 1): (3, 0), ("parallel2", 2): (1, 1)}
    for (setting, seed), (n_srpo, n_grpo) in accs.items():
        _fake_result(tmp_path, setting, "srpo", seed, [True] * n_srpo + [False] * (4 - n_srpo))
        _fake_result(tmp_path, setting, "grpo", seed, [True] * n_grpo + [False] * (4 - n_grpo))
        _fake_result(tmp_path, setting, "base", seed, [False] * 4)
        s[(setting, seed)], g[(setting, seed)] = n_srpo / 4, n_grpo / 4
    summary = summarize(spec)
    cell = summary["cells"]["single"]["srpo"]
    vals = [0.75, 0.5, 1.0]
    mean = sum(vals) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / 2)
    assert cell["mean"] == pytest.approx(mean)
    assert cell["high"] - cell["mean"] == pytest.approx(4.303 * sd / math.sqrt(3))
    macro = summary["macro"]["srpo"]
    per_seed = [(s[("single", k)] + s[("parallel2", k)]) / 2 for k in range(3)]
    assert macro["per_seed"] == pytest.approx(per_seed) and macro["seeds"] == 3
    pooled = summary["paired"]["grpo"]["all"]
    # items: srpo right & grpo wrong per run = n_srpo - min(...) since both are prefixes of True
    ref_only = sum(max(a - b, 0) for a, b in accs.values())
    other_only = sum(max(b - a, 0) for a, b in accs.values())
    assert pooled["n"] == 24 and pooled["runs"] == 6
    assert pooled["ref_only"] == ref_only and pooled["other_only"] == other_only
    assert pooled["diff"] == pytest.approx((ref_only - other_only) / 24)
    assert summary["missing"] == []


def test_cli_lists_cells_and_refuses_unknown_names(tmp_path, capsys):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(_spec_data(tmp_path / "s")))
    assert study_main([str(spec_path), "--list"]) == 0
    out = capsys.readouterr().out
    assert out.count("pending") == 12 and "parallel2/grpo/seed1" in out
    assert study_main([str(spec_path), "--methods", "ppo"]) == 2
    assert "unknown method" in capsys.readouterr().err


def test_parallel_jobs_run_every_cell_once(tmp_path):
    spec = parse_spec(_one_setting(tmp_path, seeds=[0, 1]))
    launched = []
    lock = __import__("threading").Lock()

    def fake(argv, log):  # stands in for a subprocess: writes what a finished cell leaves
        d = Path(argv[1]).parent
        with lock:
            launched.append(str(d))
        name = "base.json" if argv[0] == "eval" else "after.json"
        (d / "eval").mkdir(parents=True, exist_ok=True)
        (d / "eval" / name).write_text(json.dumps({"accuracy": 0.5, "ci_low": 0.1, "ci_high": 0.9, "n": 2,
                                                   "per_agent": {}, "task_ids": ["a", "b"],
                                                   "correct": [True, False]}))
        return 0

    done, failed = run_study(spec, launch=fake, jobs=3, log=lambda s: None)
    assert not failed and len(done) == 6 and sorted(launched) == sorted(set(launched))
    assert [c.label for c in done] == [c.label for c in plan_cells(spec)]
    with pytest.raises(ValueError, match="subprocess launcher"):
        run_study(spec, launch=inprocess_launcher, jobs=2)


@pytest.mark.parametrize("text, says", [
    ("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdef", "bcdefg")), "aliases"),
    ("name: x\nname: y\n", "duplicate key 'name' at line 1 and line 2"),
])
def test_a_study_spec_and_a_run_config_are_read_within_the_config_bounds(tmp_path, text, says):
    """Study specs (the one harness's, series studies' too) and a run's config.yaml read by the
    report go through the config loader's bounds: an alias bomb or a duplicate key is one
    ConfigError, at once."""
    from srpo.record.report.data import ReportError, collect_run
    from srpo_lab.study.spec import load_spec

    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=says):
        load_spec(path)
    with pytest.raises(ReportError, match=says):
        collect_run(tmp_path)
