"""One update of the policies from a rollout batch, in the shape of CleanRL's PPO update:

    for epoch in range(epochs):
        for sets in split_sets(batch, minibatches):        # exactly `minibatches` parts of whole sets
            step = with_step_weights(spec, batch.select_sets(sets))   # weights once per optimizer step
            for micro in pack_sets(step, micro_batch_tokens): loss(micro).backward()
            optimizer_step()

Each optimizer step sees whole sets only (minibatches and micro-batches are packs of sets), so
the setwise loss and its N_sets normalization are exact. Log-probs (old, new, reference) are
those of the distribution each member was sampled from: its policy at its temperature
(srpo.train.forward). Several policies (separate models, or LoRA adapters on one base) are
updated in the same step, each with its own optimizer, learning rate and gradient clipping.

Sets whose advantage is exactly 0 are left out of every forward and backward (`skipped_sets`,
derived once per rollout batch by the loop): their loss and gradient are exactly 0, and the
weights of the other sets are those of the full optimizer step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from srpo.batch import FlatBatch, pack_sets, split_sets
from srpo.config.schema import TrainConfig
from srpo.objective.diagnostics import kl_k3, masked_token_mean
from srpo.objective.methods import (
    MethodSpec,
    informative_sets,
    method_loss,
    step_counts,
    with_step_weights,
)
from srpo.record.console import MicroBatchCounter
from srpo.record.episodes_log import UpdateRecord
from srpo.record.progress import Bar
from srpo.rollout.policies import PolicySet
from srpo.train.distributed import DistContext, all_reduce_gradients, sum_counts
from srpo.train.forward import BatchLogprobs, batch_logprobs
from srpo.train.metrics import combine_micro_batches, mean_over_steps


def skipped_sets(batch: FlatBatch, t: TrainConfig) -> torch.Tensor:
    """[S] bool: the sets the update leaves out: those whose members all belong to frozen
    policies (train.frozen_policies: no parameter of theirs is trained, so their gradient is 0
    whatever the terms), and, with train.skip_zero_advantage, those whose advantage is exactly 0
    (none when a KL or entropy term is on, since those reach every token)."""
    frozen = frozen_sets(batch, t.frozen_policies)
    if not t.skip_zero_advantage or t.kl_beta > 0 or t.entropy_alpha > 0:
        return frozen
    return frozen | ~informative_sets(batch)


def frozen_sets(batch: FlatBatch, frozen: Sequence[str]) -> torch.Tensor:
    """[S] bool: the sets whose every member was written by a frozen policy."""
    if not frozen:
        return torch.zeros(batch.num_sets, dtype=torch.bool, device=batch.device)
    member_frozen = torch.tensor([p in frozen for p in batch.member_policy], dtype=torch.long,
                                 device=batch.device)  # [M]
    frozen_members = torch.zeros(batch.num_sets, dtype=torch.long, device=batch.device)
    frozen_members.index_add_(0, batch.set_index, member_frozen)  # [S]: frozen members per set
    return frozen_members == batch.set_sizes.to(batch.device)


def forward_diagnostics(micro: FlatBatch, out: BatchLogprobs) -> dict[str, float]:
    """Token-mean entropy and the train/inference mismatch KL(sampler || trainer forward)."""
    mask = micro.response_mask
    metrics = {"entropy": masked_token_mean(out.entropy.detach(), mask)}
    if micro.sampling_logprobs is not None:
        sampled, trained = micro.sampling_logprobs.double(), out.logprobs.detach().double()
        metrics["mismatch/kl"] = masked_token_mean(kl_k3(sampled, trained), mask)  # float64: k3 ~ d^2/2
        metrics["mismatch/abs_diff"] = masked_token_mean((sampled - trained).abs(), mask)
    return metrics


class GradientBySize:
    """The gradient added since the last call, as one norm over every trainable parameter of
    every policy: the optimizer step's gradient is a sum over micro-batches, so the part added
    by the micro-batches of one set size is its gradient (train.grad_norm_by_set_size). Holds
    one copy of the trainable parameters' gradients (LoRA: the adapters only)."""

    def __init__(self, params: dict[str, list[torch.nn.Parameter]]) -> None:
        self.params = [p for ps in params.values() for p in ps]
        self.before: list[torch.Tensor | None] = [None] * len(self.params)

    def since_last(self) -> float:
        total = 0.0
        for i, p in enumerate(self.params):
            now = p.grad
            if now is None:
                continue
            added = now if self.before[i] is None else now - self.before[i]
            total += float(added.double().pow(2).sum())
            self.before[i] = now.detach().clone()
        return math.sqrt(total)


@dataclasses.dataclass
class PolicyUpdate:
    """The policies, their optimizers and the method: everything an update step touches."""

    spec: MethodSpec
    policies: PolicySet
    params: dict[str, list[torch.nn.Parameter]]
    optimizers: dict[str, torch.optim.Optimizer]
    schedulers: dict[str, torch.optim.lr_scheduler.LRScheduler]
    train: TrainConfig
    dist: DistContext
    reference: PolicySet | None  # frozen copies for the KL penalty (None: none, or LoRA's base)

    @property
    def on_policy(self) -> bool:
        """One update per rollout batch: pi_old == pi_theta, so no separate old-log-prob pass."""
        return self.train.epochs == 1 and self.train.minibatches == 1

    def logprobs(self, policies: PolicySet, batch: FlatBatch, *, with_entropy: bool = False) -> BatchLogprobs:
        t = self.train
        # rows run whole under activation checkpointing: a recomputed layer would append to the
        # cache again
        share = t.share_prompt_forward and not t.activation_checkpointing
        return batch_logprobs(policies, batch, chunk_size=t.logprob_chunk_size, with_entropy=with_entropy,
                              share_prompts=share)

    # ---------------------------------------------------------------- before the update

    def old_and_ref_logprobs(
        self, batch: FlatBatch, sets: Sequence[int] | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, dict[str, float]]:
        """log pi_old (recomputed by the training forward; None when on-policy), log pi_ref when
        beta > 0, and the forward diagnostics. sets: compute only these sets' rows (the update
        skips the others); their rows of the returned [M, T] tensors hold zeros."""
        need_old, need_ref = not self.on_policy, self.train.kl_beta > 0
        if not (need_old or need_ref):
            return None, None, {}
        ids_of = list(range(batch.num_sets)) if sets is None else list(sets)
        m, t = batch.response_mask.shape
        old = torch.zeros(m, t, dtype=torch.float32, device=batch.device) if need_old else None  # [M, T]
        ref = torch.zeros(m, t, dtype=torch.float32, device=batch.device) if need_ref else None  # [M, T]
        parts = []
        with torch.no_grad():
            if ids_of:
                for local in pack_sets(batch.select_sets(ids_of), self.train.micro_batch_tokens):
                    ids = [ids_of[i] for i in local]
                    micro, rows = batch.select_sets(ids), batch.member_rows(ids)  # rows: [m] of [M]
                    if need_old:
                        out = self.logprobs(self.policies, micro, with_entropy=True)
                        old[rows] = out.logprobs
                        parts.append(forward_diagnostics(micro, out))
                    if need_ref:
                        ref[rows] = self.reference_logprobs(micro)
        return old, ref, combine_micro_batches(parts)

    def reference_logprobs(self, micro: FlatBatch) -> torch.Tensor:
        if self.reference is not None:
            return self.logprobs(self.reference, micro).logprobs
        model = self.policies.models()[0]  # LoRA: the base with its adapters off is the reference
        with model.disable_adapter():
            base = (PolicySet.shared(model, self.policies[self.policies.names[0]].tokenizer)
                    .with_compute_of(self.policies))
            return self.logprobs(
                base, dataclasses.replace(micro, member_policy=("shared",) * micro.num_members)).logprobs

    # ---------------------------------------------------------------- the update

    def run(self, batch: FlatBatch, skipped: list[bool], record: UpdateRecord | None, bar: Bar,
            *, step: int, loss_scale: float = 1.0) -> dict[str, float]:
        """K epochs over the rollout batch; each is exactly `minibatches` optimizer steps of whole
        sets (srpo.batch.split_sets), the same count on every rank. skipped: [S] sets left out
        (their loss and gradient are 0). record: filled with each computed set's log-ratio and
        clipped share (the episode browser's). step: the run's step (for error messages).
        loss_scale: a factor on every optimizer step's aggregation weights, so on its loss and
        gradient (train.dynamic_sampling_short_steps: a step with little signal, a small update)."""
        t = self.train
        for model in self.policies.models():
            model.train()
        steps: list[dict[str, float]] = []  # metrics of each optimizer step
        grad_norms: dict[str, list[float]] = {n: [] for n in self.params}
        counter = MicroBatchCounter(bar, optimizer_steps=t.epochs * t.minibatches)
        for _ in range(t.epochs):
            for set_ids in split_sets(batch, t.minibatches):
                weighted = self._weighted_step(batch, set_ids, loss_scale)
                for opt in self.optimizers.values():
                    opt.zero_grad(set_to_none=True)
                steps.append(self._accumulate_gradients(weighted, set_ids, skipped, record, counter, step))
                self._optimizer_step(weighted, grad_norms)
                counter.step_done()
        return self._metrics(batch, skipped, steps, grad_norms)

    def _weighted_step(self, batch: FlatBatch, set_ids: list[int], loss_scale: float = 1.0) -> FlatBatch:
        """The sets of one optimizer step, with their weights. N_sets and every other count are
        those of this optimizer step (all ranks), skipped sets included: the weights of the sets
        that are computed do not depend on which are skipped. loss_scale multiplies every weight."""
        sub = batch.select_sets(set_ids)
        totals = sum_counts(self.dist, step_counts(sub)) if self.dist.active else None
        weighted = with_step_weights(self.spec, sub, totals=totals)
        if loss_scale == 1.0:
            return weighted
        return dataclasses.replace(weighted, member_weights=weighted.member_weights * loss_scale,
                                   set_weights=weighted.set_weights * loss_scale)

    def _accumulate_gradients(self, weighted: FlatBatch, set_ids: list[int], skipped: list[bool],
                              record: UpdateRecord | None, counter: MicroBatchCounter, step: int) -> dict[str, float]:
        """Backward of the method's loss over the step's computed sets, one micro-batch of whole
        sets at a time (micro-batch losses add up to the step's loss); returns its metrics."""
        t = self.train
        on_policy = weighted.old_logprobs is None
        work_ids = [i for i, s in enumerate(set_ids) if not skipped[s]]
        if not work_ids:  # every set of this step has advantage 0: its loss and gradient are 0
            return combine_micro_batches([{"loss": 0.0, "policy/loss": 0.0}])
        work = weighted.select_sets(work_ids)
        packs, pack_sizes = self._packs(work)
        counter.plan(len(packs))
        parts: list[dict[str, float]] = []
        by_size = GradientBySize(self.params) if pack_sizes is not None else None
        for j, micro_ids in enumerate(packs):
            micro = work.select_sets(micro_ids)
            out = self.logprobs(self.policies, micro, with_entropy=on_policy or t.entropy_alpha > 0)
            if on_policy:  # pi_old is the policy itself: its detached forward is log pi_old
                micro = dataclasses.replace(micro, old_logprobs=out.logprobs.detach())
                parts.append(forward_diagnostics(micro, out))
            loss = method_loss(self.spec, micro, out.logprobs, entropy=out.entropy,
                               kl_beta=t.kl_beta, entropy_alpha=t.entropy_alpha, tis_cap=t.tis_cap)
            if not torch.isfinite(loss.loss):
                raise FloatingPointError(f"non-finite loss {loss.loss.item()} at step {step}")
            loss.loss.backward()
            parts.append(loss.metrics)
            if record is not None:  # the rollout batch's ids of this micro-batch's sets
                record.add([set_ids[work_ids[i]] for i in micro_ids], loss.sets)
            if by_size is not None and (j + 1 == len(packs) or pack_sizes[j + 1] != pack_sizes[j]):
                parts.append({f"grad/k{pack_sizes[j]}/norm": by_size.since_last()})
            counter.micro_batch_done(j, len(packs))
        return combine_micro_batches(parts)

    def _packs(self, work: FlatBatch) -> tuple[list[list[int]], list[int] | None]:
        """The step's micro-batches (lists of WORK's set ids) and, under
        train.grad_norm_by_set_size, the one set size of each (micro-batches then hold one size
        each, sizes in increasing order); else (packs, None)."""
        if not self.train.grad_norm_by_set_size:
            return pack_sets(work, self.train.micro_batch_tokens), None
        sizes = work.set_sizes.tolist()
        packs, pack_sizes = [], []
        for size in sorted(set(sizes)):
            ids = [i for i, k in enumerate(sizes) if k == size]
            for local in pack_sets(work.select_sets(ids), self.train.micro_batch_tokens):
                packs.append([ids[i] for i in local])
                pack_sizes.append(size)
        return packs, pack_sizes

    def _optimizer_step(self, weighted: FlatBatch, grad_norms: dict[str, list[float]]) -> None:
        """Per policy: (all-reduce across ranks), clip the global gradient norm, AdamW, lr schedule."""
        clip = self.train.grad_clip
        self._zero_skipped_gradients(weighted)
        for name, params in self.params.items():
            if self.dist.active:
                all_reduce_gradients(self.dist, params)
            norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else math.inf)
            grad_norms[name].append(float(norm))
            self.optimizers[name].step()
            self.schedulers[name].step()

    def _zero_skipped_gradients(self, weighted: FlatBatch) -> None:
        """A policy whose members in this optimizer step were all skipped has no gradient; without
        skipping its gradient would be exactly 0. Give it that zero, so the optimizer (AdamW's
        moments, weight decay) steps exactly as it would have."""
        for name in set(weighted.member_policy) & set(self.params):  # frozen policies have none
            for p in self.params[name]:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)

    def _metrics(self, batch: FlatBatch, skipped: list[bool], steps: list[dict[str, float]],
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
