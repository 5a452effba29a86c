"""Tests of srpo.record.plots on synthetic metrics logs."""

from __future__ import annotations

import math

import pytest

from srpo.record.metrics_log import MetricsLogger
from srpo.record.plots import plot_run, plot_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_run(run_dir, steps: int = 6, *, full: bool = True) -> None:
    with MetricsLogger(run_dir, tensorboard=False) as log:
        for step in range(1, steps + 1):
            m = {"reward/mean": 0.1 * step, "reward/std": 0.05, "loss": 1.0 / step}
            if full:
                m |= {
                    "clip/k1/frac": 0.01 * step, "clip/k3/frac": 0.02 * step,
                    "clip/all/frac": 0.015,
                    "ratio/k1/log_mean": 0.001, "ratio/k1/log_std": 0.01,
                    "ratio/k3/log_mean": -0.002, "ratio/k3/log_std": 0.02,
                    "approx_kl": 0.001 * step, "kl_ref": 0.01 * step,
                    "grad_norm/solver": 1.0, "grad_norm/aggregator": 2.0,
                }
            log.log(step, m)
            if full and step % 3 == 0:  # eval is logged on its own line, every 3 steps
                log.log(step, {"eval/accuracy": 0.5, "eval/ci_low": 0.4, "eval/ci_high": 0.6})


def test_plot_run_writes_one_png_per_panel(tmp_path):
    _write_run(tmp_path)
    paths = plot_run(tmp_path)
    assert sorted(p.name for p in paths) == sorted(
        f"{n}.png" for n in
        ("reward", "eval_accuracy", "clip_frac", "set_ratio", "kl", "grad_norm", "loss")
    )
    for p in paths:
        assert p.parent == tmp_path / "plots" and p.read_bytes()[:8] == PNG_MAGIC


def test_missing_keys_skip_their_panels(tmp_path):
    _write_run(tmp_path, full=False)
    paths = plot_run(tmp_path, tmp_path / "out")
    assert sorted(p.name for p in paths) == ["loss.png", "reward.png"]


def test_nan_values_do_not_break_plots(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as log:
        with pytest.warns(RuntimeWarning):
            log.log(1, {"loss": math.nan, "grad_norm": math.inf})
        log.log(2, {"loss": 0.5, "grad_norm": 1.0})
    assert sorted(p.name for p in plot_run(tmp_path)) == ["grad_norm.png", "loss.png"]


def test_empty_or_missing_metrics_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no metrics log"):
        plot_run(tmp_path)
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty metrics log"):
        plot_run(tmp_path)


def test_plot_runs_overlays_runs(tmp_path):
    _write_run(tmp_path / "a")
    _write_run(tmp_path / "b", full=False)
    paths = plot_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "cmp", labels=["srpo", "grpo"])
    assert len(paths) == 7 and all(p.parent == tmp_path / "cmp" for p in paths)
    with pytest.raises(ValueError, match="1 labels for 2 runs"):
        plot_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "cmp", labels=["x"])
