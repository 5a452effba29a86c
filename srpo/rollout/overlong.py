"""Overlong penalty: a training reward for outputs the token budget cut (DAPO's overlong
punishment, hard form, applied where SRPO credits: the set).

An output that ran into `max_new_tokens` (stop_reason "length") never finished its answer;
a task reward that reads the last number of such a text may still score it (a cut
"2 * 3 is 6. You can also" reads as 6), so nothing stops the policy from drifting toward
answers that ramble to the cap. With penalty w > 0 each episode's reward gets one more
named component:

    overlong = -w * (outputs of the episode stopped by length) / (outputs of the episode)

and a transition that carries its own reward R_S (a workflow's per-round credit) is credited

    R_S - w * (members of S stopped by length) / |S|

so the set, SRPO's unit, is charged for the share of its members that were cut; a
single-output episode gets -w when cut, as in DAPO (whose soft form, a linear ramp over the
last tokens of the budget, is not implemented). The component is logged as reward/overlong;
held-out evaluation does not use it (its runner scores the task reward alone, and accuracy
reads the task's success component).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from srpo.types import ActiveSet, Member

OVERLONG_COMPONENT = "overlong"
CUT = "length"  # the stop reason of an output the token budget ended (srpo.rollout.backends.protocol)


def check_penalty(penalty: float) -> float:
    """The penalty as a float; a clear error unless finite and >= 0."""
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)):
        raise TypeError(f"overlong penalty must be a number, got {penalty!r}")
    if not (math.isfinite(penalty) and penalty >= 0):
        raise ValueError(f"overlong penalty must be finite and >= 0, got {penalty!r}")
    return float(penalty)


def cut_share(members: Sequence[Member]) -> float:
    """The share of `members` whose generation the token budget ended (0.0 for none)."""
    if not members:
        raise ValueError("cut_share needs at least one output")
    return sum(m.stop_reason == CUT for m in members) / len(members)


def apply_overlong_penalty(
    components: dict[str, float], transitions: Sequence[ActiveSet], penalty: float
) -> dict[str, float]:
    """The episode's reward components with the overlong component added (module doc).

    Transitions with their own reward are charged in place (ActiveSet.reward); those without
    take the episode's reward, which now holds the component. Raises if the task reward
    already has a component named "overlong" (one name would hide the other in the logs).
    """
    if OVERLONG_COMPONENT in components:
        raise ValueError(f"the task reward already has a component named {OVERLONG_COMPONENT!r}; "
                         f"the overlong penalty would overwrite it")
    members = [m for s in transitions for m in s.members]
    out = dict(components)
    out[OVERLONG_COMPONENT] = -penalty * cut_share(members)
    for s in transitions:
        if s.reward is not None:
            s.reward = float(s.reward) - penalty * cut_share(s.members)
    return out
