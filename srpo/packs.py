"""Task packs: the one interface through which a task family plugs into the core.

The core (records, batch, objective, workflow protocol, runner, trainer) knows no task. A task
pack says everything task-specific, in one `TaskPack` value:

    pack = get_pack("math")              # a built-in pack (entry point group "srpo.task_packs")
    pack = get_pack("my_pack.py:PACK")   # a user's pack in a file (or "package.module:PACK")
    tasks = pack.load_tasks(cfg.task, "train", 8)    # the first 8 tasks of the train split
    reward_fn = pack.make_reward(cfg.task)           # (task, answer text) -> reward result

A config selects a pack with `task.name`; the pack's own settings live under `task` too
(`task.search.*`, `task.testbed.*`, math's `task.source`...), validated by the pack's
`settings` schema when the config is loaded.

Packs are found by srpo.plugins' one lookup (registered, entry point group "srpo.task_packs",
srpo's own `BUILTIN_PACKS`, a reference), so the core imports none of them: installing a
package that declares such an entry point adds a task family without touching srpo. A pack given as
"file.py:NAME" is executed when the config is loaded, as a workflow file is: a config that names code runs it.
Only a `TaskPack` value is accepted (anything else is refused before it is used).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from srpo.plugins import Registry
from srpo.types import Task
from srpo.workflows.registry import register_workflow

ENTRY_POINT_GROUP = "srpo.task_packs"
# srpo's own packs, by the references pyproject.toml's entry points give them: used when no
# entry point of that name is installed (tests/unit/test_task_packs.py keeps the two equal).
BUILTIN_PACKS = {
    "math": "srpo.tasks.math.pack:PACK",
    "search": "srpo.tasks.search.pack:PACK",
    "testbed": "srpo.tasks.testbed.pack:PACK",
}

RewardFn = Callable[[Task, str], Any]  # (task, final answer text) -> RewardResult | mapping | float


@dataclass(frozen=True)
class TaskPack:
    """What a task family provides (module doc).

    name: the `task.name` that selects it.
    description: one line, shown by `srpo packs`.
    load_tasks: (task config, split "train" | "heldout", size) -> the first `size` tasks of the
        split; raise ValueError naming the problem when the source holds fewer.
    make_reward: (task config) -> reward function (task, answer text) -> RewardResult (an object
        with weighted_components()), a mapping of components, or a number.
    success_component: the reward component whose value > 0 means "solved" in evaluation
        (`eval.success_component` overrides it).
    reward_components: the names of the components its reward gives, so that a config's
        `eval.success_component` is checked when it loads, not after a model has rolled out
        (empty: not declared, not checked).
    settings: the pack's own config fields under `task`: a subclass of
        srpo.config.TaskSettings (a pydantic model; a nested section is a field of model type),
        or None for none. srpo.config validates them and fills in their defaults.
    agents: default agent settings by role for the workflows this pack is used with
        ({role: {"system_prompt": ..., "template": ..., "sampling": {...}}}); they overlay a
        workflow's own `default_agents`, and the config's `agents` overlay both, field by field.
    workflows: workflow factories this pack adds to the registry (by their `name`).
    answer_key: (text) -> the final answer a text states, normalized, or None; majority votes
        compare these (default: the whole text).
    make_environment: (task config) -> an environment object (e.g. a retriever) given to a
        workflow that defines `with_environment(env)`; None: the pack has none.
    check: (task config) -> None, raising ValueError on a problem found before any model is
        loaded (e.g. held-out questions that also occur in the train split).
    """

    name: str
    description: str
    load_tasks: Callable[[Any, str, int], list[Task]]
    make_reward: Callable[[Any], RewardFn]
    success_component: str = "reward"
    reward_components: Sequence[str] = ()
    settings: type | None = None
    agents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    workflows: Sequence[Any] = ()
    answer_key: Callable[[str], str | None] | None = None
    make_environment: Callable[[Any], Any] | None = None
    check: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a task pack needs a non-empty name, got {self.name!r}")
        for attr in ("load_tasks", "make_reward"):
            if not callable(getattr(self, attr)):
                raise ValueError(f"task pack {self.name!r}: {attr} must be callable")


def _accept(obj: Any, name: str, where: str) -> TaskPack:
    """A TaskPack value, checked; one given by reference is registered under the reference too."""
    if not isinstance(obj, TaskPack):
        what = f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"
        raise ValueError(f"{where} is {what}, not a srpo.packs.TaskPack value")
    if ":" in name and obj.name != name:  # the config names it by reference: that is its name here
        obj = dataclasses.replace(obj, name=name)
    return obj


def _register_workflows(pack: TaskPack) -> None:
    for factory in pack.workflows:
        register_workflow(factory)


PACKS: Registry[TaskPack] = Registry(
    "task pack", plural="packs", group=ENTRY_POINT_GROUP, accept=_accept, builtins=BUILTIN_PACKS,
    references=True, key="task.name", on_register=_register_workflows)


def register_pack(pack: TaskPack) -> TaskPack:
    """Make `pack` selectable by its name (and its workflows buildable by theirs)."""
    if not isinstance(pack, TaskPack):
        raise ValueError(f"register_pack takes a TaskPack, got {type(pack).__name__}")
    return PACKS.register(pack.name, pack)


def known_pack_names() -> list[str]:
    """The registered packs, the installed (entry point) ones and srpo's own, sorted."""
    return PACKS.names()


def load_all_packs() -> list[TaskPack]:
    """Every installed pack, registered (so their workflows are listed and buildable)."""
    return [get_pack(name) for name in known_pack_names()]


def get_pack(name: str) -> TaskPack:
    """The pack `name`: registered, installed (entry point), srpo's own (BUILTIN_PACKS), or
    "file.py:NAME" / "module:NAME" (srpo.plugins)."""
    return PACKS.get(name)


def agent_defaults(workflow: Any, pack: TaskPack | None) -> dict[str, dict[str, Any]]:
    """Default agent fields by role: the workflow's own `default_agents`, overlaid by the pack's
    `agents`, for the roles the workflow declares."""
    roles = list(getattr(workflow, "agents", ()))
    own: Mapping[str, Mapping[str, Any]] = getattr(workflow, "default_agents", None) or {}
    domain = pack.agents if pack is not None else {}
    return {role: {**own.get(role, {}), **domain.get(role, {})} for role in dict.fromkeys(roles)
            if role in own or role in domain}
