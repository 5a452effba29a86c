"""Workflow registry: name -> factory, so configs and the CLI can name workflows.

    build_workflow("parallel", {"k": 4})
    register_workflow(MyWorkflow)            # a user's class (name, description, **params)
    build_workflow("my_flows.py:MyWorkflow") # or by import path, without registering
    list_workflows()                         # [(name, description), ...]

A factory is any callable taking the workflow's params as keyword arguments (the built-ins are
dataclasses). Unknown names and params raise ValueError naming them and the known ones.

Security: a config that names a workflow by import path runs code. Importing the module (or
executing the file) runs its top-level code, exactly as Hydra's `_target_` does; then only a
class that implements the workflow protocol (class attributes `name` and `description`, an
`agents` attribute or property, a `run` method) is accepted, checked before anything is
called: `os:system`, a function or any other object is refused with an error.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from srpo.workflows.base import Workflow
from srpo.workflows.debate import Debate
from srpo.workflows.mixed import Mixed
from srpo.workflows.parallel import ParallelAggregate
from srpo.workflows.pipeline import Pipeline
from srpo.workflows.planner import PlannerWorkers
from srpo.workflows.routed import Routed
from srpo.workflows.single import SingleAgent

Factory = Callable[..., Workflow]
_REGISTRY: dict[str, tuple[Factory, str]] = {}


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
    _REGISTRY[name] = (factory, description)
    return factory


# Workflows of installed task packs (srpo.tasks.search's, the testbed's cover, a third party's)
# are found through entry points of this group and imported on first use, so this module
# imports no task pack.
ENTRY_POINT_GROUP = "srpo.workflows"


def _installed() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_installed(name: str, entry_point: Any) -> Factory:
    factory = entry_point.load()
    problem = _not_a_workflow_class(factory)
    if problem or getattr(factory, "name", None) != name:
        raise ValueError(f"workflow entry point {name!r} ({entry_point.value}): "
                         f"{problem or 'its class is named ' + repr(getattr(factory, 'name', None))}")
    return register_workflow(factory)


def list_workflows() -> list[tuple[str, str]]:
    """(name, one-line description) of every registered workflow, the built-ins first, then
    the installed task packs' (loaded on this call)."""
    for name, entry_point in _installed().items():
        if name not in _REGISTRY:
            _load_installed(name, entry_point)
    return [(n, d) for n, (_, d) in _REGISTRY.items()]


def _params_of(factory: Factory) -> list[str] | None:
    """The keyword parameters a factory takes; None when it takes **kwargs (anything)."""
    if dataclasses.is_dataclass(factory):
        return [f.name for f in dataclasses.fields(factory) if f.init]
    params = inspect.signature(factory).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.name != "self"]


def import_reference(ref: str, *, what: str) -> Any:
    """"package.module:Name" or "path/to/file.py:Name" -> the object named (a file is executed
    as a module of its own, `_exec_file`). ValueError naming `what` and `ref` when it cannot be
    imported. Used for user workflows here and for user task packs (srpo.packs)."""
    module_ref, _, attr = ref.rpartition(":")
    try:
        if module_ref.endswith(".py"):
            path = Path(module_ref)
            if not path.is_file():
                raise FileNotFoundError(f"no such file {module_ref!r}")
            module = _exec_file(path, f"srpo_user_{what.replace(' ', '_')}_{path.stem}")
        else:
            module = importlib.import_module(module_ref)
    except (ImportError, FileNotFoundError) as e:
        raise ValueError(f"{what} {ref!r}: cannot import {module_ref!r}: {e}") from e
    except SystemExit as e:  # sys.exit() at import: not the end of srpo's command
        raise ValueError(f"{what} {ref!r}: {module_ref!r} called sys.exit({e.code!r}) while it was "
                         f"imported; a {what} file must not exit at import") from None
    if not hasattr(module, attr):
        raise ValueError(f"{what} {ref!r}: {module_ref!r} has no attribute {attr!r}")
    return getattr(module, attr)


def _exec_file(path: Path, name: str) -> Any:
    """Execute a user's .py file as the module `name`, with its folder first on sys.path while it
    runs, so that it can `import helper` from a helper.py beside it, as `python file.py` could.

    Why this way: a user's pack or workflow file is a script, not part of a package, and is
    written to be run from its folder; loading it as a submodule of a package named after its
    folder would take only `from . import helper`, which such a file does not say. The folder is
    on sys.path only while the file executes (the entry is removed after, also on an error), so
    it does not shadow modules for the rest of the process. What the file imports while it runs
    stays imported (in sys.modules under its plain name, e.g. `helper`), so its functions can use
    those modules later; a module first imported inside a function, after loading, is not found
    there (import it at the top of the file). Two user files that each import a different
    module of the same name get the one imported first, as in any Python process."""
    folder = str(path.resolve().parent)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except ImportError:  # what the file imports: import_reference names it
        raise
    except SyntaxError as e:  # the file's own errors: one line naming it, not their traceback
        raise ValueError(f"{path} cannot be imported: SyntaxError at line {e.lineno}: {e.msg}") from None
    except Exception as e:  # noqa: BLE001 - whatever the user's code raises while it is imported
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"{path} raised {type(e).__name__} while it was imported"
                         + (f": {first}" if first else "")) from None
    finally:
        try:
            sys.path.remove(folder)  # the first entry equal to it: ours, unless the file added one
        except ValueError:  # the file removed it itself
            pass
    return module


def _import_factory(ref: str) -> Factory:
    """"package.module:Name" or "path/to/file.py:Name" -> the workflow class named."""
    attr = ref.rpartition(":")[2]
    target = import_reference(ref, what="workflow")
    problem = _not_a_workflow_class(target)
    if problem:
        raise ValueError(
            f"workflow {ref!r}: {attr!r} {problem}; a config may only name a class that implements "
            f"the workflow protocol (class attributes name and description, agents, a run(task, ctx) "
            f"method), and it is not called otherwise (docs/workflows.md)"
        )
    return target


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
    installed = {} if name in _REGISTRY or ":" in name else _installed()
    if name in _REGISTRY:
        factory, _ = _REGISTRY[name]
    elif name in installed:
        factory = _load_installed(name, installed[name])
    elif ":" in name:
        factory = _import_factory(name)
    else:
        raise ValueError(f"unknown workflow {name!r}; known workflows: "
                         f"{sorted(set(_REGISTRY) | set(installed))} "
                         f"(or give a user workflow as 'module:Class' / 'file.py:Class')")
    params = dict(params or {})
    known = _params_of(factory)
    unknown = sorted(set(params) - set(known)) if known is not None else []
    if unknown:
        raise ValueError(
            f"workflow {name!r} has no parameter(s) {unknown}; its parameters: {known}"
        )
    return factory(**params)


def _mixed(workflows: list[Mapping[str, Any]] | None = None) -> Mixed:
    """workflows: [{"name": str, "weight": float, "params": {...}}, ...] (default: a mix of
    single, parallel and routed with equal weights)."""
    if workflows is None:
        workflows = [{"name": "single"}, {"name": "parallel"}, {"name": "routed"}]
    components = []
    for i, item in enumerate(workflows):
        if not isinstance(item, Mapping) or "name" not in item:
            raise ValueError(
                f"mixed.workflows[{i}] must be a mapping with 'name' (and optional 'weight', "
                f"'params'), got {item!r}"
            )
        extra = sorted(set(item) - {"name", "weight", "params"})
        if extra:
            raise ValueError(
                f"mixed.workflows[{i}]: unknown key(s) {extra}; use name/weight/params"
            )
        if item["name"] == "mixed":
            raise ValueError("mixed.workflows cannot contain 'mixed' itself")
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ValueError(f"mixed.workflows[{i}].weight must be a number, got {weight!r}")
        components.append((float(weight), build_workflow(item["name"], item.get("params"))))
    return Mixed(components)


_mixed.name = "mixed"  # type: ignore[attr-defined]
_mixed.description = Mixed.description  # type: ignore[attr-defined]

# The generic built-ins. A task pack's own workflows (search, cover) come from entry points
# (above), or are registered when a pack given by file is loaded (srpo.packs.register_pack).
for _factory in (SingleAgent, Pipeline, ParallelAggregate, Debate, PlannerWorkers, _mixed, Routed):
    register_workflow(_factory)
