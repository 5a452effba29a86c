"""Shared test helpers: synthetic episodes with known structure, no model needed."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

from srpo.objective.methods import prepare_step, with_step_weights
from srpo.types import ActiveSet, Episode, Member, Task

# The studies' own analyses live outside the package, in studies/<name>/ at the repository root;
# tests/studies imports them as `studies.<name>.<module>`, so the root goes on sys.path (here:
# a second conftest.py in tests/studies would shadow this module's helpers for `from conftest import`).
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def prepare_full_step(spec, batch, old, totals=None):
    """prepare_step, then the aggregation weights of one optimizer step holding the whole batch."""
    filled, metrics = prepare_step(spec, batch, old)
    return with_step_weights(spec, filled, totals=totals), metrics


@pytest.fixture
def workflows_registered_here_stay_here():
    """Undoes a test's workflow registrations (SRPOTrainer registers a workflow class or
    instance process-wide, as a user's script wants), so later tests that list the workflows
    see only what was registered before it."""
    from srpo.workflows import registry

    before = registry.WORKFLOWS.registered()
    yield
    registry.WORKFLOWS.reset(before)


def make_episodes(
    num_tasks: int = 3,
    group_size: int = 4,
    set_sizes: tuple[int, ...] = (3, 1),
    agents_per_set: tuple[tuple[str, ...], ...] | None = None,
    seed: int = 0,
    vocab: int = 50,
    max_prompt: int = 6,
    max_response: int = 7,
) -> list[Episode]:
    """G rollouts of each task; each episode has one transition per entry of `set_sizes`.

    Default workflow shape: 3 parallel solvers (one set of 3) then an aggregator (a set of 1).
    Rewards are drawn from {0, 0.5, 1} so groups are sometimes degenerate. Some responses carry
    observation tokens (loss_mask 0) in the middle, like tool results.
    """
    rng = random.Random(seed)
    if agents_per_set is None:
        agents_per_set = tuple(
            tuple("solver" for _ in range(k)) if k > 1 else ("aggregator",) for k in set_sizes
        )
    episodes = []
    for t in range(num_tasks):
        task = Task(task_id=f"task-{t}", prompt=f"question {t}", answer="1")
        for _ in range(group_size):
            transitions = []
            for turn, (k, agents) in enumerate(zip(set_sizes, agents_per_set)):
                members = []
                for j in range(k):
                    p = [rng.randrange(1, vocab) for _ in range(rng.randint(1, max_prompt))]
                    L = rng.randint(1, max_response)
                    r = [rng.randrange(1, vocab) for _ in range(L)]
                    mask = [1] * L
                    if L >= 4 and rng.random() < 0.3:
                        mask[1] = 0  # an observation token inside the response
                    members.append(
                        Member(agent=agents[j], policy="shared", prompt_ids=p, response_ids=r, loss_mask=mask)
                    )
                transitions.append(
                    ActiveSet(members=tuple(members), event=f"step{turn}", task_id=task.task_id, turn=turn)
                )
            reward = rng.choice([0.0, 0.5, 1.0])
            episodes.append(Episode(task=task, workflow="test", transitions=transitions, reward=reward))
    return episodes


@pytest.fixture
def episodes():
    return make_episodes()


def random_logprob_pair(m: int, t: int, seed: int = 0, scale: float = 0.3, dtype=torch.float64):
    """(logprobs requiring grad, old_logprobs) with random log-ratios of size ~scale."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(m, t, generator=g, dtype=dtype) * 3 - 0.1
    new = (old + scale * torch.randn(m, t, generator=g, dtype=dtype)).requires_grad_(True)
    return new, old


class FakeEntryPoint:
    """An installed entry point as importlib.metadata gives it: a name, a value, load()."""

    def __init__(self, name, value, obj):
        self.name, self.value, self._obj = name, value, obj

    def load(self):
        return self._obj


@pytest.fixture
def no_entry_points(monkeypatch):
    """As in an environment where srpo is not installed: no entry point in any group and nothing
    registered with the backend and task-pack lookups. Returns the list of "installed" entry
    points: append a FakeEntryPoint to install one."""
    from srpo import packs, plugins
    from srpo.rollout import backends

    found = []
    monkeypatch.setattr(plugins, "entry_points", lambda group: list(found))  # srpo.plugins' lookup
    monkeypatch.setattr(backends.BACKENDS, "_registered", {})
    monkeypatch.setattr(packs.PACKS, "_registered", {})
    return found
