"""train_dataset / eval_dataset as a task pack held in memory.

A dataset is a list of dicts or a `datasets.Dataset` (anything that iterates rows as mappings):

    {"prompt": "What is 2 + 3?", "answer": "5", "level": 1}

  * the prompt: the first of PROMPT_KEYS the dataset's first row has ("prompt", TRL's, then
    "question", "input"); every row needs it, as text (a TRL conversational prompt, a list of
    chat messages, is refused: a workflow's roles build the chat themselves);
  * the answer: the first of ANSWER_KEYS present ("answer", "solution", "ground_truth"), text
    or a number (made text); optional (Task.answer None);
  * "task_id": optional, the task's id (unique); default "train-<i>" / "eval-<i>";
  * every key of the row, these included, reaches the reward function (its `task` dict) and the
    workflow (task.metadata).

The tasks become a TaskPack registered under a name derived from their content
("python-tasks-<hash>"): the config's task.name, so the run's config.yaml names where its tasks
came from, and a run of the same tasks resumes. The train split is train_dataset, the held-out
split eval_dataset (none: no held-out evaluation).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from srpo.packs import TaskPack
from srpo.types import Task

PROMPT_KEYS = ("prompt", "question", "input")
ANSWER_KEYS = ("answer", "solution", "ground_truth")


def dataset_tasks(dataset: Any, argument: str, id_prefix: str) -> list[Task]:
    """The rows of a dataset argument as Tasks (module doc); errors name the argument and row."""
    rows = _rows(dataset, argument)
    if not rows:
        raise ValueError(f"{argument} is empty: give at least one row")
    prompt_key = next((k for k in PROMPT_KEYS if k in rows[0]), None)
    if prompt_key is None:
        raise ValueError(f"{argument}[0] has no prompt key: a row needs one of {list(PROMPT_KEYS)} "
                         f"(the task's text); its keys are {sorted(map(str, rows[0]))}")
    answer_key = next((k for k in ANSWER_KEYS if k in rows[0]), None)
    tasks, ids = [], set()
    for i, row in enumerate(rows):
        where = f"{argument}[{i}]"
        task = _task(row, i, where, prompt_key, answer_key, id_prefix)
        if task.task_id in ids:
            raise ValueError(f"{where}: task_id {task.task_id!r} repeats an earlier row's; task ids "
                             f"must be unique")
        ids.add(task.task_id)
        tasks.append(task)
    return tasks


def _rows(dataset: Any, argument: str) -> list[Mapping[str, Any]]:
    if isinstance(dataset, Mapping):  # a DatasetDict is a mapping of splits
        raise TypeError(f"{argument} is a mapping (keys {sorted(map(str, dataset))[:5]}), not a "
                        f"list of rows; for a datasets.DatasetDict pass one split, e.g. ds['train']")
    if isinstance(dataset, (str, bytes)) or not isinstance(dataset, Iterable):
        raise TypeError(f"{argument} must be a list of dicts or a datasets.Dataset, got "
                        f"{type(dataset).__name__}")
    rows = list(dataset)
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(f"{argument}[{i}] must be a dict (a row with the prompt and the answer), "
                            f"got {type(row).__name__}")
    return rows


def _task(row: Mapping[str, Any], i: int, where: str, prompt_key: str, answer_key: str | None,
          id_prefix: str) -> Task:
    if prompt_key not in row:
        raise ValueError(f"{where} has no {prompt_key!r} key (the prompt key of this dataset, from "
                         f"its first row); its keys are {sorted(map(str, row))}")
    prompt = row[prompt_key]
    if isinstance(prompt, Sequence) and not isinstance(prompt, str):
        raise TypeError(f"{where}[{prompt_key!r}] is a list (chat messages?): srpo takes the task "
                        f"as text, and each role's template builds its chat; give the user's text")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"{where}[{prompt_key!r}] must be non-empty text, got {prompt!r}")
    answer = row.get(answer_key) if answer_key else None
    if answer is not None:
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise TypeError(f"{where}[{answer_key!r}] must be text or a number, got "
                            f"{type(answer).__name__}")
        answer = str(answer)
    task_id = row.get("task_id", f"{id_prefix}-{i}")
    if isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or task_id == "":
        raise TypeError(f"{where}['task_id'] must be text or an int, got {task_id!r}")
    return Task(task_id=str(task_id), prompt=prompt, answer=answer, source=where.split("[")[0],
                metadata=dict(row))


def dataset_pack(train: list[Task], heldout: list[Task], reward: Any,
                 answer_key: Callable[[str], str | None] | None = None) -> TaskPack:
    """The tasks and reward as a TaskPack (not yet registered: register_pack makes it the one
    its name selects)."""

    def load_tasks(cfg: Any, split: str, size: int) -> list[Task]:
        pool = train if split == "train" else heldout
        if size > len(pool):
            argument = "train_dataset" if split == "train" else "eval_dataset"
            raise ValueError(f"{argument} has {len(pool)} rows, {size} asked for")
        return pool[:size]

    return TaskPack(
        name=f"python-tasks-{_digest(train, heldout)}",
        description="tasks given in Python (SRPOTrainer's train_dataset / eval_dataset)",
        load_tasks=load_tasks,
        make_reward=lambda cfg: reward,
        success_component=reward.success_component,
        reward_components=reward.components,
        answer_key=answer_key,
    )


def with_reward(pack: TaskPack, reward: Any) -> TaskPack:
    """A config's task pack with its reward replaced by reward_funcs (its tasks, settings and
    prompts kept), under its own name: "<pack>+python-reward"."""
    return dataclasses.replace(
        pack, name=f"{pack.name}+python-reward", make_reward=lambda cfg: reward,
        success_component=reward.success_component, reward_components=reward.components,
        workflows=())  # the pack's workflows are registered already, under the pack's name


def pack_task_row(task: Task) -> dict[str, Any]:
    """What a reward function sees of a task of a config's pack (no dataset row to give)."""
    return {"task_id": task.task_id, "prompt": task.prompt, "answer": task.answer, **task.metadata}


def dataset_row(task: Task) -> dict[str, Any]:
    """What a reward function sees of a dataset task: its row as given."""
    return dict(task.metadata)


def _digest(train: list[Task], heldout: list[Task]) -> str:
    """12 hex digits of the tasks' ids, prompts and answers (the same tasks, the same name)."""
    data = [[(t.task_id, t.prompt, t.answer) for t in split] for split in (train, heldout)]
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:12]
