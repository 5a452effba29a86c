"""The one object the training loop calls for everything a run writes.

    recorder = Recorder(cfg, run_dir, main=..., sync=barrier, progress=..., heldout=..., policies=...)
    step = recorder.begin(state, resume_from)     # resume or start over; RUN/config.yaml; the
                                                  # metrics log; the evaluation before training
    recorder.step(step, metrics, timer, ...)      # an evaluation every N steps; the metrics line;
                                                  # the console; drift warnings; the step's
                                                  # episodes; a checkpoint when one is due
    recorder.end(step)                            # the evaluation after; the log closed; plots;
                                                  # the trained policies exported
    recorder.write_report()                       # RUN/report.html, once the bars are gone

The rank-0 rule lives here: rank 0 writes every file and evaluates; every rank calls the same
methods in the same order, and the others wait where rank 0 evaluates or checkpoints (`sync`, a
barrier of the loop's process group), so no rank runs ahead of a checkpoint or an evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from srpo.batch import FlatBatch
from srpo.config import Config, to_dict
from srpo.record import episodes_log
from srpo.record.checkpoint import TrainState, load_checkpoint, save_checkpoint
from srpo.record.console import PhaseTimer, step_line, write_report_or_say_why
from srpo.record.drift import DriftWatch
from srpo.record.episodes_log import UpdateRecord
from srpo.record.evaluate import EvalResult
from srpo.record.heldout import Heldout
from srpo.record.metrics_log import MetricsLogger
from srpo.record.policies import export_policies
from srpo.record.progress import RunProgress
from srpo.record.run_dir import rewind_logs, write_config
from srpo.rollout.policies import PolicySet
from srpo.types import Episode


class Recorder:
    """What a run writes (module doc). `heldout` None: no held-out evaluation (eval.size 0)."""

    def __init__(self, cfg: Config, run_dir: Path, *, main: bool, sync: Callable[[], None],
                 progress: RunProgress, heldout: Heldout | None, policies: PolicySet):
        self.cfg, self.run_dir, self.main, self.sync = cfg, run_dir, main, sync
        self.progress, self.heldout, self.policies = progress, heldout, policies
        self.logger: MetricsLogger | _NoLogger = _NoLogger()
        self.drift = DriftWatch()  # a rambling or constant-answer drift, said when it starts
        self.history: list[dict[str, float]] = []  # every step's metrics, in order
        self.before: EvalResult | None = None
        self.after: EvalResult | None = None
        self._bar: Any = None

    # ------------------------------------------------------------------ the three calls

    def begin(self, state: TrainState, resume_from: Path | None) -> int:
        """Resume from `resume_from` (its checkpoint loaded into `state`, the logs rewound to it)
        or start over; returns the step to train from. Before anything is written: a bad
        checkpoint changes nothing (resume_checkpoint verified every file's checksum)."""
        cfg, step = self.cfg, 0
        if resume_from is not None:
            step = int(load_checkpoint(resume_from, state, files_verified=True).data_state["next_step"])
        if self.main:
            write_config(self.run_dir, to_dict(cfg))
            self.logger = MetricsLogger(self.run_dir, tensorboard=cfg.checkpoint.tensorboard,
                                        wandb={"config": to_dict(cfg)} if cfg.checkpoint.wandb else None)
        # resume=true on a run killed before its first checkpoint: nothing to continue, from step 0
        if resume_from is not None or cfg.resume:
            self.progress.line(rewind_logs(self.run_dir, self.logger, step, resume_from, main=self.main))
        if resume_from is None and cfg.eval.before:
            self.before = self.evaluate("before", step)
            if self.before:
                self.logger.log(step, self.before.metrics("eval"))
        self._bar = self.progress.bar("train", total=cfg.train.steps, completed=step, info="steps")
        return step

    def step(self, step: int, metrics: dict[str, float], timer: PhaseTimer, *, episodes: list[Episode],
             batch: FlatBatch, update: UpdateRecord, skipped: list[bool], state: Callable[[], TrainState]) -> None:
        """After step `step` (counted from 1): its episodes, an evaluation when one is due (its
        numbers join `metrics`), the metrics line, the console, a checkpoint when one is due."""
        cfg, steps = self.cfg, self.cfg.train.steps
        if self.main:
            self._keep_episodes(step, episodes, batch, update, skipped)
        if cfg.eval.every and step % cfg.eval.every == 0 and step < steps:
            ev = self.evaluate(f"step {step}", step)
            if ev:
                metrics.update(ev.metrics("eval"))
        self.logger.log(step, metrics)
        self.history.append(metrics)
        if self.main:
            self.progress.line(step_line(step, steps, metrics, timer))
            for warning in self.drift.check({"step": step, **metrics}):
                self.progress.line(warning.line())
        self._bar.advance()
        every = cfg.checkpoint.every
        if step == steps or (every and step % every == 0):
            if self.main:  # replicas are identical: one writer
                save_checkpoint(self.run_dir, state(), keep_last=cfg.checkpoint.keep_last)
            self.sync()

    def end(self, step: int) -> None:
        """The evaluation after training, the metrics log closed, plots, the export."""
        cfg = self.cfg
        if cfg.eval.after:
            self.after = self.evaluate("after", step)
            if self.after:
                self.logger.log(step, self.after.metrics("eval"))
        self.close()
        if self.main and cfg.checkpoint.plots:
            from srpo.record.plots import plot_run

            plot_run(self.run_dir)
        if self.main and cfg.checkpoint.export:
            export_policies(self.policies, self.run_dir)
        self.sync()

    def close(self) -> None:
        """The metrics log closed (again: harmless); `end` does it, the loop on an error too."""
        self.logger.close()

    def write_report(self) -> None:
        """RUN/report.html (checkpoint.report), on rank 0."""
        if self.main and self.cfg.checkpoint.report:
            write_report_or_say_why(self.run_dir)

    # ------------------------------------------------------------------ the parts

    def evaluate(self, label: str, step: int) -> EvalResult | None:
        """Held-out accuracy, on rank 0 (the others wait); files under RUN/eval (srpo.record.heldout)."""
        if self.heldout is None:
            return None
        result = self.heldout.evaluate(label, step, self.run_dir, self.progress) if self.main else None
        self.sync()
        return result

    def _keep_episodes(self, step: int, episodes: list[Episode], batch: FlatBatch, update: UpdateRecord,
                       skipped: list[bool]) -> None:
        """RUN/episodes/step-N.jsonl.gz: the step's episodes (a sample: srpo.record.episodes_log)."""
        limit = self.cfg.checkpoint.episodes_per_step
        if limit == 0:
            return
        records = episodes_log.episode_records(
            episodes, step=step, prompt_text=episodes_log.prompt_decoder(self.policies), batch=batch,
            update=update, skipped=skipped, keep=episodes_log.kept_episodes(episodes, limit))
        episodes_log.write_records(episodes_log.step_file(self.run_dir, step), records)


class _NoLogger:
    """The metrics log of ranks other than 0."""

    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def resume(self, step: int, **kwargs: Any) -> int:
        return 0

    def close(self) -> None: ...
