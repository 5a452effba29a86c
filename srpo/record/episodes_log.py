"""Every step's episodes, kept in the run directory for the report's episode browser.

    RUN/episodes/step-000001.jsonl.gz     one gzip JSON line per kept episode of step 1
    RUN/eval/<label>.episodes.jsonl.gz    the episodes of an evaluation (before, step-N, after)

A line is `srpo rollout`'s episode record (srpo.rollout.episode_lines.episode_to_dict: task id,
workflow, reward, reward components, gold, metadata, transitions with their members) plus:

    "step", "index" (position in the step's rollout batch), "question" (the task's prompt);
    per transition: "advantage" (A_S; member-level methods: the mean of its members'),
        "log_ratio" (Lambda_S under `mean` in the update; null when the set was not computed),
        "clipped" (share of its ratio units the clip stopped; null when not computed),
        "skipped" (true when its advantage was exactly 0 and the update left it out);
    per member: "prompt" (the decoded prompt tokens it was conditioned on, chat template
        included) and, for member-level methods, "advantage" (A_m).

Sampling rule: a step keeps whole task groups (all G rollouts of a task), the step's first tasks
in rollout order (tasks are drawn at random each step), up to `checkpoint.episodes_per_step`
episodes (None: all; 0: none, and no directory). Every prompt and response text is cut at
MAX_TEXT_CHARS characters (marked). So a step's file holds at most episodes_per_step x members
per episode x 2 x MAX_TEXT_CHARS characters before compression. With several processes, rank 0
writes its own episodes (its share of the step's tasks). The update's values of a set are those
of the last epoch that computed it.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from srpo.batch import FlatBatch
from srpo.disk import open_no_follow, writing
from srpo.jsonl import dumps_line, split_lines
from srpo.objective.methods import SetUpdateState
from srpo.rollout.episode_lines import episode_to_dict
from srpo.types import Episode, Member

EPISODES_DIR = "episodes"
MAX_TEXT_CHARS = 8000
_STEP_FILE = re.compile(r"^step-(\d+)\.jsonl\.gz$")
TRUNCATED = " ...[cut by srpo: longer than {n} characters]"


class UpdateRecord:
    """Per set of a rollout batch, what the update did: filled micro-batch by micro-batch."""

    def __init__(self, num_sets: int) -> None:
        self.log_ratio = torch.full((num_sets,), float("nan"), dtype=torch.float64)  # [S]
        self.clipped = torch.full((num_sets,), float("nan"), dtype=torch.float64)  # [S]

    def add(self, set_ids: Sequence[int], state: SetUpdateState) -> None:
        """set_ids: the rollout-batch ids of the micro-batch's sets, in its order."""
        ids = torch.as_tensor(list(set_ids), dtype=torch.long)
        self.log_ratio[ids] = state.log_ratio.detach().double().cpu()
        self.clipped[ids] = state.clipped.detach().double().cpu()


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + TRUNCATED.format(n=MAX_TEXT_CHARS)


def _num(x: float) -> float | None:
    return None if math.isnan(x) else float(x)  # NaN (not computed) -> null


def kept_episodes(episodes: Sequence[Episode], limit: int | None) -> list[int]:
    """Indices of the episodes a step keeps: whole task groups, first tasks first, <= limit."""
    if limit is None:
        return list(range(len(episodes)))
    groups: dict[str, list[int]] = {}
    for i, ep in enumerate(episodes):
        groups.setdefault(ep.task.task_id, []).append(i)
    kept: list[int] = []
    for ids in groups.values():
        if len(kept) + len(ids) > limit:
            break
        kept += ids
    return kept


def prompt_decoder(policies: Any) -> Callable[[Member], str]:
    """`episode_records`' prompt_text over a PolicySet: a member's prompt tokens decoded by its own
    policy's tokenizer, special tokens (the chat template) included. The trainer and `srpo eval`
    both log prompts this way."""
    def prompt_text(member: Member) -> str:
        return policies[member.policy].tokenizer.decode(member.prompt_ids, skip_special_tokens=False)
    return prompt_text


def episode_records(
    episodes: Sequence[Episode],
    *,
    step: int,
    prompt_text: Callable[[Member], str],
    batch: FlatBatch | None = None,
    update: UpdateRecord | None = None,
    skipped: Sequence[bool] | None = None,
    keep: Iterable[int] | None = None,
) -> list[dict[str, Any]]:
    """The log lines of `episodes` (module doc). batch: the step's rollout batch built from these
    episodes in this order (its sets are their transitions, in order), filled with advantages;
    None for evaluation episodes. skipped: [S] sets the update left out. keep: which to write."""
    set_adv = member_adv = None
    if batch is not None:
        if batch.set_advantages is not None:
            set_adv = batch.set_advantages.double().cpu().tolist()  # [S]
        else:  # member-level: the set's value is the mean of its members'
            m = batch.member_advantages.double().cpu()
            sums = torch.zeros(batch.num_sets, dtype=torch.float64).index_add(0, batch.set_index.cpu(), m)
            set_adv = (sums / batch.set_sizes.cpu().double()).tolist()
            member_adv = m.tolist()  # [M]
    first_set, first_member = [], []  # [E] offsets of each episode's sets / members in the batch
    s = m = 0
    for ep in episodes:
        first_set.append(s)
        first_member.append(m)
        s += len(ep.transitions)
        m += sum(t.size for t in ep.transitions)
    out = []
    for e in range(len(episodes)) if keep is None else keep:
        ep = episodes[e]
        rec = episode_to_dict(ep)
        rec = {"step": step, "index": e, "question": _cut(ep.task.prompt), **rec}
        mi = first_member[e]
        for t, (tr, aset) in enumerate(zip(rec["transitions"], ep.transitions)):
            sid = first_set[e] + t
            if set_adv is not None:
                tr["advantage"] = set_adv[sid]
                tr["skipped"] = bool(skipped[sid]) if skipped is not None else False
                tr["log_ratio"] = _num(float(update.log_ratio[sid])) if update is not None else None
                tr["clipped"] = _num(float(update.clipped[sid])) if update is not None else None
            for mrec, member in zip(tr["members"], aset.members):
                mrec["text"] = _cut(mrec["text"])
                mrec["prompt"] = _cut(prompt_text(member))
                if member_adv is not None:
                    mrec["advantage"] = member_adv[mi]
                mi += 1
        out.append(rec)
    return out


def write_records(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    """gzip JSON lines at `path`, written to a temp file and renamed (never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        # the temp file never through a link planted at its (fixed) name
        with writing(path), open_no_follow(tmp, "wb") as raw, \
                gzip.open(raw, "wt", encoding="utf-8", compresslevel=6) as f:
            for rec in records:
                f.write(dumps_line(rec, default=str))  # any generated character: srpo.jsonl
        os.replace(tmp, path)
    except BaseException:  # a full disk or a kill mid-write leaves no temporary file
        tmp.unlink(missing_ok=True)
        raise
    return path


def step_file(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / EPISODES_DIR / f"step-{step:06d}.jsonl.gz"


def drop_steps_after(run_dir: str | Path, step: int) -> int:
    """Remove the files of steps > `step` (a resumed run redoes them). Returns how many."""
    n = 0
    for path, s in step_files(run_dir):
        if s > step:
            path.unlink()
            n += 1
    return n


def step_files(run_dir: str | Path) -> list[tuple[Path, int]]:
    """(file, step) of RUN/episodes, by step."""
    d = Path(run_dir) / EPISODES_DIR
    if not d.is_dir():
        return []
    found = [(p, int(m.group(1))) for p in d.iterdir() if (m := _STEP_FILE.match(p.name))]
    return sorted(found, key=lambda x: x[1])


def read_records(path: str | Path, *, strict: bool = False) -> list[dict[str, Any]]:
    """The lines of one episodes file; a damaged file raises ValueError naming it (and the line).
    Each line must be an object with a "transitions" list; strict: also every field the report
    indexes (task_id, reward, each transition's event and members' agent and text)."""
    path = Path(path)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            text = f.read()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:  # zlib.error: damage mid-stream
        raise ValueError(f"{path} is not a readable gzip JSONL file ({e})") from None
    out = []
    lines, tail = split_lines(text)  # "\n" only: str.splitlines() also breaks at U+2028 etc.
    if tail:  # files are written whole and renamed: text after the last newline is damage
        raise ValueError(f"{path}: its last line {len(lines) + 1} has no newline (the file is damaged)")
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}: line {i + 1} is not valid JSON ({e})") from None
        problem = _episode_problem(rec) if strict else (
            None if isinstance(rec, dict) and isinstance(rec.get("transitions"), list)
            else "no 'transitions' list")
        if problem is not None:
            raise ValueError(f"{path}: line {i + 1} is not an episode record ({problem})")
        out.append(rec)
    return out


def _episode_problem(rec: Any) -> str | None:
    """What an episode line lacks of the shape `episode_records` writes (what its readers, the
    report among them, index), or None."""
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not an object"
    if not isinstance(rec.get("task_id"), str):
        return "no 'task_id'"
    if "reward" not in rec or not (rec["reward"] is None or isinstance(rec["reward"], (int, float))):
        return "no 'reward' number"
    transitions = rec.get("transitions")
    if not isinstance(transitions, list) or not all(
        isinstance(t, dict) and isinstance(t.get("event"), str) and isinstance(t.get("members"), list)
        and all(isinstance(m, dict) and isinstance(m.get("agent"), str) and isinstance(m.get("text"), str)
                for m in t["members"])
        for t in transitions
    ):
        return "no 'transitions' list, each with its 'event' and members with an 'agent' and a 'text'"
    return None
