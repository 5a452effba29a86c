"""reward_funcs as a task pack's reward: (task, final answer text) -> {component: value}.

A reward function scores the workflow's final output (the text the workflow scores with
`ctx.score`: single's answer, parallel's aggregator, debate's last round...), in one of two forms:

    def reward(completion: str, task: dict) -> float            # srpo's: one episode
    def reward(prompts, completions, **columns) -> list[float]   # TRL's batched form

`task` is the dataset row as given (the prompt, the answer and every other key); for tasks of a
config's task pack it is {"task_id", "prompt", "answer", **task.metadata}. TRL's form is
recognised by a parameter named `completions`; it is called with one-element lists
(prompts=[prompt], completions=[text], and each column but "prompt" as a one-element list;
only the columns it names unless it takes **kwargs) and must return a list of one number.

Several functions give one component each (named by the mapping key, else the function's
`__name__`; one lambda: "reward"); the episode's reward is their weighted sum. A function that
raises, or returns anything but a finite number, is an error naming it; the rollout reports it
as srpo's RewardFailure (task, agent, workflow), never as a 0 reward.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from srpo.types import Task

RowOf = Callable[[Task], dict[str, Any]]


class RewardFunctionError(RuntimeError):
    """A reward function raised or returned something that is not a finite number."""


class RewardFunction:
    """One reward function, its component name and weight, called in its own form."""

    def __init__(self, fn: Callable[..., Any], name: str, weight: float, where: str):
        self.fn, self.name, self.weight, self.where = fn, name, weight, where
        self.batched, self.columns = _form(fn, where)  # columns: names it takes; None = all

    def __call__(self, completion: str, task: Task, row: dict[str, Any]) -> float:
        try:
            if self.batched:
                columns = {k: [v] for k, v in row.items() if k != "prompt"
                           and (self.columns is None or k in self.columns)}
                value = self.fn(prompts=[task.prompt], completions=[completion], **columns)
                value = _only_item(value, self.where)
            else:
                value = self.fn(completion, row)
        except RewardFunctionError:
            raise
        except Exception as e:
            raise RewardFunctionError(f"{self.where} raised {type(e).__name__}: {e}") from e
        weighted = self.weight * _finite_number(value, self.where)
        if not math.isfinite(weighted):
            raise RewardFunctionError(f"{self.where}: its value {value!r} times its weight {self.weight!r} "
                                      f"is not a finite number; lower args.reward_weights")
        return weighted


class RewardFunctions:
    """The reward of a run: a callable (task, final text) -> {component: weighted value}.

    success_component: the component held-out accuracy counts (> 0 = solved): the first one.
    """

    def __init__(self, functions: list[RewardFunction], row_of: RowOf):
        self.functions = functions
        self.row_of = row_of
        self.components = tuple(f.name for f in functions)
        self.success_component = self.components[0]

    def __call__(self, task: Task, completion: str) -> dict[str, float]:
        row = self.row_of(task)
        return {f.name: f(completion, task, dict(row)) for f in self.functions}


def reward_functions(reward_funcs: Any, weights: Sequence[float] | None, row_of: RowOf) -> RewardFunctions:
    """The reward_funcs argument (one callable, a list, or {component name: callable}) with
    args.reward_weights (None: 1 each); row_of: what a function sees of a task."""
    if callable(reward_funcs) and not isinstance(reward_funcs, Mapping):
        given: list[tuple[str | None, Any, str]] = [(None, reward_funcs, "reward_funcs")]
    elif isinstance(reward_funcs, Mapping):
        given = [(k, f, f"reward_funcs[{k!r}]") for k, f in reward_funcs.items()]
    elif isinstance(reward_funcs, Sequence) and not isinstance(reward_funcs, str):
        given = [(None, f, f"reward_funcs[{i}]") for i, f in enumerate(reward_funcs)]
    else:
        raise TypeError(f"reward_funcs must be a callable, a list of callables or a mapping of "
                        f"component names to callables, got {type(reward_funcs).__name__}")
    if not given:
        raise ValueError("reward_funcs is empty: give at least one reward function")
    weights = _checked_weights(weights, len(given))
    names = _component_names(given)
    functions = []
    for (_, fn, where), name, weight in zip(given, names, weights):
        if not callable(fn):
            raise TypeError(f"{where} must be callable, got {type(fn).__name__}")
        functions.append(RewardFunction(fn, name, weight, f"{where} ({name!r})"))
    return RewardFunctions(functions, row_of)


def _checked_weights(weights: Sequence[float] | None, count: int) -> list[float]:
    """args.reward_weights: one finite number per reward function (default 1.0 each)."""
    if weights is None:
        return [1.0] * count
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(f"args.reward_weights must be a list of numbers, got {type(weights).__name__}")
    if len(weights) != count:
        raise ValueError(f"args.reward_weights has {len(weights)} weight(s) for {count} reward "
                         f"function(s) (reward_funcs): give one per function")
    for i, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
            raise ValueError(f"args.reward_weights[{i}] must be a finite number, got {w!r}")
    return [float(w) for w in weights]


def _component_names(given: list[tuple[str | None, Any, str]]) -> list[str]:
    """A distinct component name per function: the mapping key, else its __name__ when that is
    an identifier (a lambda's is not), else "reward" (one function) / "reward_<i>"."""
    names = []
    for i, (key, fn, where) in enumerate(given):
        if key is not None:
            if not isinstance(key, str) or not key.isidentifier():
                raise ValueError(f"{where}: a component name must be an identifier, got {key!r}")
            names.append(key)
            continue
        own = getattr(fn, "__name__", "")
        names.append(own if own.isidentifier() else "reward" if len(given) == 1 else f"reward_{i}")
    return [n if names.count(n) == 1 else f"{n}_{i}" for i, n in enumerate(names)]


def _form(fn: Callable[..., Any], where: str) -> tuple[bool, set[str] | None]:
    """(batched, columns it takes by name or None for **kwargs), from the signature; a
    signature neither form fits is refused now, not at the first episode."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: srpo's form, unchecked
        return False, None
    params = sig.parameters
    if "completions" in params:
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        return True, None if takes_all else set(params) - {"prompts", "completions"}
    try:
        sig.bind("completion", {})
    except TypeError:
        raise TypeError(f"{where} must take (completion: str, task: dict) -> float, or TRL's "
                        f"(prompts, completions, **columns) -> list[float]; its signature is "
                        f"{getattr(fn, '__name__', type(fn).__name__)}{sig}") from None
    return False, None


def _only_item(value: Any, where: str) -> Any:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence) or len(value) != 1:
        raise RewardFunctionError(f"{where} takes TRL's batched form (a `completions` parameter), "
                                  f"so it must return a list of one number per completion (here "
                                  f"one), got {value!r}")
    return value[0]


def _finite_number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not (isinstance(value, (int, float)) or _is_scalar(value)):
        raise RewardFunctionError(f"{where} returned {value!r} ({type(value).__name__}), not a "
                                  f"number: a reward function returns a float")
    number = float(value)
    if not math.isfinite(number):
        raise RewardFunctionError(f"{where} returned {number!r}: a reward must be a finite number")
    return number


def _is_scalar(value: Any) -> bool:
    """A numpy or torch scalar (0-d, holding a number that is not a bool): taken as a float."""
    if getattr(value, "ndim", None) != 0 or not hasattr(value, "item"):
        return False
    item = value.item()
    return isinstance(item, (int, float)) and not isinstance(item, bool)
