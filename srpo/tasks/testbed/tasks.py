"""Cover tasks: a controlled multi-agent task whose reward is a function of a whole active set.

A task asks k members to cover a target of k distinct symbols drawn from an alphabet of m
symbols (m = alphabet_factor * k). Each member answers with tokens; the symbol of a member is
read from its first generated token,

    symbol(token id t) = (t - 3) mod m        (ids 0-2 are srpo's special tokens: no symbol)

so a policy that puts equal mass on every token (a randomly initialised model) hits each symbol
with probability ~1/m. The transition's reward is the share of the target its set covers,

    R_S = |{symbol(y_i) : i in S} ∩ target| / k          in [0, 1],

which depends on the members jointly: a duplicate adds nothing, so credit is set-level. The
optimum (R_S = 1) is known: every member names a different target symbol. At initialisation
E[R_S] = 1 - (1 - 1/m)^k ≈ 0.39-0.5 for alphabet_factor 2 and k = 1..16, so RL from scratch
sees signal at every set size.

A task has `rounds` targets, one transition (one set of k) per round; srpo.tasks.testbed.workflow
credits each round's set with its own coverage or with the episode's mean coverage.

Symbols are printed as letters for reading (A-Z, then a-z, then digits): m <= 62.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from srpo.types import Task

SYMBOLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
FIRST_ORDINARY_ID = 3  # ids 0, 1, 2: pad, bos, eos (srpo.models.tokenizers); no symbol
SOURCE = "testbed/cover"


def token_symbol(token_id: int, alphabet: int) -> int | None:
    """The symbol index (0..alphabet-1) a generated token names; None for a special token."""
    if token_id < FIRST_ORDINARY_ID:
        return None
    return (token_id - FIRST_ORDINARY_ID) % alphabet


def coverage(symbols: Sequence[int | None], target: Sequence[int]) -> float:
    """Share of `target` (distinct symbol indices) named by at least one of `symbols`."""
    if not target:
        raise ValueError("a cover target needs at least one symbol")
    return len(set(target) & {s for s in symbols if s is not None}) / len(target)


@dataclass(frozen=True)
class CoverSpec:
    """The shape of a family of cover tasks.

    set_sizes: k of each task, assigned in turn (one value: every task has that k; several: the
        family mixes set sizes, so one rollout batch holds sets of every size listed).
    rounds: targets per task (transitions per episode).
    alphabet_factor: m = alphabet_factor * k symbols per task (>= 1; 2 keeps chance coverage
        near one half at every k).
    """

    set_sizes: tuple[int, ...] = (4,)
    rounds: int = 1
    alphabet_factor: int = 2

    def __post_init__(self) -> None:
        if not self.set_sizes:
            raise ValueError("testbed set_sizes must list at least one set size")
        for k in self.set_sizes:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise ValueError(f"testbed set_sizes must be ints >= 1, got {k!r}")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise ValueError(f"testbed rounds must be an int >= 1, got {self.rounds!r}")
        if not isinstance(self.alphabet_factor, int) or self.alphabet_factor < 1:
            raise ValueError(f"testbed alphabet_factor must be an int >= 1, got {self.alphabet_factor!r}")
        biggest = max(self.set_sizes) * self.alphabet_factor
        if biggest > len(SYMBOLS):
            raise ValueError(
                f"testbed alphabet of {biggest} symbols (set size {max(self.set_sizes)} x "
                f"alphabet_factor {self.alphabet_factor}) exceeds the {len(SYMBOLS)} printable symbols"
            )


def cover_tasks(spec: CoverSpec, n: int, *, seed: int = 0, split: str = "train") -> list[Task]:
    """`n` cover tasks of `spec`, a deterministic function of (seed, split, index).

    metadata: k, alphabet (m), targets (one list of k distinct symbol indices per round).
    The prompt states the targets in letters, e.g. "cover 2: BDGA | FCHE".
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    tasks = []
    for i in range(n):
        k = spec.set_sizes[i % len(spec.set_sizes)]
        m = spec.alphabet_factor * k
        rng = random.Random(f"cover/{seed}/{split}/{i}")
        targets = [sorted(rng.sample(range(m), k)) for _ in range(spec.rounds)]
        shown = " | ".join("".join(SYMBOLS[s] for s in t) for t in targets)
        tasks.append(Task(
            task_id=f"cover-{split}-{i}",
            prompt=f"cover {i}: {shown}",
            answer=shown,
            source=SOURCE,
            metadata={"k": k, "alphabet": m, "targets": targets},
        ))
    return tasks


class CoverReward:
    """The reward function slot of a testbed run. Cover tasks are scored per set by the cover
    workflow (from token ids, not text); any other use is an error naming the task."""

    def __call__(self, task: Task, text: str) -> float:
        raise ValueError(
            f"task {task.task_id!r} is a testbed cover task: its reward is computed per active set "
            f"by the 'cover' workflow, which reads token ids; it cannot score a text (use "
            f"workflow.name: cover with task.name: testbed)"
        )
