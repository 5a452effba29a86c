"""The training loop: rollout -> active sets -> advantages -> K epochs of updates -> log -> eval -> checkpoint.

    trainer = Trainer(load_config("srpo/presets/smoke.yaml"))
    trainer.train()

The update, per rollout batch (Trainer.update):

    for epoch in range(epochs):
        for sets in split_sets(batch, minibatches):        # exactly `minibatches` parts of whole sets
            step = with_step_weights(spec, batch.select_sets(sets))   # weights once per optimizer step
            for micro in pack_sets(step, micro_batch_tokens): loss(micro).backward()
            optimizer_step()

Each optimizer step sees whole sets only (minibatches and micro-batches are packs of sets), so
the setwise loss and its N_sets normalization are exact. Log-probs (old, new, reference) are
those of the distribution each member was sampled from: its policy at its temperature
(srpo.train.forward). The batch moves to the device once, after the rollout. Several policies
(separate models, or LoRA adapters on one base) are updated in the same step, each with its own
optimizer, learning rate and gradient clipping. The method (SRPO or a baseline) is a MethodSpec
from srpo.objective; this file never branches on its name.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from srpo.batch import FlatBatch, build_flat_batch, pack_sets, split_sets
from srpo.config import Config, to_dict
from srpo.objective.diagnostics import kl_k3, masked_token_mean
from srpo.objective.methods import (
    MethodSpec,
    get_method,
    informative_sets,
    method_policy_loss,
    prepare_step,
    set_update_state,
    step_counts,
    with_step_weights,
)
from srpo.build import build_policies, build_rollout, load_tasks, task_pack
from srpo.rollout.backends import check_training_backend
from srpo.rollout.policies import PolicySet
from srpo.rollout.runner import rollout_metrics
from srpo.train import episodes_log
from srpo.train.checkpoint import (
    CheckpointError,
    TrainState,
    corrupt_checkpoint_message,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)
from srpo.train.distributed import (
    all_reduce_gradients,
    barrier,
    broadcast_from_main,
    check_data_parallel,
    init_distributed,
    sum_counts,
)
from srpo.train.episodes_log import UpdateRecord
from srpo.train.evaluate import EvalResult, evaluate, write_eval_json
from srpo.train.forward import batch_logprobs, check_training_sampling
from srpo.train.metrics import combine_micro_batches, mean_over_steps
from srpo.train.metrics_log import MetricsLogger
from srpo.train.optim import build_optimizers, policy_parameters
from srpo.train.preflight import preflight
from srpo.train.progress import Bar, RunProgress
from srpo.train.run_identity import RESUMABLE_FIELDS, resume_fingerprint
from srpo.train.run_dir import RunLock, check_config_file, write_config
from srpo.types import Episode, Task

# What a run writes into its directory: a fresh run (resume=false) refuses a directory holding any.
RUN_ARTIFACTS = ("metrics.jsonl", "checkpoints", "eval", "export", "episodes")


def checkpointed_models(policies: PolicySet) -> dict[str, torch.nn.Module]:
    """The modules a checkpoint holds: separate policies by name; a shared model or a LoRA base
    (with all its adapters) once, as "model"."""
    if policies.kind == "separate":
        return {n: policies[n].model for n in policies.names}
    return {"model": policies.models()[0]}


def fingerprint_of(cfg: Config) -> str:
    """The checkpoint fingerprint of a config (srpo.train.run_identity)."""
    return resume_fingerprint(to_dict(cfg))


class PhaseTimer:
    """Wall time of each named phase of a step: `with timer("rollout"): ...`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"time/{k}": v for k, v in self.seconds.items()}


@dataclass
class TrainResult:
    run_dir: Path
    steps_done: int
    before: EvalResult | None = None
    after: EvalResult | None = None
    history: list[dict[str, float]] = field(default_factory=list)


class Trainer:
    def __init__(self, cfg: Config, *, policies: PolicySet | None = None):
        preflight(cfg)  # settings that would fail late or learn nothing, before any work
        t = cfg.train
        self.spec: MethodSpec = get_method(t.method, **t.method_settings)
        self.dist = init_distributed(cfg.device)
        if self.dist.active:
            check_data_parallel(self.spec)
            if t.tasks_per_step < self.dist.world:
                raise ValueError(f"train.tasks_per_step ({t.tasks_per_step}) must be >= the number "
                                 f"of processes ({self.dist.world}): ranks own whole tasks")
            if cfg.device.startswith("cuda"):
                cfg = cfg.model_copy(update={"device": f"cuda:{self.dist.local_rank}"})
        check_minibatches(t.minibatches, t.tasks_per_step, cfg.group_size, self.dist.world)
        if t.dynamic_sampling and self.dist.active:
            raise ValueError("train.dynamic_sampling runs in one process only: ranks would keep different "
                             "numbers of tasks (and minibatches); turn it off for data-parallel runs")
        # "{time}" in output_dir gives every run of a preset its own directory
        run_dir = cfg.output_dir.replace("{time}", time.strftime("%Y%m%d-%H%M%S"))
        if cfg.resume and "{time}" in cfg.output_dir:
            raise ValueError("resume=true needs the run's actual output_dir, not a {time} template")
        self.run_dir = Path(broadcast_from_main(self.dist, run_dir))
        self.cfg = cfg = cfg.model_copy(update={"output_dir": str(self.run_dir)})
        # one writer per run directory, from before anything in it is read until train() ends
        self._run_lock = RunLock.acquire(self.run_dir) if self.dist.is_main else None
        try:
            if self.dist.is_main:
                check_config_file(self.run_dir)
            self._set_up(cfg, policies)
        except BaseException:
            self.release_run_dir(discard=True)  # refused before any work: leave no directory behind
            raise

    def _set_up(self, cfg: Config, policies: PolicySet | None) -> None:
        t = cfg.train
        self.fingerprint = fingerprint_of(cfg)
        if t.threads:
            torch.set_num_threads(t.threads)
        self._seed_everything(cfg.seed)
        # Fail on a bad checkpoint before any model is built or any work is done.
        self._resume_from = self._find_resume_checkpoint()
        self.policies = policies or build_policies(cfg.model, cfg.policies, cfg.device)
        if t.activation_checkpointing:
            for model in self.policies.models():
                # non-reentrant: works with frozen inputs (LoRA) without enable_input_require_grads;
                # HF applies it in train mode only, so rollouts and no-grad passes are unaffected
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.runner, self.workflow = build_rollout(cfg, policies=self.policies)
        check_training_backend(self.runner.backend)  # a quantized sampler is not the trained policy
        # the reward component evaluation counts as solved: the config's, else the task pack's
        self.success_component = cfg.eval.success_component or task_pack(cfg).success_component
        check_training_sampling({a: self.runner.agents[a].sampling for a in self.workflow.agents})
        self.pad_id = self._pad_token_id()
        self.params = policy_parameters(self.policies)
        self.optimizers, self.schedulers = build_optimizers(
            self.params, lr=t.lr, policy_lr=t.policy_lr, weight_decay=t.weight_decay,
            betas=tuple(t.adam_betas), warmup_steps=t.warmup_steps,
        )
        self.reference = self._build_reference() if t.kl_beta > 0 else None
        if self.dist.active:  # identical replicas above; different samples from here on
            torch.manual_seed(cfg.seed + 1_000_003 * self.dist.rank)
        self.train_tasks = load_tasks(cfg.task, split="train")
        self.heldout_tasks = load_tasks(cfg.task, split="heldout", limit=cfg.eval.size) if cfg.eval.size != 0 else []
        self.step = 0
        # bars on rank 0's terminal only; plain lines otherwise (srpo.train.progress)
        self.progress = RunProgress(enabled=None if self.dist.is_main else False)

    def release_run_dir(self, *, discard: bool = False) -> None:
        """Let another process write this run directory (train() does it when it ends).
        discard: also remove the directory if the lock created it and it holds nothing else."""
        if self._run_lock is not None:
            self._run_lock.release(discard=discard)

    # ------------------------------------------------------------------ setup helpers

    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        torch.manual_seed(seed)
        try:
            import numpy as np

            np.random.seed(seed)
        except ImportError:  # numpy is a dependency, but seeding it is only a courtesy
            pass

    def _pad_token_id(self) -> int:
        ids = {self.policies[n].tokenizer.pad_token_id for n in self.policies.names}
        if None in ids or len(ids) != 1:
            raise ValueError(f"all policies need one shared pad token id, got {sorted(map(str, ids))}")
        return ids.pop()

    def _find_resume_checkpoint(self) -> Path | None:
        """The checkpoint to resume from, verified (markers, checksums, config) before any work.

        The rule for a run directory: a fresh run (resume=false) refuses one that already holds a
        run's files; resume=true continues from the newest complete checkpoint, or, when a run
        was killed before its first checkpoint, starts again from step 0 (its log is discarded).
        """
        if not self.cfg.resume:
            found = [n for n in RUN_ARTIFACTS if (self.run_dir / n).exists()]
            if found:
                raise ValueError(
                    f"{self.run_dir} already holds a run ({', '.join(found)}); pass resume=true to "
                    f"continue it (from its newest checkpoint, or from step 0 if it has none) or "
                    f"choose another output_dir"
                )
            return None
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is None:
            return None
        try:
            meta = verify_checkpoint(ckpt)
        except CheckpointError as e:
            raise CheckpointError(corrupt_checkpoint_message(ckpt, e)) from None
        if meta.get("config_fingerprint") != self.fingerprint:
            raise ValueError(
                f"checkpoint {ckpt} was written by another config (fingerprint "
                f"{meta.get('config_fingerprint')} != {self.fingerprint}); only "
                f"{', '.join(RESUMABLE_FIELDS)} may change when resuming"
            )
        return ckpt

    def _build_reference(self) -> PolicySet | None:
        """Frozen copies for the KL penalty. LoRA needs none: the base with adapters off is it."""
        if self.policies.kind == "lora":
            return None
        copies = {}
        for name in self.policies.names:
            p = self.policies[name]
            m = copy.deepcopy(p.model).eval()
            for q in m.parameters():
                q.requires_grad_(False)
            copies[name] = (m, p.tokenizer)
        if self.policies.kind == "shared":
            (m, tok), = copies.values()
            return PolicySet.shared(m, tok, name=self.policies.names[0])
        return PolicySet.separate(copies)

    def _state(self) -> TrainState:
        return TrainState(
            step=self.step,
            policies=checkpointed_models(self.policies),
            optimizers=self.optimizers,
            schedulers=self.schedulers,
            data_state={"next_step": self.step},
            config_fingerprint=self.fingerprint,
        )

    # ------------------------------------------------------------------ phases

    def tasks_for_step(self, step: int) -> list[Task]:
        """A deterministic function of the step, so resuming needs only the step number."""
        n = self.cfg.train.tasks_per_step
        pool = self.train_tasks
        order = list(range(len(pool)))
        epoch, offset = divmod(step * n, len(pool))
        random.Random(f"{self.cfg.seed}/tasks/{epoch}").shuffle(order)
        picked = [order[(offset + j) % len(pool)] for j in range(n)]
        if len(set(picked)) < len(picked):
            raise ValueError(f"train.tasks_per_step ({n}) exceeds task.train_size ({len(pool)})")
        # with several processes each owns whole tasks (groups and sets never cross ranks)
        return [pool[i] for i in picked[self.dist.rank :: self.dist.world]]

    def rollout(self, step: int, tasks: list[Task] | None = None, draw: int = 0) -> list[Episode]:
        """G episodes of each of the step's tasks (or of `tasks`, an extra draw of the step)."""
        # fresh workflow draws every step (and every extra draw of a step)
        self.runner.seed = self.cfg.seed * 1_000_003 + step + 7_919 * draw
        for model in self.policies.models():
            model.eval()
        with torch.no_grad():
            tasks = self.tasks_for_step(step) if tasks is None else tasks
            total = len(tasks) * self.cfg.group_size
            with self.progress.bar("rollout", total=total, transient=True, info="generating round 1") as bar:
                def on_round(r: int, done: int, n: int) -> None:
                    bar.update(completed=done, info=f"round {r} done, generating round {r + 1}"
                               if done < n else f"{r} rounds")
                return self.runner.run(tasks, self.workflow, group_size=self.cfg.group_size,
                                       on_round=on_round).episodes

    def rollout_step(self, step: int) -> tuple[list[Episode], list[Episode], dict[str, float]]:
        """(episodes to train on, every episode generated, dynamic-sampling metrics).

        Without dynamic sampling both are the step's rollout. With it (DAPO's dynamic sampling):
        a task is kept only if its group is informative (some advantage of the method is
        non-zero); more tasks are drawn (deterministically from the step and the draw, never one
        already drawn this step) and rolled out until tasks_per_step are kept or
        dynamic_sampling_max_draws rollouts were made. The rest is generated and dropped: it is
        counted in the rollout metrics (rollout/episodes, rollout/tokens/generated) and in
        rollout/dynamic/*. If no task of any draw is informative, the first draw is kept (its
        update is a zero step).
        """
        t = self.cfg.train
        first = self.rollout(step)
        if not t.dynamic_sampling:
            return first, first, {}
        generated, kept, kept_tasks = list(first), [], []
        drawn = {e.task.task_id for e in first}
        pending, draws = first, 1
        while True:
            informative = self._informative_tasks(pending)
            for task_id in dict.fromkeys(e.task.task_id for e in pending):
                if task_id in informative and len(kept_tasks) < t.tasks_per_step:
                    kept_tasks.append(task_id)
                    kept += [e for e in pending if e.task.task_id == task_id]
            if len(kept_tasks) >= t.tasks_per_step or draws >= t.dynamic_sampling_max_draws:
                break
            rng = random.Random(f"{self.cfg.seed}/dynamic/{step}/{draws}")
            fresh = [task for task in self.train_tasks if task.task_id not in drawn]
            extra = rng.sample(fresh, min(t.tasks_per_step, len(fresh)))
            if not extra:
                break
            drawn.update(task.task_id for task in extra)
            pending = self.rollout(step, extra, draw=draws)
            generated += pending
            draws += 1
        kept = kept or first
        kept_ids = {id(e) for e in kept}
        dropped = [e for e in generated if id(e) not in kept_ids]
        tokens = rollout_metrics(dropped).get("tokens/generated", 0.0) if dropped else 0.0
        return kept, generated, {
            "rollout/dynamic/draws": float(draws),
            "rollout/dynamic/informative_tasks": float(len(kept_tasks)),
            "rollout/dynamic/dropped_episodes": float(len(dropped)),
            "rollout/dynamic/dropped_tokens": float(tokens),
        }

    def _informative_tasks(self, episodes: list[Episode]) -> set[str]:
        """Tasks with a set (or member) of non-zero advantage under the method's own grouping."""
        batch, _ = prepare_step(self.spec, build_flat_batch(episodes, self.pad_id), None)
        return {batch.set_task[s] for s in informative_sets(batch).nonzero().flatten().tolist()}

    def _logprobs(self, policies: PolicySet, batch: FlatBatch, *, with_entropy: bool = False):
        return batch_logprobs(policies, batch, chunk_size=self.cfg.train.logprob_chunk_size, with_entropy=with_entropy)

    @property
    def on_policy(self) -> bool:
        """One update per rollout batch: pi_old == pi_theta, so no separate old-log-prob pass."""
        t = self.cfg.train
        return t.epochs == 1 and t.minibatches == 1

    @staticmethod
    def _forward_diagnostics(micro: FlatBatch, out) -> dict[str, float]:
        """Token-mean entropy and the train/inference mismatch KL(sampler || trainer forward)."""
        mask = micro.response_mask
        metrics = {"entropy": masked_token_mean(out.entropy.detach(), mask)}
        if micro.sampling_logprobs is not None:
            sampled, trained = micro.sampling_logprobs.double(), out.logprobs.detach().double()
            metrics["mismatch/kl"] = masked_token_mean(kl_k3(sampled, trained), mask)  # float64: k3 ~ d^2/2
            metrics["mismatch/abs_diff"] = masked_token_mean((sampled - trained).abs(), mask)
        return metrics

    def old_and_ref_logprobs(
        self, batch: FlatBatch, sets: list[int] | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, dict[str, float]]:
        """log pi_old (recomputed by the training forward; None when on-policy), log pi_ref when
        beta > 0, and the forward diagnostics. sets: compute only these sets' rows (the update
        skips the others); their rows of the returned [M, T] tensors hold zeros."""
        need_old, need_ref = not self.on_policy, self.cfg.train.kl_beta > 0
        if not (need_old or need_ref):
            return None, None, {}
        ids_of = list(range(batch.num_sets)) if sets is None else list(sets)
        olds, refs, parts = [], [], []
        with torch.no_grad():
            if ids_of:
                work = batch.select_sets(ids_of)
                for local in pack_sets(work, self.cfg.train.micro_batch_tokens):
                    ids = [ids_of[i] for i in local]
                    micro = batch.select_sets(ids)
                    if need_old:
                        out = self._logprobs(self.policies, micro, with_entropy=True)
                        olds.append((ids, out.logprobs))
                        parts.append(self._forward_diagnostics(micro, out))
                    if need_ref:
                        refs.append((ids, self._reference_logprobs(micro)))
        old = _scatter_rows(batch, olds) if need_old else None
        ref = _scatter_rows(batch, refs) if need_ref else None
        return old, ref, combine_micro_batches(parts)

    def _skipped_sets(self, batch: FlatBatch) -> torch.Tensor:
        """[S] bool: the sets the update leaves out (advantage exactly 0; none when a KL or
        entropy term is on, since those reach every token)."""
        t = self.cfg.train
        if not t.skip_zero_advantage or t.kl_beta > 0 or t.entropy_alpha > 0:
            return torch.zeros(batch.num_sets, dtype=torch.bool, device=batch.device)
        return ~informative_sets(batch)

    def _reference_logprobs(self, micro: FlatBatch) -> torch.Tensor:
        if self.reference is not None:
            return self._logprobs(self.reference, micro).logprobs
        model = self.policies.models()[0]
        with model.disable_adapter():
            base = PolicySet.shared(model, self.policies[self.policies.names[0]].tokenizer)
            return self._logprobs(base, dataclasses.replace(micro, member_policy=("shared",) * micro.num_members)).logprobs

    def update(self, batch: FlatBatch, record: UpdateRecord | None = None) -> dict[str, float]:
        """K epochs over the rollout batch; each epoch is exactly `minibatches` optimizer steps of
        whole sets (srpo.batch.split_sets), the same count on every rank. record: filled with
        each computed set's log-ratio and clipped share (the episode browser's; not the loss)."""
        with self.progress.bar("update", total=None, transient=True, info="forward and backward") as bar:
            return self._update(batch, record, bar)

    def _update(self, batch: FlatBatch, record: UpdateRecord | None, bar: Bar) -> dict[str, float]:
        """The loop, in the shape of CleanRL's PPO update: per optimizer step, select whole sets and
        compute their weights once; accumulate the gradient of one loss call per micro-batch;
        then one optimizer step per policy."""
        t = self.cfg.train
        for model in self.policies.models():
            model.train()
        skipped = self._skipped_sets(batch).tolist()  # [S] left out: their loss and gradient are 0
        steps: list[dict[str, float]] = []  # metrics of each optimizer step
        grad_norms: dict[str, list[float]] = {n: [] for n in self.params}
        counter = _MicroBatchCounter(bar, optimizer_steps=t.epochs * t.minibatches)
        for _ in range(t.epochs):
            for set_ids in split_sets(batch, t.minibatches):
                step = self._weighted_step(batch, set_ids)
                for opt in self.optimizers.values():
                    opt.zero_grad(set_to_none=True)
                steps.append(self._accumulate_gradients(step, set_ids, skipped, record, counter))
                self._optimizer_step(step, grad_norms)
                counter.step_done()
        return self._update_metrics(batch, skipped, steps, grad_norms)

    def _weighted_step(self, batch: FlatBatch, set_ids: list[int]) -> FlatBatch:
        """The sets of one optimizer step, with their weights. N_sets and every other count are
        those of this optimizer step (all ranks), skipped sets included: the weights of the sets
        that are computed do not depend on which are skipped."""
        step = batch.select_sets(set_ids)
        totals = sum_counts(self.dist, step_counts(step)) if self.dist.active else None
        return with_step_weights(self.spec, step, totals=totals)

    def _accumulate_gradients(self, step: FlatBatch, set_ids: list[int], skipped: list[bool],
                              record: UpdateRecord | None, counter: _MicroBatchCounter) -> dict[str, float]:
        """Backward of the method's loss over the step's computed sets, one micro-batch of whole
        sets at a time (micro-batch losses add up to the step's loss); returns its metrics."""
        t = self.cfg.train
        on_policy = step.old_logprobs is None
        work_ids = [i for i, s in enumerate(set_ids) if not skipped[s]]
        if not work_ids:  # every set of this step has advantage 0: its loss and gradient are 0
            return combine_micro_batches([{"loss": 0.0, "policy/loss": 0.0}])
        work = step.select_sets(work_ids)
        packs = pack_sets(work, t.micro_batch_tokens)
        counter.plan(len(packs))
        parts: list[dict[str, float]] = []
        for j, micro_ids in enumerate(packs):
            micro = work.select_sets(micro_ids)
            out = self._logprobs(self.policies, micro, with_entropy=on_policy or t.entropy_alpha > 0)
            if on_policy:  # pi_old is the policy itself: its detached forward is log pi_old
                micro = dataclasses.replace(micro, old_logprobs=out.logprobs.detach())
                parts.append(self._forward_diagnostics(micro, out))
            loss, m = method_policy_loss(self.spec, micro, out.logprobs, entropy=out.entropy,
                                         kl_beta=t.kl_beta, entropy_alpha=t.entropy_alpha)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss {loss.item()} at step {self.step}")
            loss.backward()
            parts.append(m)
            if record is not None:  # the rollout batch's ids of this micro-batch's sets
                record.add([set_ids[work_ids[i]] for i in micro_ids],
                           set_update_state(self.spec, micro, out.logprobs))
            counter.micro_batch_done(j, len(packs))
        return combine_micro_batches(parts)

    def _optimizer_step(self, step: FlatBatch, grad_norms: dict[str, list[float]]) -> None:
        """Per policy: (all-reduce across ranks), clip the global gradient norm, AdamW, lr schedule."""
        clip = self.cfg.train.grad_clip
        self._zero_skipped_gradients(step)
        for name, params in self.params.items():
            if self.dist.active:
                all_reduce_gradients(self.dist, params)
            norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else math.inf)
            grad_norms[name].append(float(norm))
            self.optimizers[name].step()
            self.schedulers[name].step()

    def _update_metrics(self, batch: FlatBatch, skipped: list[bool], steps: list[dict[str, float]],
                        grad_norms: dict[str, list[float]]) -> dict[str, float]:
        metrics = mean_over_steps(steps)
        metrics["update/optimizer_steps"] = float(len(steps))
        lengths = batch.response_lengths.double()  # [M]
        member_skipped = torch.tensor(skipped, device=batch.device)[batch.set_index]  # [M]
        metrics["update/skipped_set_share"] = sum(skipped) / max(len(skipped), 1)
        metrics["update/skipped_token_share"] = float(lengths[member_skipped].sum() / lengths.sum())
        for name, norms in grad_norms.items():
            metrics[f"grad_norm/{name}"] = sum(norms) / len(norms)
            metrics[f"lr/{name}"] = self.schedulers[name].get_last_lr()[0]
        return metrics

    def _zero_skipped_gradients(self, step: FlatBatch) -> None:
        """A policy whose members in this optimizer step were all skipped has no gradient; without
        skipping its gradient would be exactly 0. Give it that zero, so the optimizer (AdamW's
        moments, weight decay) steps exactly as it would have."""
        for name in set(step.member_policy):
            for p in self.params[name]:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)

    def evaluate(self, label: str) -> EvalResult | None:
        """Held-out accuracy, on rank 0 (the others wait)."""
        if not self.heldout_tasks:
            return None
        if not self.dist.is_main:
            barrier(self.dist)
            return None
        for model in self.policies.models():
            model.eval()
        n = len(self.heldout_tasks)
        if not self.progress.enabled:  # minutes may pass: say what is running
            self.progress.line(f"evaluating ({label}): {n} held-out problems ...")
        with torch.no_grad(), self.progress.bar(f"eval {label}", total=n, transient=True) as bar:
            def on_progress(done: int, total: int, correct: int) -> None:
                bar.update(completed=done, info=f"accuracy so far {100 * correct / done:.1f}% ({correct}/{done})")
            result, episodes = evaluate(self.runner, self.workflow, self.heldout_tasks, seed=self.cfg.seed,
                                        success_component=self.success_component,
                                        batch_tasks=self.cfg.eval.batch_tasks, on_progress=on_progress)
        self.progress.line(f"[eval {label}] {result.summary()}  per agent: "
                           + ", ".join(f"{a} {100 * v:.1f}%" for a, v in sorted(result.per_agent.items())))
        # per-item correctness, for paired comparisons across runs (RUN/eval/<label>.json), and
        # the episodes themselves (the report's before/after answers)
        name = label.replace(' ', '-')
        write_eval_json(self.run_dir / "eval" / f"{name}.json", result, label=label, step=self.step)
        episodes_log.write_records(
            self.run_dir / "eval" / f"{name}.episodes.jsonl.gz",
            episodes_log.episode_records(episodes, step=self.step, prompt_text=episodes_log.prompt_decoder(self.policies)))
        barrier(self.dist)
        return result

    # ------------------------------------------------------------------ the loop

    def train(self) -> TrainResult:
        if not self.progress.enabled:  # no bar redraws in logs (transformers' own bars included)
            import transformers

            transformers.utils.logging.disable_progress_bar()
        try:
            with self.progress:
                result = self._train()
            if self.dist.is_main and self.cfg.checkpoint.report:
                self._write_report()
        finally:
            self.release_run_dir()
        return result

    def _write_report(self) -> None:
        """RUN/report.html. A run directory the report cannot read (a file damaged after it was
        written) does not undo a finished run: one line says why, and `srpo report RUN` retries."""
        import sys

        from srpo.train.report import ReportError, write_report

        try:
            print(f"report: {write_report(self.run_dir)}", flush=True)
        except ReportError as e:
            print(f"report: not written ({e}); the run itself is complete: fix the file and run "
                  f"`srpo report {self.run_dir}`", file=sys.stderr, flush=True)

    def _train(self) -> TrainResult:
        cfg, t = self.cfg, self.cfg.train
        main = self.dist.is_main
        if self._resume_from is not None:  # before anything is written: a bad checkpoint changes nothing
            # _find_resume_checkpoint verified every file's checksum when it picked the checkpoint
            loaded = load_checkpoint(self._resume_from, self._state(), files_verified=True)
            self.step = int(loaded.data_state["next_step"])
        if main:
            write_config(self.run_dir, to_dict(cfg))
        logger = _NoLogger()
        if main:
            logger = MetricsLogger(self.run_dir, tensorboard=cfg.checkpoint.tensorboard,
                                   wandb={"config": to_dict(cfg)} if cfg.checkpoint.wandb else None)
        result = TrainResult(self.run_dir, 0)
        if self._resume_from is not None:
            if self.dist.active:
                # the checkpoint holds rank 0's RNG state; without this every rank would sample
                # the same tokens (multi-process resumes are exact in weights, not in samples)
                torch.manual_seed(cfg.seed + 1_000_003 * self.dist.rank + self.step)
            # lines of later steps, and the final evaluation logged after this checkpoint, are redone
            logger.resume(self.step, logged_after_checkpoint=lambda row: "loss" not in row)
            if main:
                episodes_log.drop_steps_after(self.run_dir, self.step)
            self.progress.line(f"resumed from {self._resume_from} at step {self.step}")
        else:
            if cfg.resume:  # killed before its first checkpoint: nothing to continue, start over
                logger.resume(-1)
                if main:
                    episodes_log.drop_steps_after(self.run_dir, 0)
                self.progress.line(f"resume=true: {self.run_dir} has no complete checkpoint; starting from "
                                   "step 0 (the log of the interrupted run is discarded)")
            if cfg.eval.before:
                result.before = self.evaluate("before")
                if result.before:
                    logger.log(0, result.before.metrics("eval"))
        run_bar = self.progress.bar("train", total=t.steps, completed=self.step, info="steps")
        try:
            while self.step < t.steps:
                timer = PhaseTimer()
                with timer("rollout"):
                    episodes, generated, dynamic = self.rollout_step(self.step)
                with timer("sets"):
                    batch = build_flat_batch(episodes, self.pad_id).to(self.cfg.device)
                with timer("advantages"):
                    batch, step_metrics = prepare_step(self.spec, batch, None)
                with timer("old_logprobs"):  # only for the sets the update computes
                    skipped = self._skipped_sets(batch).tolist()
                    old, ref, diag = self.old_and_ref_logprobs(
                        batch, [s for s in range(batch.num_sets) if not skipped[s]])
                    batch = dataclasses.replace(batch, old_logprobs=old, ref_logprobs=ref)
                record = UpdateRecord(batch.num_sets)
                with timer("update"):
                    upd = self.update(batch, record)
                self.step += 1
                if main:
                    self._keep_episodes(episodes, batch, record, skipped)
                metrics = {**step_metrics, **diag, **upd, **timer.metrics(), **dynamic}
                # everything generated (dropped episodes of dynamic sampling too): the rollout budget
                metrics.update({f"rollout/{k}": v for k, v in rollout_metrics(generated).items()})
                tokens = metrics.get("rollout/tokens/generated", 0.0)
                metrics["throughput/gen_tokens_per_s"] = tokens / max(timer.seconds["rollout"], 1e-9)
                if cfg.eval.every and self.step % cfg.eval.every == 0 and self.step < t.steps:
                    ev = self.evaluate(f"step {self.step}")
                    if ev:
                        metrics.update(ev.metrics("eval"))
                logger.log(self.step, metrics)
                result.history.append(metrics)
                if main:
                    self.progress.line(_progress_line(self.step, t.steps, metrics, timer))
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

    def _keep_episodes(self, episodes: list[Episode], batch: FlatBatch, record: UpdateRecord,
                       skipped: list[bool]) -> None:
        """RUN/episodes/step-N.jsonl.gz: the step's episodes (a sample: srpo.train.episodes_log)."""
        limit = self.cfg.checkpoint.episodes_per_step
        if limit == 0:
            return
        records = episodes_log.episode_records(
            episodes, step=self.step, prompt_text=episodes_log.prompt_decoder(self.policies), batch=batch, update=record,
            skipped=skipped, keep=episodes_log.kept_episodes(episodes, limit))
        episodes_log.write_records(episodes_log.step_file(self.run_dir, self.step), records)

    def export(self) -> list[Path]:
        """Each trained policy as a plain Hugging Face folder under RUN/export/<policy>."""
        from srpo.train.checkpoint import export_policy

        out = []
        for name in self.policies.names:
            p = self.policies[name]
            out.append(export_policy(p.model, p.tokenizer, self.run_dir / "export" / name,
                                     adapter=p.adapter, overwrite=True))
        return out


class _NoLogger:
    """The metrics log of ranks other than 0."""

    def log(self, step: int, metrics: dict[str, float]) -> None: ...
    def resume(self, step: int, **kwargs: Any) -> int: return 0
    def close(self) -> None: ...


def check_minibatches(minibatches: int, tasks_per_step: int, group_size: int, world: int) -> None:
    """Every rank must be able to cut its sets into exactly `minibatches` parts of whole sets,
    so that all ranks make the same number of optimizer steps (and collective calls).

    A rank owns at least floor(tasks_per_step / world) tasks, i.e. that many times group_size
    episodes, and every episode has at least one active set: that many sets are guaranteed on
    every rank whatever the workflow does. Checked on every rank before any work.
    """
    episodes = (tasks_per_step // world) * group_size
    if minibatches > episodes:
        where = f" on each of {world} processes" if world > 1 else ""
        raise ValueError(
            f"train.minibatches ({minibatches}) exceeds the episodes of a step{where} ({episodes} = "
            f"{tasks_per_step // world} tasks x group_size {group_size}); an episode may have a single "
            f"active set and a minibatch holds whole sets, so use at most {episodes} minibatches"
        )


def _scatter_rows(batch: FlatBatch, pieces: list[tuple[list[int], torch.Tensor]]) -> torch.Tensor:
    """Reassembles per-micro-batch [m, T'] tensors into the batch's [M, T] member order."""
    m, t = batch.response_mask.shape
    out = torch.zeros(m, t, dtype=torch.float32, device=batch.device)  # rows of no piece stay 0
    for ids, values in pieces:
        rows = torch.isin(batch.set_index, torch.tensor(ids, device=batch.device)).nonzero().flatten()
        out[rows, : values.shape[1]] = values
    return out


def _progress_line(step: int, steps: int, m: dict[str, Any], timer: PhaseTimer) -> str:
    phases = " ".join(f"{k} {v:.1f}s" for k, v in timer.seconds.items())
    # the loss of an on-policy step is ~0 by construction (ratio 1, advantages centered within
    # each group: loss = -sum_S w_S A_S); its gradient is not, hence the gradient norm beside it
    grads = [v for k, v in m.items() if k.startswith("grad_norm/")]
    grad = f"{sum(grads) / len(grads):.3f}" if grads else "-"
    return (f"step {step}/{steps}  reward {m.get('reward/mean', float('nan')):.3f}  "
            f"loss {m.get('loss', float('nan')):+.4f}  grad {grad}  clip {m.get('clip/all/frac', 0.0):.3f}  "
            f"kl {m.get('approx_kl', 0.0):.2e}  gen {m['throughput/gen_tokens_per_s']:.0f} tok/s  [{phases}]")


class _MicroBatchCounter:
    """The update's progress bar: micro-batches done of (so far + this step's x the steps left)."""

    def __init__(self, bar: Bar, *, optimizer_steps: int):
        self.bar, self.optimizer_steps = bar, optimizer_steps
        self.steps_done = self.micro_done = 0

    def plan(self, micro_batches: int) -> None:
        left = self.optimizer_steps - self.steps_done  # the later steps guessed like this one
        self.bar.update(total=self.micro_done + micro_batches * left or None)

    def micro_batch_done(self, j: int, micro_batches: int) -> None:
        self.micro_done += 1
        self.bar.update(completed=self.micro_done,
                        info=f"optimizer step {self.steps_done + 1}/{self.optimizer_steps}, "
                             f"micro-batch {j + 1}/{micro_batches}")

    def step_done(self) -> None:
        self.steps_done += 1
