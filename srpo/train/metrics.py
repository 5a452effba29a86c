"""Every metric the trainer logs, declared once with its reduction.

    combine(parts)   one optimizer step's metrics from its micro-batches'
    combine(steps, over="steps")   the update's metrics from its optimizer steps'

A metric's reduction says how its values combine:

    sum    a micro-batch carries its share of the optimizer step's value (the loss terms: each
           micro-batch holds its slice of the step's weights; counts): summed over the
           micro-batches of a step, then the mean over the update's optimizer steps (a step's
           loss, never a sum over epochs and minibatches)
    mean   averaged over micro-batches and over optimizer steps
    max    the largest value, at both levels

A key no template declares is an error (UndeclaredMetric) wherever values are combined, so a
new metric is declared here and documented in docs/metrics.md (a test checks both) instead of
being averaged silently. Templates name one path segment with {name}: `ratio/{k}/log_mean`
matches `ratio/k3/log_mean` and `ratio/all/log_mean`.
"""

from __future__ import annotations

import re
import resource
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from srpo.rollout.runner import rollout_metrics

if TYPE_CHECKING:
    from srpo.record.console import PhaseTimer
    from srpo.train.sampling import StepRollout

REDUCTIONS = ("sum", "mean", "max")


class UndeclaredMetric(KeyError):
    """A metric key that no template of METRICS matches."""


@dataclass(frozen=True)
class Metric:
    template: str  # key, with {name} for one path segment (a set size, an agent, a policy)
    reduction: str  # "sum" | "mean" | "max" (see the module doc)
    source: str  # who produces it (for the next engineer; docs/metrics.md has the formulas)


def _declare(source: str, reduction: str, *templates: str) -> list[Metric]:
    return [Metric(t, reduction, source) for t in templates]


METRICS: tuple[Metric, ...] = tuple(
    # the loss, per micro-batch (srpo.objective.methods.method_policy_loss)
    _declare("loss", "sum", "loss", "policy/loss", "kl_ref", "entropy_bonus", "ratio/clamp_count")
    + _declare("loss", "mean",
               "ratio/{k}/log_mean", "ratio/{k}/log_std", "ratio/{k}/mean",
               "clip/{k}/frac", "clip/{k}/frac_low", "clip/{k}/frac_high",
               "set_ratio/{k}/log_mean", "set_ratio/{k}/log_std", "approx_kl",
               "members/spread/{which}", "members/outside_share", "members/escaping_share",
               "members/stopped_share")
    # the training forward, per micro-batch (srpo.train.update.forward_diagnostics)
    + _declare("forward", "mean", "entropy", "mismatch/kl", "mismatch/abs_diff")
    + _declare("loss", "mean", "mismatch/is_weight", "mismatch/is_truncated")
    # the rollout batch, once per step (srpo.objective.methods.prepare_step)
    + _declare("advantages", "sum", "sets/{k}/count", "adv/num_groups", "adv/degenerate_groups")
    + _declare("advantages", "mean", "adv/{k}/abs_mean", "adv/degenerate_share",
               "reward/mean", "reward/std", "length/{agent}/mean")
    + _declare("advantages", "max", "length/{agent}/max")
    # the update, once per step (srpo.train.update)
    + _declare("update", "sum", "update/optimizer_steps")
    + _declare("update", "mean", "update/skipped_set_share", "update/skipped_token_share",
               "grad_norm/{policy}", "lr/{policy}", "grad/{k}/norm")
    # the loop, once per step (srpo.train.trainer, srpo.record.console.PhaseTimer)
    + _declare("loop", "sum", "time/{phase}")
    + _declare("loop", "mean", "throughput/gen_tokens_per_s")
    + _declare("loop", "max", "memory/peak_rss_gb")
    # the rollout engine, once per step (srpo.rollout.runner.rollout_metrics, with rollout/)
    + _declare("rollout", "sum",
               "rollout/episodes", "rollout/sets/count", "rollout/sets/size_{k}", "rollout/members/count",
               "rollout/members/empty", "rollout/tokens/generated", "rollout/event/{event}",
               "rollout/workflow/{workflow}")
    + _declare("rollout", "mean", "rollout/reward/{component}", "rollout/stop/length",
               "rollout/members/unconsumed_share", "rollout/members/unconsumed_share/{event}",
               "rollout/answers/top_share", "rollout/members/empty_share",
               "rollout/length/{agent}", "rollout/episode/{key}")
    # dynamic sampling, once per step (srpo.train.sampling)
    + _declare("dynamic sampling", "sum", "rollout/dynamic/draws", "rollout/dynamic/informative_tasks",
               "rollout/dynamic/informative_judged", "rollout/dynamic/draws_needed",
               "rollout/dynamic/dropped_episodes", "rollout/dynamic/dropped_tokens")
    + _declare("dynamic sampling", "mean", "rollout/dynamic/loss_scale")
    # held-out evaluation (srpo.record.evaluate.EvalResult.metrics)
    + _declare("eval", "mean", "eval/accuracy", "eval/ci_low", "eval/ci_high", "eval/agent/{agent}",
               "eval/top_answer_share")
    + _declare("eval", "sum", "eval/n", "eval/seconds")
)


def template_regex(template: str) -> re.Pattern[str]:
    """`ratio/{k}/mean` -> a regex matching the keys it stands for ({name}: one path segment)."""
    parts = re.split(r"\{[a-z_]+\}", template)
    return re.compile("[^/]+".join(re.escape(p) for p in parts) + r"\Z")


_PATTERNS = tuple((template_regex(m.template), m) for m in METRICS)


@lru_cache(maxsize=4096)
def declared(key: str) -> Metric:
    """The declaration of a logged key; UndeclaredMetric names it when there is none."""
    for pattern, metric in _PATTERNS:
        if pattern.match(key):
            return metric
    raise UndeclaredMetric(
        f"metric {key!r} is not declared in srpo.train.metrics.METRICS: declare it there with its "
        f"reduction (sum, mean or max) and document it in docs/metrics.md"
    )


def combine(parts: Sequence[dict[str, float]], *, over: str = "micro_batches") -> dict[str, float]:
    """Per key, over the parts that have it, its declared reduction (over="micro_batches"), or
    over="steps": the mean for `sum` and `mean` metrics (the update logs a mean optimizer step),
    the max for `max` metrics. Keys come out sorted."""
    if over not in ("micro_batches", "steps"):
        raise ValueError(f"over must be 'micro_batches' or 'steps', got {over!r}")
    out: dict[str, float] = {}
    for k in sorted({k for p in parts for k in p}):
        vals = [p[k] for p in parts if k in p]
        reduction = declared(k).reduction
        if reduction == "max":
            out[k] = max(vals)
        elif reduction == "sum" and over == "micro_batches":
            out[k] = sum(vals)
        else:
            out[k] = sum(vals) / len(vals)
    return out


def undeclared(keys: Iterable[str]) -> list[str]:
    """The keys no template declares (for tests and checks)."""
    out = []
    for k in keys:
        try:
            declared(k)
        except UndeclaredMetric:
            out.append(k)
    return sorted(out)


def combine_micro_batches(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    """One optimizer step's metrics from its micro-batches' (each key by its reduction)."""
    return combine(parts)


def mean_over_steps(steps: Sequence[dict[str, float]]) -> dict[str, float]:
    """The update's metrics: the mean optimizer step (never a sum over epochs and minibatches)."""
    return combine(steps, over="steps")


# Metrics that measure the machine, not the run: two runs of one config (a resumed run and its
# uninterrupted twin, the API and the CLI) agree on everything else, to the bit, on one machine.
MACHINE_DEPENDENT = ("time/", "throughput/", "eval/seconds", "memory/")


def run_dependent(row: dict[str, float]) -> dict[str, float]:
    """row without its machine-dependent metrics (MACHINE_DEPENDENT): what reproducibility compares."""
    return {k: v for k, v in row.items() if not k.startswith(MACHINE_DEPENDENT)}


def peak_rss_gb() -> float:
    """The process's peak resident memory so far, in GiB (getrusage; Linux reports KiB, macOS
    bytes). Logged every step, so the step (or the model load and first evaluation, step 1) that
    set the run's peak is visible in metrics.jsonl."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024**3 if sys.platform == "darwin" else 1024**2)


def step_metrics(rollout: StepRollout, timer: PhaseTimer, *parts: dict[str, float]) -> dict[str, float]:
    """One step's metrics row: the loop's parts (advantages, forward, update), the phase times,
    dynamic sampling's, everything generated (dropped draws of dynamic sampling too: the rollout
    budget), generation throughput, and this process's peak memory so far (which step set it)."""
    metrics: dict[str, float] = {}
    for part in parts:
        metrics.update(part)
    metrics.update({**timer.metrics(), **rollout.metrics})
    metrics.update({f"rollout/{k}": v for k, v in rollout_metrics(rollout.generated).items()})
    tokens = metrics.get("rollout/tokens/generated", 0.0)
    metrics["throughput/gen_tokens_per_s"] = tokens / max(timer.seconds["rollout"], 1e-9)
    metrics["memory/peak_rss_gb"] = peak_rss_gb()
    return metrics
