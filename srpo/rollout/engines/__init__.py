"""Generation engines: the one interface through which a backend plugs into configs and runs.

An engine says everything a config needs to know about a generation backend, in one `Engine`
value, the way a task pack does for a task family (srpo.packs):

    engine = get_engine("ctranslate2")          # entry point group "srpo.engines"
    settings = engine.settings.model_validate({"compute_type": "int8"})   # its config section
    backend = engine.build(cfg, policies)       # a GenerationBackend over these policies

A config selects an engine with `rollout.backend`; the engine's own settings live in its
section `rollout.<name>` (`rollout.hf.sampler`, `rollout.ctranslate2.compute_type`...),
validated by its `settings` model when the config is loaded, so a bad value names its dotted
key before any model is built. Whether a backend samples the trained policy exactly is the
backend's own answer (`samples_trained_policy()`, read by
srpo.rollout.backends.check_training_backend when training starts).

srpo's engines (hf, ctranslate2) are found through Python entry points (group "srpo.engines",
declared in pyproject.toml), so a package that declares such an entry point adds an engine
without touching srpo; they are also known by name without their entry points
(`BUILTIN_ENGINES`: a source checkout on PYTHONPATH, never installed, has none). An engine's
module is imported on first use only (CTranslate2 itself only when its backend is built).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel, ConfigDict

from srpo.workflows.registry import import_reference

ENTRY_POINT_GROUP = "srpo.engines"
# srpo's own engines, by the references pyproject.toml's entry points give them: used when no
# entry point of that name is installed (tests/unit/test_packs_without_entry_points.py keeps
# the two equal).
BUILTIN_ENGINES = {
    "ctranslate2": "srpo.rollout.engines.ctranslate2:ENGINE",
    "hf": "srpo.rollout.engines.hf:ENGINE",
}


class EngineSettings(BaseModel):
    """Base of an engine's own config section (`rollout.<engine name>`): strict types, unknown
    keys refused, finite floats, as every srpo config section. A field's check raises
    ValueError; the config loader names the dotted key (`rollout.ctranslate2.threads: ...`)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


@dataclass(frozen=True)
class Engine:
    """What a generation engine provides (module doc).

    name: the `rollout.backend` that selects it, and the key of its section under `rollout`
        (so not one of rollout's own keys: backend, max_batch_size, record_logprobs).
    description: one line.
    build: (config, policies) -> a GenerationBackend (srpo.rollout.backends) over `policies`;
        config is the whole srpo.config.Config: the engine reads rollout.max_batch_size,
        rollout.record_logprobs and its own section, `config.rollout.settings_of(name)`.
    settings: its section's model, a subclass of EngineSettings (default: no settings).
    """

    name: str
    description: str
    build: Callable[[Any, Any], Any]
    settings: type[EngineSettings] = EngineSettings

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"an engine needs a name that is an identifier (it is a config key), "
                             f"got {self.name!r}")
        if not callable(self.build):
            raise ValueError(f"engine {self.name!r}: build must be callable")
        if not (isinstance(self.settings, type) and issubclass(self.settings, EngineSettings)):
            raise ValueError(f"engine {self.name!r}: settings must be a subclass of "
                             f"srpo.rollout.engines.EngineSettings")


_ENGINES: dict[str, Engine] = {}


def register_engine(engine: Engine) -> Engine:
    """Make `engine` selectable by its name (e.g. one defined in a test or a notebook)."""
    if not isinstance(engine, Engine):
        raise ValueError(f"register_engine takes an Engine, got {type(engine).__name__}")
    _ENGINES[engine.name] = engine
    return engine


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_engine_names() -> list[str]:
    """The registered engines, the installed (entry point) ones and srpo's own, sorted."""
    return sorted(set(_ENGINES) | set(_entry_points()) | set(BUILTIN_ENGINES))


def get_engine(name: str) -> Engine:
    """The engine `name`: registered, installed (entry point) or srpo's own (BUILTIN_ENGINES).
    ValueError with the known names (and the closest one) for any other."""
    if name in _ENGINES:
        return _ENGINES[name]
    eps = _entry_points()
    if name in eps:
        return register_engine(_checked(eps[name].load(), f"engine {name!r} (entry point)"))
    if name in BUILTIN_ENGINES:  # srpo's own, without an installed entry point
        ref = BUILTIN_ENGINES[name]
        return register_engine(_checked(import_reference(ref, what="engine"), f"engine {name!r} ({ref})"))
    known = known_engine_names()
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"unknown generation engine {name!r}; {hint}known engines: {known} (a package "
                     f"adds one with an entry point in the group {ENTRY_POINT_GROUP!r})")


def _checked(obj: Any, where: str) -> Engine:
    if not isinstance(obj, Engine):
        what = f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"
        raise ValueError(f"{where} is {what}, not a srpo.rollout.engines.Engine value")
    return obj
