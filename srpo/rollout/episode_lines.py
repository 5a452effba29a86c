"""Episodes as JSON lines (what `srpo rollout` writes, one episode a line)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from srpo.disk import atomic_write_text
from srpo.jsonl import dumps_line
from srpo.types import Episode


def episode_to_dict(ep: Episode, *, with_ids: bool = False) -> dict[str, Any]:
    """{"task_id", "workflow", "reward", "reward_components", "gold", "metadata",
    "transitions": [{"event", "turn", "size", "return", "members": [{"agent", "policy", "text",
    "num_tokens", "num_trained_tokens", "stop_reason"}], "unconsumed_from"?}]}; members are the
    active set the transition consumed; a singleton of an output its transition did not read
    also has "unconsumed_from" (that transition's event). "task_kind": the task's kind where it
    has one (a mix of reasoning-gym datasets: the dataset that made it). with_ids adds
    prompt_ids / response_ids / loss_mask per member."""
    transitions = []
    for aset, ret in zip(ep.transitions, ep.set_returns()):
        members = []
        for m in aset.members:
            rec: dict[str, Any] = {
                "agent": m.agent,
                "policy": m.policy,
                "text": m.text,
                "num_tokens": len(m.response_ids),
                "num_trained_tokens": m.num_trained_tokens,
                "stop_reason": m.stop_reason,
            }
            if with_ids:
                rec.update(prompt_ids=m.prompt_ids, response_ids=m.response_ids,
                           loss_mask=m.loss_mask)
            members.append(rec)
        record = {"event": aset.event, "turn": aset.turn, "size": aset.size, "return": ret,
                  "members": members}
        if not aset.consumed:
            record["unconsumed_from"] = aset.unconsumed_from
        transitions.append(record)
    kind = ep.task.metadata.get("kind")
    return {
        "task_id": ep.task.task_id,
        **({"task_kind": kind} if kind is not None else {}),
        "workflow": ep.workflow,
        "reward": ep.reward,
        "reward_components": ep.reward_components,
        "gold": ep.task.answer,
        "metadata": ep.metadata,
        "transitions": transitions,
    }


def write_jsonl(episodes: Iterable[Episode], path: str | Path, *, with_ids: bool = False) -> int:
    """Write one episode a line; returns the number written. Parent folders are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # any generated character, one line each (srpo.jsonl); NaN stays allowed here, as before
    lines = [dumps_line(episode_to_dict(ep, with_ids=with_ids), default=str, allow_nan=True) for ep in episodes]
    atomic_write_text(path, "".join(lines))  # a full disk or a kill leaves the old file, never half
    return len(lines)
