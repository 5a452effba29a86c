"""Procedural math tasks from reasoning-gym, with disjoint train / held-out splits.

reasoning-gym generates item `i` of a dataset from `Random(seed + i)`, so two datasets whose
seeds differ by a small k overlap item-for-item (item i+k of one is item i of the other). The
held-out split therefore draws from a seed far away from the train seed (`split_seed`), and
`math_splits` additionally removes from the train pool every question whose normalized text is
in the held-out set: small question spaces (1-digit arithmetic) repeat questions anyway, and a
held-out set the model has trained on measures memory, not skill.

reasoning_gym is imported lazily so that importing srpo.tasks does not need the math extra.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from srpo.types import Task

SPLITS = ("train", "heldout")

# The held-out generation seed is this far from the train seed: far beyond any number of items
# drawn, so the Random(seed + i) index ranges of the two splits never meet. Kept below 2**32
# (modulo) because some generators seed numpy, which rejects seeds >= 2**32.
_HELDOUT_SEED_OFFSET = 2**31
_SEED_MODULUS = 2**32

# Every this many draws a split checks the share of them that gave a new question: when twice
# that share over the draws left (size x max_draw_factor in all) cannot reach the size asked,
# it stops at once (reasoning_gym_tasks), not after hours of drawing
RATE_WINDOW = 10_000

# Keys owned by this module; a user config must not set them.
_RESERVED_CONFIG_KEYS = ("seed", "size")


def _rg():  # -> module reasoning_gym
    try:
        import reasoning_gym
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reasoning-gym is required for procedural math tasks: pip install 'srpo[math]'"
        ) from e
    return reasoning_gym


def available_reasoning_gym_names() -> list[str]:
    """Sorted names of every dataset registered in reasoning-gym."""
    _rg()
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def _check_name(name: str) -> None:
    names = available_reasoning_gym_names()
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=3)
    examples = close or [n for n in ("basic_arithmetic", "chain_sum", "gsm_symbolic") if n in names]
    raise ValueError(
        f"unknown reasoning-gym task {name!r}; did you mean one of {examples}? "
        f"({len(names)} are registered, e.g. {names[:5]}; see "
        "srpo.tasks.math.available_reasoning_gym_names())"
    )


def normalize_question(text: str) -> str:
    """The key under which two questions count as the same problem.

    NFKC + casefold + every whitespace removed: "Calculate 5 - -3." and "calculate 5--3."
    (reasoning-gym's `whitespace="random"` style) are one problem. Removing all whitespace can
    only merge more questions, which errs on the safe side for held-out disjointness.
    """
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)).casefold()


def split_seed(seed: int, split: str) -> int:
    """The reasoning-gym generation seed of `split` for the user-facing `seed`."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if split == "train":
        return seed
    return (seed + _HELDOUT_SEED_OFFSET) % _SEED_MODULUS


def _config_tag(config: Mapping[str, Any]) -> str:
    """A short stable digest of a non-empty config, so task ids of two difficulty configs of
    the same dataset and seed never collide (task_id is the default advantage group key)."""
    if not config:
        return ""
    blob = json.dumps(config, sort_keys=True, default=repr)
    return ":" + hashlib.sha1(blob.encode()).hexdigest()[:8]


def _composite_specs(config: Mapping[str, Any]) -> dict[str, Any]:
    """reasoning-gym's `composite` mixes datasets; its config names them as DatasetSpec objects,
    written in a YAML config as {name, weight, config} mappings (weight 1, config {} when left
    out). A mix of kinds is what a router learns to route (docs/workflows.md, "routed")."""
    from reasoning_gym.composite import DatasetSpec

    specs = config.get("datasets")
    if not isinstance(specs, list) or not specs:
        raise ValueError("reasoning-gym task 'composite' needs difficulty.datasets: a list of "
                         "{name, weight, config} (e.g. [{name: basic_arithmetic}, {name: chain_sum}])")
    out = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, Mapping) or "name" not in spec or set(spec) - {"name", "weight", "config"}:
            raise ValueError(f"composite datasets[{i}] must be a mapping with name and optional "
                             f"weight / config, got {spec!r}")
        _check_name(str(spec["name"]))
        out.append(DatasetSpec(name=str(spec["name"]), weight=float(spec.get("weight", 1.0)),
                               config=dict(spec.get("config") or {})))
    return {**config, "datasets": out}


def _make_dataset(name: str, *, size: int, seed: int, config: Mapping[str, Any]):
    for key in _RESERVED_CONFIG_KEYS:
        if key in config:
            raise ValueError(f"config must not set {key!r}; pass it as an argument instead")
    if name == "composite":
        config = _composite_specs(config)
    try:
        return _rg().create_dataset(name, size=size, seed=seed, **config)
    except (TypeError, AssertionError) as e:
        # Unknown config keys raise TypeError, failed config.validate() AssertionError.
        raise ValueError(
            f"invalid config {dict(config)!r} for reasoning-gym task {name!r}: {e}"
        ) from e


def _entry_to_task(
    entry: Mapping[str, Any], *, name: str, split: str, seed: int, index: int,
    config: Mapping[str, Any],
) -> Task:
    return Task(
        task_id=f"rg/{name}{_config_tag(config)}/{split}/{seed}/{index}",
        prompt=str(entry["question"]),
        answer=str(entry["answer"]) if entry.get("answer") is not None else None,
        source=f"reasoning_gym/{name}",
        metadata={
            "rg_name": name,
            "rg_config": dict(config),
            "rg_seed": split_seed(seed, split),  # the generation seed, to rebuild the dataset
            "rg_entry": dict(entry),  # what the dataset's own score_answer expects
            "split": split,
            "seed": seed,
            "source_index": entry.get("metadata", {}).get("source_index"),
            # the problem's kind: the dataset that made it (a composite's member dataset)
            "kind": entry.get("metadata", {}).get("source_dataset", name),
        },
    )


def reasoning_gym_tasks(
    name: str,
    *,
    size: int,
    seed: int,
    split: str = "train",
    config: Mapping[str, Any] | None = None,
    unique: bool = True,
    exclude: Iterable[str] = (),
    max_draw_factor: int = 20,
) -> list[Task]:
    """`size` tasks of reasoning-gym dataset `name`, deterministic in (name, seed, split, config).

    split: "train" or "heldout"; picks the generation seed (`split_seed`). On its own this does
        not make two splits disjoint; `math_splits` does.
    config: the dataset's difficulty knobs, e.g. basic_arithmetic
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}.
    unique: skip a question whose normalized text was already taken (default), so a small
        question space does not silently fill a split with repeats.
    exclude: normalized questions (`normalize_question`) that must not appear.
    max_draw_factor: draw at most size * max_draw_factor items before giving up.

    Items are scanned in index order from datasets of growing virtual size, so the result is a
    pure function of the arguments. Raises ValueError for an unknown name, a bad config, or a
    question space too small to supply `size` acceptable items.
    """
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    if max_draw_factor < 1:
        raise ValueError(f"max_draw_factor must be >= 1, got {max_draw_factor}")
    _check_name(name)
    gen_seed = split_seed(seed, split)
    config = dict(config or {})
    excluded = set(exclude)
    if size == 0:
        return []

    max_draws = max(size * max_draw_factor, 1000)
    draws = min(2 * size, max_draws)
    while True:
        dataset = _make_dataset(name, size=draws, seed=gen_seed, config=config)
        tasks: list[Task] = []
        seen: set[str] = set()
        skipped_excluded = skipped_repeat = 0
        exhausted, window_start = False, 0  # usable questions before the current window
        for drawn, entry in enumerate(dataset, 1):
            if drawn % RATE_WINDOW == 0:
                # the share of draws that give a new question only falls as questions are seen:
                # at twice the last window's share, the draws left cannot reach `size`
                found, window_start = len(tasks) - window_start, len(tasks)
                if 2 * found * (max_draws - drawn) < (size - len(tasks)) * RATE_WINDOW:
                    exhausted, draws = True, drawn
                    break
            key = normalize_question(str(entry["question"]))
            if key in excluded:
                skipped_excluded += 1
                continue
            if unique and key in seen:
                skipped_repeat += 1
                continue
            seen.add(key)
            tasks.append(
                _entry_to_task(entry, name=name, split=split, seed=seed, index=len(tasks),
                               config=config)
            )
            if len(tasks) == size:
                return tasks
        if draws >= max_draws or exhausted:
            raise ValueError(
                f"reasoning-gym task {name!r} (split={split!r}, seed={seed}, config={config}): "
                f"only {len(tasks)} of the {size} requested questions are usable after drawing "
                f"{draws} items ({skipped_excluded} excluded as held-out, {skipped_repeat} "
                f"repeats). The question space is too small for this size: request fewer "
                f"tasks or widen the config (more terms / digits)."
            )
        draws = min(2 * draws, max_draws)


def math_splits(
    name: str,
    *,
    train_size: int,
    heldout_size: int,
    seed: int,
    config: Mapping[str, Any] | None = None,
    max_draw_factor: int = 20,
) -> tuple[list[Task], list[Task]]:
    """(train, heldout) task lists with no normalized question in common.

    The held-out set is generated first, from its own seed, with distinct questions; the train
    pool then skips every held-out question (and its own repeats), drawing extra items to reach
    train_size. Raises ValueError when the question space cannot supply both sizes.
    """
    heldout = reasoning_gym_tasks(
        name, size=heldout_size, seed=seed, split="heldout", config=config,
        max_draw_factor=max_draw_factor,
    )
    heldout_keys = {normalize_question(t.prompt) for t in heldout}
    train = reasoning_gym_tasks(
        name, size=train_size, seed=seed, split="train", config=config,
        exclude=heldout_keys, max_draw_factor=max_draw_factor,
    )
    return train, heldout


@functools.lru_cache(maxsize=64)
def _scoring_dataset(name: str, config_json: str):
    # score_answer only reads the entry, so a size-1 dataset of the same config is enough.
    return _make_dataset(name, size=1, seed=0, config=json.loads(config_json))


def reasoning_gym_score(task: Task, answer: str | None) -> float:
    """The dataset's own `score_answer(answer, entry)` for a task made here (in [0, 1]).

    Useful for non-math reasoning-gym tasks whose answers are not numbers or LaTeX.
    """
    meta = task.metadata
    if "rg_entry" not in meta or "rg_name" not in meta:
        raise ValueError(f"task {task.task_id!r} was not made by reasoning_gym_tasks")
    dataset = _scoring_dataset(meta["rg_name"], json.dumps(meta.get("rg_config", {}),
                                                            sort_keys=True))
    return float(dataset.score_answer(answer, dict(meta["rg_entry"])))
