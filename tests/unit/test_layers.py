"""The import graph of the package: layers, no upward import, no cycle, no core->task-pack import.

Every `import` / `from ... import` statement counts, also those inside function bodies and
under `if TYPE_CHECKING:` (they are read from the source with ast, not by importing). The
layers, lowest first, are those of docs/architecture.md; a module may import modules of its
own layer or of lower layers only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "srpo"

# (layer, module prefixes), lowest first. The most specific prefix decides a module's layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("records and the plug-in lookup", ("srpo.types", "srpo.batch", "srpo.jsonl", "srpo.disk", "srpo.plugins")),
    ("objective", ("srpo.objective", "srpo")),  # the root package re-exports the objective
    ("models", ("srpo.models",)),
    ("workflow protocol and generic workflows", ("srpo.workflows",)),
    ("rollout: agents, backends, runner", ("srpo.rollout",)),
    ("task pack interface", ("srpo.packs",)),
    ("config schema", ("srpo.config",)),
    ("assembly: config -> live objects", ("srpo.build",)),
    ("run record: checkpoints, logs, evaluation, report, the recorder", ("srpo.record",)),
    ("training loop: trainer, sampling, update", ("srpo.train",)),
    ("task packs", ("srpo.tasks",)),
    ("applications: CLI, Python API, engine integrations",
     ("srpo.cli", "srpo.api", "srpo.integrations")),
]
# The root package re-exports the Python API lazily: its module __getattr__ imports srpo.api on
# the first use of srpo.SRPOTrainer (PEP 562), never when `import srpo` runs, so the root stays in
# the objective's layer for the modules that import it (__version__). That one edge is left out
# of the graph; tests/api/test_exports.py checks it sits in __getattr__ only and that
# `import srpo` loads no srpo.api.
LAZY_EXPORTS = {"srpo": {"srpo.api"}}
TASK_PACKS = ("srpo.tasks.math", "srpo.tasks.search", "srpo.tasks.testbed")
CORE_TOP = 9  # layers 0..9 are the core: they import no task pack and no application


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """srpo modules `name` imports anywhere in its source, resolved to existing modules:
    `from pkg import sub` counts pkg.sub when that is a module, else pkg (a name defined there)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("srpo") and target != name:
                found.add(target)
    return found


def layer_of(module: str) -> int:
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".") or (
                prefix.endswith("_") and module.startswith(prefix))
            if matches and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best is not None, f"module {module} is in no layer: add it to LAYERS"
    return best


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) - LAZY_EXPORTS.get(name, set())
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a list of modules, first == last) or None."""
    state: dict[str, int] = {}  # 1 on the DFS stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a)
    )


def test_every_module_has_a_layer():
    for module in _modules():
        layer_of(module)


def test_no_module_imports_upward():
    assert upward_imports(import_graph()) == []


def test_core_imports_no_task_pack():
    graph = import_graph()
    bad = sorted(f"{a} imports {b}" for a, targets in graph.items() if layer_of(a) <= CORE_TOP
                 for b in targets if b.startswith("srpo.tasks"))
    assert bad == []


def test_task_packs_import_no_other_pack():
    graph = import_graph()
    bad = []
    for a, targets in graph.items():
        own = next((p for p in TASK_PACKS if a == p or a.startswith(p + ".")), None)
        if own is None:
            continue
        bad += [f"{a} imports {b}" for b in targets
                if any(b == p or b.startswith(p + ".") for p in TASK_PACKS if p != own)]
    assert bad == []


def test_import_graph_has_no_cycle():
    assert find_cycle(import_graph()) is None


LAB = PACKAGE.parent / "lab" / "srpo_lab"


def _top_level_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_library_never_imports_the_research_harness():
    """srpo_lab (lab/: studies' runner and statistics) sits above the library: it imports srpo,
    and nothing in srpo imports it, so a user's install needs none of it."""
    bad = sorted(str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
                 if "srpo_lab" in _top_level_imports(p))
    assert bad == []
    lab_modules = list(LAB.rglob("*.py"))
    assert lab_modules and any("srpo" in _top_level_imports(p) for p in lab_modules)


def test_package_graph_has_no_cycle():
    """Between the packages under srpo (srpo.rollout, srpo.train, ...), no cycle either."""
    graph: dict[str, set[str]] = {}
    for a, targets in import_graph().items():
        pa = ".".join(a.split(".")[:2])
        for b in targets:
            pb = ".".join(b.split(".")[:2])
            if pa != pb and pa != "srpo" and pb != "srpo":
                graph.setdefault(pa, set()).add(pb)
    assert find_cycle(graph) is None


# ---------------------------------------------------------------- the checks themselves fail


def test_the_checks_catch_a_cycle_and_an_upward_import():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert upward_imports({"srpo.rollout.runner": {"srpo.train.trainer"}}) == [
        "srpo.rollout.runner (rollout: agents, backends, runner) imports srpo.train.trainer "
        "(training loop: trainer, sampling, update)"]


def test_function_level_imports_are_seen(tmp_path, monkeypatch):
    source = "def f():\n    from srpo.tasks.math import answers\n    return answers\n"
    path = tmp_path / "mod.py"
    path.write_text(source)
    known = {"srpo.rollout.mod", "srpo.tasks.math", "srpo.tasks.math.answers"}
    assert _imports("srpo.rollout.mod", path, known) == {"srpo.tasks.math.answers"}


@pytest.mark.parametrize("module, layer", [("srpo.types", 0), ("srpo.plugins", 0), ("srpo.cli.train", 11),
                                           ("srpo.tasks.search.pack", 10), ("srpo.record.report", 8),
                                           ("srpo.train.trainer", 9)])
def test_layer_assignment(module, layer):
    assert layer_of(module) == layer
