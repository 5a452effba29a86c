"""The training loop: rollout -> active sets -> advantages -> K epochs of updates -> log -> eval -> checkpoint.

    trainer = Trainer(load_config("srpo/presets/smoke.yaml"))
    result = trainer.train()           # TrainResult(run_dir, steps_done, before, after, history)

One step, as `_train` reads:

    rollout = sampler.rollout_step(step)                  # srpo.train.sampling (dynamic sampling)
    batch, metrics = prepare(spec, rollout.episodes)      # the flat batch and its advantages
    skipped = skipped_sets(batch)                         # advantage exactly 0: left out, once
    old, ref = old_and_ref_logprobs(batch, computed sets) # srpo.train.update (off-policy, KL)
    update(batch, skipped)                                # epochs x minibatches of whole sets
    log, evaluate, checkpoint

The parts live in their own modules: the run directory's rules (srpo.train.run_dir), what a step
trains on (srpo.train.sampling), the update (srpo.train.update), the console (srpo.train.console),
the metrics and their reductions (srpo.train.metrics), seeds, reference and export
(srpo.train.setup). The method (SRPO or a baseline) is a MethodSpec from srpo.objective; no
module here branches on its name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from srpo.batch import FlatBatch, build_flat_batch
from srpo.build import build_policies, build_rollout, load_tasks, task_pack
from srpo.config import Config, to_dict
from srpo.objective.methods import MethodSpec, get_method, prepare_step
from srpo.rollout.backends import check_training_backend
from srpo.rollout.policies import PolicySet
from srpo.rollout.runner import rollout_metrics
from srpo.train import episodes_log
from srpo.train.checkpoint import TrainState, load_checkpoint, save_checkpoint
from srpo.train.console import PhaseTimer, step_line, write_report_or_say_why
from srpo.train.distributed import barrier, broadcast_from_main, close_distributed, init_distributed
from srpo.train.drift import DriftWatch
from srpo.train.episodes_log import UpdateRecord
from srpo.train.evaluate import EvalResult
from srpo.train.forward import BatchLogprobs, check_training_sampling
from srpo.train.heldout import evaluate_run
from srpo.train.metrics import combine_micro_batches, mean_over_steps, peak_rss_gb
from srpo.train.metrics_log import MetricsLogger
from srpo.train.optim import build_optimizers, policy_parameters
from srpo.train.preflight import (
    check_minibatches,
    check_process_layout,
    check_question_lengths,
    check_resume_steps,
    preflight,
)
from srpo.train.progress import RunProgress
from srpo.train.run_dir import (
    RUN_ARTIFACTS,
    RunLock,
    check_config_file,
    resolve_run_dir,
    resume_checkpoint,
    rewind_logs,
    write_config,
)
from srpo.train.run_identity import RESUMABLE_FIELDS
from srpo.train.sampling import Sampler, StepRollout
from srpo.train.setup import (
    build_reference,
    checkpointed_models,
    enable_activation_checkpointing,
    export_policies,
    fingerprint_of,
    seed_everything,
    shared_pad_token_id,
)
from srpo.train.update import PolicyUpdate, skipped_sets
from srpo.types import Episode, Task

__all__ = ["RUN_ARTIFACTS", "TrainResult", "Trainer", "check_minibatches", "checkpointed_models",
           "combine_micro_batches", "fingerprint_of", "mean_over_steps"]


@dataclass
class TrainResult:
    run_dir: Path
    steps_done: int
    before: EvalResult | None = None
    after: EvalResult | None = None
    history: list[dict[str, float]] = field(default_factory=list)


class Trainer:
    def __init__(self, cfg: Config, *, policies: PolicySet | None = None):
        preflight(cfg, models_given=policies is not None)  # what would fail late or learn nothing
        self.spec: MethodSpec = get_method(cfg.train.method, **cfg.train.method_settings)
        self.dist = init_distributed(cfg.device)
        self._run_lock: RunLock | None = None
        try:
            check_process_layout(cfg, self.spec, self.dist)  # every rank, before any work
            if self.dist.active and cfg.device.startswith("cuda"):
                cfg = cfg.model_copy(update={"device": f"cuda:{self.dist.local_rank}"})
            run_dir = resolve_run_dir(cfg.output_dir, resume=cfg.resume)
            self.run_dir = Path(broadcast_from_main(self.dist, run_dir))
            self.cfg = cfg = cfg.model_copy(update={"output_dir": str(self.run_dir)})
            # one writer per run directory, from before anything in it is read until train() ends
            self._run_lock = RunLock.acquire(self.run_dir) if self.dist.is_main else None
            if self.dist.is_main:
                check_config_file(self.run_dir)
            self._set_up(cfg, policies)
        except BaseException:
            self.release_run_dir(discard=True)  # refused before any work: leave no directory behind
            close_distributed(self.dist)  # a group it created: see close_distributed for why
            raise

    def _set_up(self, cfg: Config, policies: PolicySet | None) -> None:
        t = cfg.train
        self.fingerprint = fingerprint_of(cfg)
        if t.threads:
            torch.set_num_threads(t.threads)
        seed_everything(cfg.seed)
        # Fail on a bad checkpoint before any model is built or any work is done.
        self._resume_from = resume_checkpoint(self.run_dir, resume=cfg.resume, fingerprint=self.fingerprint,
                                              resumable_fields=RESUMABLE_FIELDS, config=to_dict(cfg))
        check_resume_steps(self._resume_from, t.steps)
        self.policies = policies or build_policies(cfg.model, cfg.policies, cfg.device)
        if t.activation_checkpointing:
            enable_activation_checkpointing(self.policies)
        self.runner, self.workflow = build_rollout(cfg, policies=self.policies)
        # a quantized sampler is not the trained policy, unless the update corrects for it
        check_training_backend(self.runner.backend, corrected=cfg.train.tis_cap > 0)
        # the reward component evaluation counts as solved: the config's, else the task pack's
        self.success_component = cfg.eval.success_component or task_pack(cfg).success_component
        check_training_sampling({a: self.runner.agents[a].sampling for a in self.workflow.agents})
        self.pad_id = shared_pad_token_id(self.policies)
        self.params = policy_parameters(self.policies)
        self.optimizers, self.schedulers = build_optimizers(
            self.params, lr=t.lr, policy_lr=t.policy_lr, weight_decay=t.weight_decay,
            betas=tuple(t.adam_betas), warmup_steps=t.warmup_steps,
        )
        self.reference = build_reference(self.policies) if t.kl_beta > 0 else None
        if self.dist.active:  # identical replicas above; different samples from here on
            torch.manual_seed(cfg.seed + 1_000_003 * self.dist.rank)
        self.train_tasks = load_tasks(cfg.task, split="train")
        self.heldout_tasks = load_tasks(cfg.task, split="heldout", limit=cfg.eval.size) if cfg.eval.size != 0 else []
        for split, tasks in (("train", self.train_tasks), ("heldout", self.heldout_tasks)):
            check_question_lengths(tasks, self.policies, cfg.sampling.max_new_tokens, split)
        self.step = 0
        # bars on rank 0's terminal only; plain lines otherwise (srpo.train.progress)
        self.progress = RunProgress(enabled=None if self.dist.is_main else False)
        self.sampler = Sampler(cfg, self.runner, self.workflow, self.policies, self.train_tasks, spec=self.spec,
                               pad_id=self.pad_id, rank=self.dist.rank, world=self.dist.world, progress=self.progress)
        self.updater = PolicyUpdate(self.spec, self.policies, self.params, self.optimizers, self.schedulers,
                                    t, self.dist, self.reference)

    def release_run_dir(self, *, discard: bool = False) -> None:
        """Let another process write this run directory (train() does it when it ends).
        discard: also remove the directory if the lock created it and it holds nothing else."""
        if self._run_lock is not None:
            self._run_lock.release(discard=discard)

    def _state(self) -> TrainState:
        return TrainState(
            step=self.step,
            policies=checkpointed_models(self.policies),
            optimizers=self.optimizers,
            schedulers=self.schedulers,
            data_state={"next_step": self.step},
            config_fingerprint=self.fingerprint,
        )

    # ------------------------------------------------------------------ the parts of a step

    def tasks_for_step(self, step: int) -> list[Task]:
        """A deterministic function of the step, so resuming needs only the step number."""
        return self.sampler.tasks_for_step(step)

    def rollout(self, step: int, tasks: list[Task] | None = None, draw: int = 0) -> list[Episode]:
        """G episodes of each of the step's tasks (or of `tasks`, an extra draw of the step)."""
        return self.sampler.rollout(step, tasks, draw)

    def rollout_step(self, step: int) -> StepRollout:
        """The step's episodes to train on and every episode generated (srpo.train.sampling)."""
        return self.sampler.rollout_step(step)

    def _skipped_sets(self, batch: FlatBatch) -> torch.Tensor:
        """[S] bool: the sets the update leaves out (srpo.train.update.skipped_sets)."""
        return skipped_sets(batch, self.cfg.train)

    def old_and_ref_logprobs(self, batch: FlatBatch, sets: list[int] | None = None):
        """(log pi_old or None when on-policy, log pi_ref or None, forward diagnostics), [M, T]."""
        return self.updater.old_and_ref_logprobs(batch, sets)

    def _logprobs(self, policies: PolicySet, batch: FlatBatch, *, with_entropy: bool = False) -> BatchLogprobs:
        return self.updater.logprobs(policies, batch, with_entropy=with_entropy)

    def update(self, batch: FlatBatch, record: UpdateRecord | None = None, *,
               skipped: list[bool] | None = None, loss_scale: float = 1.0) -> dict[str, float]:
        """K epochs of whole-set minibatches over the rollout batch (srpo.train.update). skipped:
        the sets left out, as the loop derived them (None: derived here). record: filled with
        each computed set's log-ratio and clipped share (the episode browser's; not the loss).
        loss_scale: the factor on every optimizer step's loss (StepRollout.loss_scale)."""
        skipped = self._skipped_sets(batch).tolist() if skipped is None else skipped
        with self.progress.bar("update", total=None, transient=True, info="forward and backward") as bar:
            return self.updater.run(batch, skipped, record, bar, step=self.step, loss_scale=loss_scale)

    def evaluate(self, label: str) -> EvalResult | None:
        """Held-out accuracy, on rank 0 (the others wait); files under RUN/eval (srpo.train.heldout)."""
        if not self.heldout_tasks:
            return None
        result = None
        if self.dist.is_main:
            result = evaluate_run(self.runner, self.workflow, self.policies, self.heldout_tasks, label=label,
                                  step=self.step, seed=self.cfg.seed, success_component=self.success_component,
                                  batch_tasks=self.cfg.eval.batch_tasks, run_dir=self.run_dir, progress=self.progress)
        barrier(self.dist)
        return result

    # ------------------------------------------------------------------ the loop

    def train(self) -> TrainResult:
        """Runs the steps; at the end it lets go of the run directory and of the process group it
        created (multi-process runs), so a trainer trains once."""
        if not self.progress.enabled:  # no bar redraws in logs (transformers' own bars included)
            import transformers

            transformers.utils.logging.disable_progress_bar()
        try:
            with self.progress:
                result = self._train()
            if self.dist.is_main and self.cfg.checkpoint.report:
                write_report_or_say_why(self.run_dir)
        finally:
            self.release_run_dir()
            close_distributed(self.dist)  # a group it created: see close_distributed for why
        return result

    def _train(self) -> TrainResult:
        cfg, t, main = self.cfg, self.cfg.train, self.dist.is_main
        logger, result = self._begin()
        run_bar = self.progress.bar("train", total=t.steps, completed=self.step, info="steps")
        drift = DriftWatch()  # a rambling or constant-answer drift, said when it starts
        try:
            while self.step < t.steps:
                timer = PhaseTimer()
                with timer("rollout"):
                    rollout = self.rollout_step(self.step)
                with timer("sets"):  # dynamic sampling built it already when it kept one whole draw
                    flat = None if rollout.prepared else build_flat_batch(rollout.episodes, self.pad_id).to(cfg.device)
                with timer("advantages"):
                    batch, step_metrics = rollout.prepared or prepare_step(self.spec, flat, None)
                with timer("old_logprobs"):  # only for the sets the update computes
                    skipped = self._skipped_sets(batch).tolist()
                    old, ref, diag = self.old_and_ref_logprobs(
                        batch, [s for s in range(batch.num_sets) if not skipped[s]])
                    batch = dataclasses.replace(batch, old_logprobs=old, ref_logprobs=ref)
                record = UpdateRecord(batch.num_sets)
                with timer("update"):
                    upd = self.update(batch, record, skipped=skipped, loss_scale=rollout.loss_scale)
                self.step += 1
                if main:
                    self._keep_episodes(rollout.episodes, batch, record, skipped)
                metrics = {**step_metrics, **diag, **upd, **timer.metrics(), **rollout.metrics}
                # everything generated (dropped episodes of dynamic sampling too): the rollout budget
                metrics.update({f"rollout/{k}": v for k, v in rollout_metrics(rollout.generated).items()})
                tokens = metrics.get("rollout/tokens/generated", 0.0)
                metrics["throughput/gen_tokens_per_s"] = tokens / max(timer.seconds["rollout"], 1e-9)
                metrics["memory/peak_rss_gb"] = peak_rss_gb()  # of this process so far: which step set it
                if cfg.eval.every and self.step % cfg.eval.every == 0 and self.step < t.steps:
                    ev = self.evaluate(f"step {self.step}")
                    if ev:
                        metrics.update(ev.metrics("eval"))
                logger.log(self.step, metrics)
                result.history.append(metrics)
                if main:
                    self.progress.line(step_line(self.step, t.steps, metrics, timer))
                    for warning in drift.check({"step": self.step, **metrics}):
                        self.progress.line(warning.line())
                run_bar.advance()
                every = cfg.checkpoint.every
                if self.step == t.steps or (every and self.step % every == 0):
                    if main:  # replicas are identical: one writer
                        save_checkpoint(self.run_dir, self._state(), keep_last=cfg.checkpoint.keep_last)
                    barrier(self.dist)
            result.steps_done = self.step
            if cfg.eval.after:
                result.after = self.evaluate("after")
                if result.after:
                    logger.log(self.step, result.after.metrics("eval"))
        finally:
            logger.close()
        if main and cfg.checkpoint.plots:
            from srpo.train.plots import plot_run

            plot_run(self.run_dir)
        if main and cfg.checkpoint.export:
            self.export()
        barrier(self.dist)
        return result

    def _begin(self) -> tuple[MetricsLogger | _NoLogger, TrainResult]:
        """Resume (or start over), open the metrics log, evaluate before training."""
        cfg, main = self.cfg, self.dist.is_main
        if self._resume_from is not None:  # before anything is written: a bad checkpoint changes nothing
            # resume_checkpoint verified every file's checksum when it picked the checkpoint
            loaded = load_checkpoint(self._resume_from, self._state(), files_verified=True)
            self.step = int(loaded.data_state["next_step"])
        if main:
            write_config(self.run_dir, to_dict(cfg))
        logger: MetricsLogger | _NoLogger = _NoLogger()
        if main:
            logger = MetricsLogger(self.run_dir, tensorboard=cfg.checkpoint.tensorboard,
                                   wandb={"config": to_dict(cfg)} if cfg.checkpoint.wandb else None)
        result = TrainResult(self.run_dir, 0)
        if self._resume_from is not None:
            if self.dist.active:
                # the checkpoint holds rank 0's RNG state; without this every rank would sample
                # the same tokens (multi-process resumes are exact in weights, not in samples)
                torch.manual_seed(cfg.seed + 1_000_003 * self.dist.rank + self.step)
            self.progress.line(rewind_logs(self.run_dir, logger, self.step, self._resume_from, main=main))
            return logger, result
        if cfg.resume:  # killed before its first checkpoint: nothing to continue, start over
            self.progress.line(rewind_logs(self.run_dir, logger, 0, None, main=main))
        if cfg.eval.before:
            result.before = self.evaluate("before")
            if result.before:
                logger.log(0, result.before.metrics("eval"))
        return logger, result

    def _keep_episodes(self, episodes: list[Episode], batch: FlatBatch, record: UpdateRecord,
                       skipped: list[bool]) -> None:
        """RUN/episodes/step-N.jsonl.gz: the step's episodes (a sample: srpo.train.episodes_log)."""
        limit = self.cfg.checkpoint.episodes_per_step
        if limit == 0:
            return
        records = episodes_log.episode_records(
            episodes,
            step=self.step,
            prompt_text=episodes_log.prompt_decoder(self.policies),
            batch=batch,
            update=record,
            skipped=skipped,
            keep=episodes_log.kept_episodes(episodes, limit),
        )
        episodes_log.write_records(episodes_log.step_file(self.run_dir, self.step), records)

    def export(self) -> list[Path]:
        """Each trained policy as a plain Hugging Face folder under RUN/export/<policy>."""
        return export_policies(self.policies, self.run_dir)


class _NoLogger:
    """The metrics log of ranks other than 0."""

    def log(self, step: int, metrics: dict[str, float]) -> None: ...
    def resume(self, step: int, **kwargs: Any) -> int:
        return 0

    def close(self) -> None: ...
