"""Tests of srpo.record.metrics_log: the JSONL record, resume truncation, kills, NaN, TensorBoard."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from srpo.record.metrics_log import MetricsLogger, read_metrics


def test_one_line_per_log_flushed_and_typed(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as log:
        log.log(1, {"loss": 0.5, "reward/mean": np.float32(0.25), "n": 3})
        # readable before close: each line is flushed and fsynced
        assert read_metrics(tmp_path) == [{"step": 1, "loss": 0.5, "reward/mean": 0.25, "n": 3.0}]
        log.log(1, {"eval/accuracy": torch.tensor(0.75)})  # same step again: eval after train
        log.log(2, {"loss": 0.25})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 1, 2]
    assert read_metrics(tmp_path / "metrics.jsonl")[1] == {"step": 1, "eval/accuracy": 0.75}


def test_bad_input_is_refused(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as log:
        with pytest.raises(TypeError, match="'note' must be a real number"):
            log.log(0, {"note": "hi"})
        with pytest.raises(ValueError, match="reserved"):
            log.log(0, {"step": 1.0})
        log.log(5, {"loss": 1.0})
        with pytest.raises(ValueError, match="call resume"):
            log.log(4, {"loss": 1.0})


def test_nonfinite_values_logged_as_null_counted_and_read_back(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as log:
        with pytest.warns(RuntimeWarning) as caught:
            log.log(1, {"loss": float("nan"), "kl": float("inf"), "ok": 1.0})
        assert ["'loss' is nan at step 1" in str(w.message) for w in caught] == [True, False]
        assert "'kl' is inf at step 1" in str(caught[1].message)
        log.log(2, {"loss": float("nan"), "kl": float("-inf")})  # warned once per key already
        assert log.nonfinite_counts == {"loss": 2, "kl": 2}
    first = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert first == {"step": 1, "loss": None, "kl": None, "ok": 1.0,
                     "_nonfinite": {"loss": "nan", "kl": "inf"}}
    records = read_metrics(tmp_path)
    assert math.isnan(records[0]["loss"]) and records[0]["kl"] == math.inf
    assert records[1]["kl"] == -math.inf and "_nonfinite" not in records[1]


def test_resume_truncates_redone_steps_to_match_an_uninterrupted_run(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    with MetricsLogger(straight, tensorboard=False) as log:
        for step in range(1, 5):
            log.log(step, {"loss": 1.0 / step})
    # killed run: checkpoint at step 2, ran on to step 3 and died halfway through step 4's line
    with MetricsLogger(killed, tensorboard=False) as log:
        for step in range(1, 4):
            log.log(step, {"loss": 1.0 / step})
    with open(killed / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "lo')
    with pytest.warns(RuntimeWarning, match="truncated last line 4"):
        log = MetricsLogger(killed, tensorboard=False)
    assert log.resume(2) == 1  # step 3's line dropped (the partial one was cut on open)
    for step in (3, 4):
        log.log(step, {"loss": 1.0 / step})
    log.close()
    assert (killed / "metrics.jsonl").read_bytes() == (straight / "metrics.jsonl").read_bytes()


def test_reader_tolerates_only_a_truncated_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.')
    with pytest.warns(RuntimeWarning, match="truncated last line 2"):
        assert read_metrics(tmp_path) == [{"step": 1, "loss": 1.0}]
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "lo\n{"step": 3, "loss": 0.5}\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        read_metrics(tmp_path)
    with pytest.raises(FileNotFoundError, match="no metrics log"):
        read_metrics(tmp_path / "elsewhere")


def test_tensorboard_event_files_hold_the_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricsLogger(tmp_path) as log:
        log.log(1, {"loss": 0.5, "clip/k3/frac": 0.1})
        log.log(2, {"loss": 0.25, "clip/k3/frac": 0.2})
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"loss", "clip/k3/frac"}
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 0.5), (2, 0.25)]


def test_tensorboard_purges_redone_steps_on_resume(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricsLogger(tmp_path) as log:
        for step in (1, 2, 3):
            log.log(step, {"loss": float(step)})
    with MetricsLogger(tmp_path) as log:
        log.resume(1)
        log.log(2, {"loss": 20.0})
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 1.0), (2, 20.0)]


def test_wandb_requested_but_missing_is_a_clear_error(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "wandb" else real(n, *a)
    )
    with pytest.raises(ModuleNotFoundError, match="pip install wandb"):
        MetricsLogger(tmp_path, tensorboard=False, wandb=True)
    MetricsLogger(tmp_path, tensorboard=False, wandb=None).close()  # off: never needed
