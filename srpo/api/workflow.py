"""The workflow argument: a registered name, a Workflow class, or an instance.

    workflow="debate", workflow_params={"rounds": 2}      # `srpo workflows` lists the names
    workflow=MyWorkflow, workflow_params={"k": 2}         # a class: registered under its `name`
    workflow=MyWorkflow(k=2)                              # an instance: run as it is

The config names a workflow by its registry name (workflow.name), so a class or an instance is
registered first: a class under its own `name` (refused when that name belongs to another
factory, e.g. a built-in), an instance under "<its name>@python" (a factory that returns that very
object). Only what implements the workflow protocol is accepted (`name` and `description`
strings, `agents`, a `run(task, ctx)` method), and what is missing is said before anything runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from srpo.workflows.base import Workflow
from srpo.workflows.registry import build_workflow, register_workflow

INSTANCE_SUFFIX = "@python"


@dataclass(frozen=True)
class WorkflowChoice:
    """What the config says (workflow.name, workflow.params) and how to make the name known."""

    name: str
    params: dict[str, Any]
    factory: Any = None  # registered under `name` by register(); None: a name srpo knows

    def register(self) -> None:
        """Make `name` build this workflow (again: another trainer may have taken the name)."""
        if self.factory is not None:
            register_workflow(self.factory, name=self.name,
                              description=getattr(self.factory, "description", None) or self.name)

    def build(self) -> Workflow:
        self.register()
        try:
            return build_workflow(self.name, self.params)
        except (TypeError, ValueError) as e:  # unknown name, unknown or missing params
            where = "workflow_params" if self.params and "parameter" in str(e) else "workflow"
            raise type(e)(f"{where}: {e}") from e


def workflow_choice(workflow: Any, params: Mapping[str, Any] | None) -> WorkflowChoice:
    """The workflow argument as a WorkflowChoice (module doc)."""
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"workflow_params must be a mapping of the workflow's parameters, got "
                        f"{type(params).__name__}")
    params = dict(params or {})
    if isinstance(workflow, str):
        return WorkflowChoice(workflow, params)
    if inspect.isclass(workflow):
        missing = missing_protocol(workflow, static=True)
        if missing:
            raise TypeError(f"workflow: the class {workflow.__name__} is not a srpo workflow: "
                            f"{missing}; {PROTOCOL}")
        _check_name_is_free(workflow.name, workflow)
        return WorkflowChoice(workflow.name, params, factory=workflow)
    missing = missing_protocol(workflow, static=False)
    if missing:
        raise TypeError(f"workflow: {_describe(workflow)} is not a srpo workflow: {missing}; "
                        f"{PROTOCOL}")
    if params:
        raise ValueError("workflow_params: the workflow is given as an instance, which is run as "
                         "it is; pass its class to have it built with parameters")
    return WorkflowChoice(workflow.name + INSTANCE_SUFFIX, {}, factory=_Instance(workflow))


PROTOCOL = ("a workflow has string attributes name and description, agents (the roles it asks "
            "for) and a run(task, ctx) generator method (docs/workflows.md)")


def missing_protocol(obj: Any, *, static: bool) -> str | None:
    """What `obj` lacks of the workflow protocol, in words (None: nothing). static: look at a
    class without calling anything (a property `agents` counts as present)."""
    get = (lambda a: inspect.getattr_static(obj, a, None)) if static else (lambda a: getattr(obj, a, None))
    problems = []
    for attr in ("name", "description"):
        value = get(attr)
        if not isinstance(value, str) or not value:
            problems.append(f"no {attr!r} (a non-empty string)")
    agents = get("agents")
    if agents is None:
        problems.append("no 'agents'")
    elif not static and (isinstance(agents, str) or not all(isinstance(a, str) for a in agents)
                         or not agents):
        problems.append(f"'agents' is {agents!r}, not a non-empty sequence of role names")
    run = get("run")
    if not (inspect.isfunction(run) if static else callable(run)):
        problems.append("no run(task, ctx) method")
    return ", ".join(problems) or None


def _describe(obj: Any) -> str:
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        return f"the function {obj.__name__}"
    return f"a {type(obj).__name__} object"


def _check_name_is_free(name: str, cls: type) -> None:
    """A class may take a registered name only if that name is already its own."""
    from srpo.workflows.registry import registered_factory

    owner = registered_factory(name)
    if owner is not None and owner is not cls:
        raise ValueError(f"workflow: the class {cls.__name__} is named {name!r}, which is "
                         f"registered already for {getattr(owner, '__qualname__', owner)!r}; give "
                         f"the class another `name`")


class _Instance:
    """A factory without parameters that returns one given workflow object."""

    def __init__(self, workflow: Any):
        self.workflow = workflow
        self.description = workflow.description

    def __call__(self) -> Any:
        return self.workflow
