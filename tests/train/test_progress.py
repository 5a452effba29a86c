"""Progress: bars only on a terminal (or when forced), plain flushed lines otherwise."""

from __future__ import annotations

import io

import pytest

from srpo.record.progress import RunProgress, bars_wanted, eta_seconds


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_only_on_an_interactive_terminal(monkeypatch):
    for var in ("SRPO_PROGRESS", "CI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert bars_wanted(_Tty()) and not bars_wanted(io.StringIO())  # a pipe or a file: lines
    monkeypatch.setenv("CI", "true")
    assert not bars_wanted(_Tty())
    monkeypatch.setenv("SRPO_PROGRESS", "bars")
    assert bars_wanted(io.StringIO())
    monkeypatch.setenv("SRPO_PROGRESS", "lines")
    monkeypatch.delenv("CI")
    assert not bars_wanted(_Tty())


def test_without_bars_only_the_lines_are_written():
    out = io.StringIO()
    with RunProgress(enabled=False, stream=out) as p:
        run = p.bar("train", total=3)
        with p.bar("rollout", total=8, transient=True) as bar:
            bar.update(completed=4, info="round 1")
        p.line("step 1/3  reward 0.5")
        run.advance()
    assert out.getvalue() == "step 1/3  reward 0.5\n"


def test_with_bars_the_lines_still_come_through():
    out = io.StringIO()
    with RunProgress(enabled=True, stream=out) as p:
        run = p.bar("train", total=2)
        p.line("step 1/2  reward 0.5")
        run.advance()
    text = out.getvalue()
    assert "step 1/2  reward 0.5" in text and "train" in text and "\x1b[" in text  # drawn with escapes


def test_eta_is_the_mean_pace_times_what_is_left():
    # 3 steps took 30 s: 10 s each, 7 left -> 70 s
    assert eta_seconds(30.0, 3, 10) == pytest.approx(70.0)
    assert eta_seconds(5.0, 0, 10) is None and eta_seconds(5.0, 2, None) is None


def test_bars_start_their_clock_even_when_resuming_mid_run():
    # a run bar resumed at step 2 of 5: rich's task is started (elapsed counts), and the ETA
    # counts only the steps done since
    with RunProgress(enabled=True, stream=io.StringIO()) as p:
        p.bar("train", total=5, completed=2)
        (task,) = p._bars.tasks
        assert task.started and task.elapsed is not None and task.fields["first"] == 2
