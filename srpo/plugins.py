"""One lookup for everything a config or a package plugs in: task packs, generation engines,
workflows and command families.

A `Registry` finds a plug-in by name, in this order:

    1. registered in this process      registry.register(name, value)  (a test, a notebook, the API)
    2. installed                       an entry point of the registry's group (pyproject.toml of
                                       any installed package: how a third party adds one)
    3. srpo's own, by reference        `builtins` {name: "module:NAME"}: a source checkout on
                                       PYTHONPATH, never installed, has no entry points
    4. by reference                    "file.py:NAME" or "package.module:NAME", where the registry
                                       takes references (packs and workflows; an engine's name is
                                       a config key, so engines do not)
    5. otherwise                       ValueError: the name, the closest known one, every known one

What the lookup finds is checked by the registry's `accept` before it is used (a pack must be a
`TaskPack`, a workflow a class implementing the protocol...), and kept registered, so each
plug-in is imported once. Modules are imported on first use only.

Security: a reference names code, and importing the module (or executing the file) runs its
top-level code, as Hydra's `_target_` does; `accept` then refuses anything that is not the
expected kind of object before it is called. A config that names code runs that code.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """name -> plug-in of one kind (module doc).

    kind: what one plug-in is called in messages ("task pack").
    plural: the word for several in "known <plural>: [...]" ("packs").
    group: the entry point group installed packages declare them in ("srpo.task_packs").
    accept: (object, name, where) -> the value to keep; raises ValueError naming `where` when the
        object is not a plug-in of this kind.
    builtins: srpo's own, {name: "module:NAME"}, in the order listings show them.
    references: whether "file.py:NAME" / "module:NAME" names a plug-in directly.
    key: the config key that names one, shown in the unknown-name error ("task.name").
    on_register: called with each value as it is registered (a pack registers its workflows).
    """

    def __init__(self, kind: str, *, plural: str, group: str, accept: Callable[[Any, str, str], T],
                 builtins: Mapping[str, str] | None = None, references: bool = False, key: str | None = None,
                 on_register: Callable[[T], None] | None = None):
        self.kind, self.plural, self.group, self.key = kind, plural, group, key
        self.builtins = dict(builtins or {})
        self.references = references
        self._accept = accept
        self._on_register = on_register
        self._registered: dict[str, T] = {}  # insertion order: listings show built-ins first
        # what "file.py:NAME" / "module:NAME" references loaded, kept apart so that a listing
        # shows plug-ins by name only (and a file is executed once)
        self._by_reference: dict[str, T] = {}

    # ------------------------------------------------------------------ what is known

    def register(self, name: str, value: T) -> T:
        """Make `value` the plug-in `name` (replacing one of that name); returns it."""
        self._registered[name] = value
        if self._on_register is not None:
            self._on_register(value)
        return value

    def registered(self) -> dict[str, T]:
        """The plug-ins registered so far, by name, in registration order (a copy)."""
        return dict(self._registered)

    def reset(self, registered: Mapping[str, T] | None = None) -> None:
        """Forget every registration, or go back to `registered` (a copy from registered()):
        for tests that must not leave plug-ins behind. No on_register call."""
        self._registered = dict(registered or {})
        self._by_reference = {}

    def installed(self) -> dict[str, Any]:
        """The entry points of the group, by name (not loaded)."""
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def names(self) -> list[str]:
        """Every name the lookup knows without a reference: registered, installed, built-in."""
        return sorted(set(self._registered) | set(self.installed()) | set(self.builtins))

    def sources(self) -> list[tuple[str, Any]]:
        """(name, where it comes from) for every name: srpo's own first in their order (an
        installed entry point of the same name wins over the built-in reference), then the
        other installed ones by name. The source is an entry point or a "module:NAME" string."""
        eps = self.installed()
        names = [*self.builtins, *sorted(set(eps) - set(self.builtins))]
        return [(name, eps[name] if name in eps else self.builtins[name]) for name in names]

    def __contains__(self, name: object) -> bool:
        return name in self._registered

    def __iter__(self) -> Iterator[str]:
        return iter(self._registered)

    # ------------------------------------------------------------------ the lookup

    def get(self, name: str) -> T:
        """The plug-in `name` (module doc: registered, installed, built-in, reference)."""
        if name in self._registered:
            return self._registered[name]
        eps = self.installed()
        if name in eps:
            where = f"{self.kind} {name!r} (entry point)"
            return self.register(name, self._accept(eps[name].load(), name, where))
        if name in self.builtins:
            ref = self.builtins[name]
            return self.register(name, self._accept(import_reference(ref, what=self.kind), name,
                                                    f"{self.kind} {name!r} ({ref})"))
        if self.references and isinstance(name, str) and ":" in name:
            if name not in self._by_reference:
                value = self._accept(import_reference(name, what=self.kind), name, f"{self.kind} {name!r}")
                self._by_reference[name] = value
                if self._on_register is not None:  # a pack given by file still brings its workflows
                    self._on_register(value)
            return self._by_reference[name]
        raise self.unknown(name)

    def load(self, source: Any) -> Any:
        """The object a source of `sources()` names, loaded and not checked (callers that
        tolerate a broken plug-in, such as the command line, check it themselves)."""
        return import_reference(source, what=self.kind) if isinstance(source, str) else source.load()

    def unknown(self, name: Any) -> ValueError:
        """The error for a name the lookup does not know: the closest known name, every one."""
        known = self.names()
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        where = f" ({self.key})" if self.key else ""
        how = (f"or a user's {self.kind} as 'file.py:NAME' / 'package.module:NAME'" if self.references
               else f"a package adds one with an entry point in the group {self.group!r}")
        return ValueError(f"unknown {self.kind} {name!r}{where}; {hint}known {self.plural}: {known} ({how})")


def import_reference(ref: str, *, what: str) -> Any:
    """"package.module:Name" or "path/to/file.py:Name" -> the object named (a file is executed
    as a module of its own, `exec_file`). ValueError naming `what` and `ref` when it cannot be
    imported."""
    module_ref, _, attr = ref.rpartition(":")
    try:
        if module_ref.endswith(".py"):
            path = Path(module_ref)
            if not path.is_file():
                raise FileNotFoundError(f"no such file {module_ref!r}")
            module = exec_file(path, f"srpo_user_{what.replace(' ', '_')}_{path.stem}")
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


def exec_file(path: Path, name: str) -> Any:
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
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"{path} raised {type(e).__name__} while it was imported"
                         + (f": {first}" if first else "")) from None
    finally:
        if folder in sys.path:  # the first entry equal to it: ours, unless the file removed it
            sys.path.remove(folder)
    return module
