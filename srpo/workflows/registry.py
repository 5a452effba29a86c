"""Workflow registry: name -> factory, so configs and the CLI can name workflows.

    build_workflow("parallel", {"k": 4})
    register_workflow(MyWorkflow)            # a user's class (name, description, **params)
    build_workflow("my_flows.py:MyWorkflow") # or by import path (imported once, kept by that name)
    list_workflows()                         # [(name, description), ...]

A factory is any callable taking the workflow's params as keyword arguments (the built-ins are
dataclasses). Names are looked up as every plug-in is (srpo.plugins: registered, entry point
group "srpo.workflows", a reference). Unknown names and params raise ValueError naming them,
the closest known name and the known ones.

Security: a config that names a workflow by import path runs code. Importing the module (or
executing the file) runs its top-level code, exactly as Hydra's `_target_` does; then only a
class that implements the workflow protocol (class attributes `name` and `description`, an
`agents` attribute or property, a `run` method) is accepted, checked before anything is
called: `os:system`, a function or any other object is refused with an error.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from srpo.plugins import Registry
from srpo.workflows.base import Workflow
from srpo.workflows.debate import Debate
from srpo.workflows.mixed import Mixed
from srpo.workflows.parallel import ParallelAggregate
from srpo.workflows.pipeline import Pipeline
from srpo.workflows.planner import PlannerWorkers
from srpo.workflows.routed import Routed
from srpo.workflows.single import SingleAgent

Factory = Callable[..., Workflow]

# Workflows of installed task packs (srpo.tasks.search's, the testbed's cover, a third party's)
# are found through entry points of this group and imported on first use, so this module
# imports no task pack.
ENTRY_POINT_GROUP = "srpo.workflows"


class Registered(NamedTuple):
    factory: Factory
    description: str


def _accept(obj: Any, name: str, where: str) -> Registered:
    """A workflow class, checked by looking at it only (nothing is called): module doc."""
    problem = _not_a_workflow_class(obj)
    if problem is None and ":" not in name and obj.name != name:
        problem = f"its class is named {obj.name!r}"
    if problem:
        subject = f"{name.rpartition(':')[2]!r} " if ":" in name else ""
        raise ValueError(
            f"{where}: {subject}{problem}; a config may only name a class that implements the workflow "
            f"protocol (class attributes name and description, agents, a run(task, ctx) method), and it "
            f"is not called otherwise (docs/workflows.md)")
    return Registered(obj, obj.description)


WORKFLOWS: Registry[Registered] = Registry("workflow", plural="workflows", group=ENTRY_POINT_GROUP,
                                          accept=_accept, references=True)


def register_workflow(factory: Factory, *, name: str | None = None,
                      description: str | None = None) -> Factory:
    """Register a workflow factory (usable as a class decorator); returns it unchanged.

    name/description default to the factory's `name` / `description` attributes.
    """
    name = name or getattr(factory, "name", None)
    description = description or getattr(factory, "description", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"workflow factory {factory!r} needs a name")
    if not isinstance(description, str) or not description:
        raise ValueError(f"workflow {name!r} needs a one-line description")
    WORKFLOWS.register(name, Registered(factory, description))
    return factory


def registered_factory(name: str) -> Factory | None:
    """The factory registered under `name` in this process, or None."""
    entry = WORKFLOWS.registered().get(name)
    return entry.factory if entry is not None else None


def list_workflows() -> list[tuple[str, str]]:
    """(name, one-line description) of every registered workflow, the built-ins first, then
    the installed task packs' (loaded on this call)."""
    for name in WORKFLOWS.installed():
        if name not in WORKFLOWS:
            WORKFLOWS.get(name)
    return [(n, entry.description) for n, entry in WORKFLOWS.registered().items()]


def _params_of(factory: Factory) -> list[str] | None:
    """The keyword parameters a factory takes; None when it takes **kwargs (anything)."""
    if dataclasses.is_dataclass(factory):
        return [f.name for f in dataclasses.fields(factory) if f.init]
    params = inspect.signature(factory).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.name != "self"]


def _not_a_workflow_class(obj: Any) -> str | None:
    """Why `obj` is not a workflow class (None if it is one); looks at the class only, calls nothing."""
    if not inspect.isclass(obj):
        return f"is a {type(obj).__name__}, not a class"
    for attr in ("name", "description"):
        value = inspect.getattr_static(obj, attr, None)
        if not isinstance(value, str) or not value:
            return f"has no class attribute {attr!r} (a non-empty string)"
    if inspect.getattr_static(obj, "agents", None) is None:
        return "has no 'agents' attribute or property"
    if not inspect.isfunction(inspect.getattr_static(obj, "run", None)):
        return "has no run(task, ctx) method"
    return None


def build_workflow(name: str, params: Mapping[str, Any] | None = None) -> Workflow:
    """The workflow `name` built with `params`; ValueError for unknown names or params.

    name: a registered name ("parallel"), or a user's factory given by import path,
    "my_package.my_module:MyWorkflow" or "path/to/my_workflow.py:MyWorkflow", so a workflow
    written in one file runs from a config or the CLI without registering it anywhere.
    """
    factory = WORKFLOWS.get(name).factory
    params = dict(params or {})
    known = _params_of(factory)
    unknown = sorted(set(params) - set(known)) if known is not None else []
    if unknown:
        raise ValueError(
            f"workflow {name!r} has no parameter(s) {unknown}; its parameters: {known}"
        )
    return factory(**params)


def _mixed(workflows: list[Mapping[str, Any]] | None = None) -> Mixed:
    """workflows: [{"name": str, "weight": float, "params": {...}, "label": str}, ...] (default:
    a mix of single, parallel and routed with equal weights). label: the name episodes of that
    component record (default: the workflow's name); one workflow may appear twice with
    different params under two labels, e.g. debates of 2 and of 4."""
    if workflows is None:
        workflows = [{"name": "single"}, {"name": "parallel"}, {"name": "routed"}]
    components = []
    for i, item in enumerate(workflows):
        if not isinstance(item, Mapping) or "name" not in item:
            raise ValueError(
                f"mixed.workflows[{i}] must be a mapping with 'name' (and optional 'weight', "
                f"'params'), got {item!r}"
            )
        extra = sorted(set(item) - {"name", "weight", "params", "label"})
        if extra:
            raise ValueError(
                f"mixed.workflows[{i}]: unknown key(s) {extra}; use name/weight/params/label"
            )
        if item["name"] == "mixed":
            raise ValueError("mixed.workflows cannot contain 'mixed' itself")
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ValueError(f"mixed.workflows[{i}].weight must be a number, got {weight!r}")
        label = item.get("label", item["name"])
        if not isinstance(label, str) or not label:
            raise ValueError(f"mixed.workflows[{i}].label must be a non-empty string, got {label!r}")
        components.append((float(weight), build_workflow(item["name"], item.get("params")), label))
    return Mixed(components)


_mixed.name = "mixed"  # type: ignore[attr-defined]
_mixed.description = Mixed.description  # type: ignore[attr-defined]

# The generic built-ins. A task pack's own workflows (search, cover) come from entry points
# (above), or are registered when a pack given by file is loaded (srpo.packs.register_pack).
for _factory in (SingleAgent, Pipeline, ParallelAggregate, Debate, PlannerWorkers, _mixed, Routed):
    register_workflow(_factory)
