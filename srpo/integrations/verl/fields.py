"""What each output carries from the agent loop to the trainer and the workers (no verl import).

The agent loop writes one verl output per member of every active set, in the episode's order
(transition by transition, members in set order), and puts these keys in its `extra_fields`:

    srpo_set         int   the set's index within the episode (the set, within its session)
    srpo_set_size    int   |S|
    srpo_member      int   position of the member in its set
    srpo_agent       str   role that produced the output
    srpo_policy      str   policy the role names
    srpo_event       str   the transition's event key ("solve", "aggregate", "query-1", ...)
    srpo_set_reward  float R_S, the return credited to the set
    srpo_task_id     str   the srpo task id
    srpo_workflow    str   the workflow name

verl stores each output under the key "{uid}_{session_id}_{index}" (uid: the prompt; session:
one of rollout.n rollouts; index: the output's position), so the global set key of an output is
"{uid}_{session_id}/{srpo_set}". The trainer turns set keys into two per-row tensors that travel
with the batch to the workers (TransferQueue fields):

    srpo_set_index   long  the set's index in the step (-1 on padding rows)
    srpo_step_sets   float number of sets in the row's optimizer mini-batch (over all dp ranks)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SET = "srpo_set"
SET_SIZE = "srpo_set_size"
MEMBER = "srpo_member"
AGENT = "srpo_agent"
POLICY = "srpo_policy"
EVENT = "srpo_event"
SET_REWARD = "srpo_set_reward"
TASK_ID = "srpo_task_id"
WORKFLOW = "srpo_workflow"
EXTRA_KEYS = (SET, SET_SIZE, MEMBER, AGENT, POLICY, EVENT, SET_REWARD, TASK_ID, WORKFLOW)

SET_INDEX = "srpo_set_index"
STEP_SETS = "srpo_step_sets"


def session_of_key(key: str) -> str:
    """'{uid}_{session_id}_{index}' -> '{uid}_{session_id}' (verl's multi-output key format)."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3 or not parts[2].isdigit():
        raise ValueError(f"output key {key!r} is not verl's '{{uid}}_{{session_id}}_{{index}}'")
    return f"{parts[0]}_{parts[1]}"


def set_key(key: str, extra: Mapping[str, Any]) -> str:
    """The global set key of one output: '{uid}_{session_id}/{srpo_set}'."""
    if SET not in extra:
        raise ValueError(
            f"output {key!r} has no {SET!r} in its extra_fields: it was not produced by the "
            f"srpo_workflow agent loop, so its active set is unknown"
        )
    return f"{session_of_key(key)}/{int(extra[SET])}"


def set_keys(keys: Sequence[str], extras: Sequence[Mapping[str, Any] | None],
             padding: Sequence[bool] | None = None) -> list[str | None]:
    """Set key of every row; None for padding rows (verl's synthetic no-op samples)."""
    if len(keys) != len(extras):
        raise ValueError(f"{len(keys)} keys but {len(extras)} extra_fields")
    padding = padding if padding is not None else [False] * len(keys)
    return [None if pad else set_key(k, e or {}) for k, e, pad in zip(keys, extras, padding)]
