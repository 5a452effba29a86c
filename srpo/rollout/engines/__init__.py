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

Engines are found by srpo.plugins' one lookup (registered, entry point group "srpo.engines",
srpo's own `BUILTIN_ENGINES`), so a package that declares such an entry point adds an engine
without touching srpo. An engine's module is imported on first use only (CTranslate2 itself
only when its backend is built).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from srpo.plugins import Registry

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


def _accept(obj: Any, name: str, where: str) -> Engine:
    if not isinstance(obj, Engine):
        what = f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"
        raise ValueError(f"{where} is {what}, not a srpo.rollout.engines.Engine value")
    return obj


# an engine's name is a config key (its section rollout.<name>), so no "file.py:NAME" reference
ENGINES: Registry[Engine] = Registry("generation engine", plural="engines", group=ENTRY_POINT_GROUP,
                                     accept=_accept, builtins=BUILTIN_ENGINES)


def register_engine(engine: Engine) -> Engine:
    """Make `engine` selectable by its name (e.g. one defined in a test or a notebook)."""
    if not isinstance(engine, Engine):
        raise ValueError(f"register_engine takes an Engine, got {type(engine).__name__}")
    return ENGINES.register(engine.name, engine)


def known_engine_names() -> list[str]:
    """The registered engines, the installed (entry point) ones and srpo's own, sorted."""
    return ENGINES.names()


def get_engine(name: str) -> Engine:
    """The engine `name`: registered, installed (entry point) or srpo's own (BUILTIN_ENGINES).
    ValueError with the known names (and the closest one) for any other."""
    return ENGINES.get(name)
