"""The training loop: rollout -> active sets -> advantages -> old log-probs -> K epochs of
whole-set minibatches -> record.

    trainer = Trainer(load_config("srpo/presets/smoke.yaml"))
    result = trainer.train()           # TrainResult(run_dir, steps_done, before, after, history)

`Trainer._train` reads as the data flow of a step. The parts live in their own modules: what a
step trains on (srpo.train.sampling: dynamic sampling), the update (srpo.train.update), the
metrics (srpo.train.metrics), every derived seed (srpo.train.seeds); everything a run writes
(checkpoints, logs, the console, evaluations, plots, the report) is one `Recorder`
(srpo.record.recorder), which owns the rank-0 rule. The method (SRPO or a baseline) is a
MethodSpec from srpo.objective; no module here branches on its name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from srpo.batch import FlatBatch, build_flat_batch
from srpo.build import build_policies, build_rollout, load_tasks, task_pack
from srpo.config import Config, to_dict
from srpo.objective.methods import MethodSpec, get_method, prepare_step
from srpo.record.checkpoint import TrainState
from srpo.record.console import PhaseTimer
from srpo.record.episodes_log import UpdateRecord
from srpo.record.evaluate import EvalResult
from srpo.record.heldout import Heldout
from srpo.record.policies import checkpointed_models
from srpo.record.progress import RunProgress
from srpo.record.recorder import Recorder
from srpo.record.run_dir import RUN_ARTIFACTS, RunLock, check_config_file, resolve_run_dir, resume_checkpoint
from srpo.record.run_identity import RESUMABLE_FIELDS
from srpo.rollout.backends.protocol import check_training_backend
from srpo.rollout.policies import PolicySet
from srpo.train.distributed import barrier, broadcast_from_main, close_distributed, init_distributed
from srpo.train.forward import check_training_sampling
from srpo.train.metrics import combine_micro_batches, mean_over_steps, step_metrics
from srpo.train.optim import build_optimizers, policy_parameters
from srpo.train.preflight import (
    check_minibatches,
    check_process_layout,
    check_question_lengths,
    check_resume_steps,
    preflight,
)
from srpo.train.sampling import Sampler
from srpo.train.seeds import rank_seed, seed_everything
from srpo.train.setup import build_reference, enable_activation_checkpointing, fingerprint_of, shared_pad_token_id
from srpo.train.update import PolicyUpdate, skipped_sets

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
        self.params = policy_parameters(self.policies, t.frozen_policies)
        self.optimizers, self.schedulers = build_optimizers(
            self.params, lr=t.lr, policy_lr=t.policy_lr, weight_decay=t.weight_decay,
            betas=tuple(t.adam_betas), warmup_steps=t.warmup_steps,
        )
        self.reference = build_reference(self.policies) if t.kl_beta > 0 else None
        if self.dist.active:  # identical replicas above; different samples from here on
            torch.manual_seed(rank_seed(cfg.seed, self.dist.rank))
        self.train_tasks = load_tasks(cfg.task, split="train")
        self.heldout_tasks = load_tasks(cfg.task, split="heldout", limit=cfg.eval.size) if cfg.eval.size != 0 else []
        for split, tasks in (("train", self.train_tasks), ("heldout", self.heldout_tasks)):
            check_question_lengths(tasks, self.policies, cfg.sampling.max_new_tokens, split)
        self.step = 0
        # bars on rank 0's terminal only; plain lines otherwise (srpo.record.progress)
        self.progress = RunProgress(enabled=None if self.dist.is_main else False)
        self.sampler = Sampler(cfg, self.runner, self.workflow, self.policies, self.train_tasks, spec=self.spec,
                               pad_id=self.pad_id, rank=self.dist.rank, world=self.dist.world, progress=self.progress)
        self.updater = PolicyUpdate(self.spec, self.policies, self.params, self.optimizers, self.schedulers,
                                    t, self.dist, self.reference)
        heldout = Heldout(self.runner, self.workflow, self.policies, self.heldout_tasks, seed=cfg.seed,
                          success_component=self.success_component, batch_tasks=cfg.eval.batch_tasks,
                          temperatures=cfg.eval.temperatures)
        self.recorder = Recorder(cfg, self.run_dir, main=self.dist.is_main, sync=lambda: barrier(self.dist),
                                 progress=self.progress, heldout=heldout if self.heldout_tasks else None,
                                 policies=self.policies)

    def release_run_dir(self, *, discard: bool = False) -> None:
        """Let another process write this run directory (train() does it when it ends).
        discard: also remove the directory if the lock created it and it holds nothing else."""
        if self._run_lock is not None:
            self._run_lock.release(discard=discard)

    def checkpoint_state(self) -> TrainState:
        """What a checkpoint holds now: the step, the policies' modules, optimizers, schedulers."""
        return TrainState(
            step=self.step,
            policies=checkpointed_models(self.policies),
            optimizers=self.optimizers,
            schedulers=self.schedulers,
            data_state={"next_step": self.step},
            config_fingerprint=self.fingerprint,
        )

    def update(self, batch: FlatBatch, record: UpdateRecord | None = None, *,
               skipped: list[bool] | None = None, loss_scale: float = 1.0) -> dict[str, float]:
        """K epochs of whole-set minibatches over the rollout batch (srpo.train.update), under
        the console's bar. skipped: the sets left out, as the loop derived them (None: derived
        here). record: filled with each computed set's log-ratio and clipped share (the episode
        browser's; not the loss). loss_scale: the factor on every optimizer step's loss
        (StepRollout.loss_scale)."""
        skipped = skipped_sets(batch, self.cfg.train).tolist() if skipped is None else skipped
        with self.progress.bar("update", total=None, transient=True, info="forward and backward") as bar:
            return self.updater.run(batch, skipped, record, bar, step=self.step, loss_scale=loss_scale)

    # ------------------------------------------------------------------ the loop

    def train(self) -> TrainResult:
        """Runs the steps; at the end it lets go of the run directory and of the process group it
        created (multi-process runs), so a trainer trains once."""
        if not self.progress.enabled:  # no bar redraws in logs (transformers' own bars included)
            import transformers

            transformers.utils.logging.disable_progress_bar()
        try:
            with self.progress:
                self._train()
            self.recorder.write_report()
        finally:
            self.release_run_dir()
            close_distributed(self.dist)  # a group it created: see close_distributed for why
        rec = self.recorder
        return TrainResult(self.run_dir, self.step, before=rec.before, after=rec.after, history=rec.history)

    def _train(self) -> None:
        cfg, steps = self.cfg, self.cfg.train.steps
        self.step = self.recorder.begin(self.checkpoint_state(), self._resume_from)
        if self._resume_from is not None and self.dist.active:  # the checkpoint holds rank 0's RNG state
            torch.manual_seed(rank_seed(cfg.seed, self.dist.rank, self.step))
        try:
            while self.step < steps:
                timer = PhaseTimer()
                with timer("rollout"):
                    rollout = self.sampler.rollout_step(self.step)
                with timer("sets"):  # dynamic sampling built it already when it kept one whole draw
                    flat = None if rollout.prepared else build_flat_batch(rollout.episodes, self.pad_id).to(cfg.device)
                with timer("advantages"):
                    batch, advantage_metrics = rollout.prepared or prepare_step(self.spec, flat, None)
                with timer("old_logprobs"):  # only for the sets the update computes
                    skipped = skipped_sets(batch, cfg.train).tolist()
                    old, ref, forward_metrics = self.updater.old_and_ref_logprobs(
                        batch, [s for s in range(batch.num_sets) if not skipped[s]])
                    batch = dataclasses.replace(batch, old_logprobs=old, ref_logprobs=ref)
                record = UpdateRecord(batch.num_sets)
                with timer("update"):
                    update_metrics = self.update(batch, record, skipped=skipped, loss_scale=rollout.loss_scale)
                self.step += 1
                metrics = step_metrics(rollout, timer, advantage_metrics, forward_metrics, update_metrics)
                self.recorder.step(self.step, metrics, timer, episodes=rollout.episodes, batch=batch,
                                   update=record, skipped=skipped, state=self.checkpoint_state)
            self.recorder.end(self.step)
        finally:
            self.recorder.close()
