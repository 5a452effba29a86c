"""Generation backends: what samples the policies' tokens, and how one plugs into configs.

Two parts, one word: the protocol every backend implements (`GenerationBackend`, its requests
and generations: srpo.rollout.backends.protocol, re-exported here), and the registry through
which a config names one. A `BackendSpec` says everything a config needs to know about a
backend, the way a task pack does for a task family (srpo.packs):

    spec = get_backend("ctranslate2")           # entry point group "srpo.backends"
    settings = spec.settings.model_validate({"compute_type": "int8"})   # its config section
    backend = spec.build(cfg, policies)         # a GenerationBackend over these policies

A config selects a backend with `rollout.backend`; the backend's own settings live in its
section `rollout.<name>` (`rollout.hf.sampler`, `rollout.ctranslate2.compute_type`...),
validated by its `settings` model when the config is loaded, so a bad value names its dotted
key before any model is built. Whether a backend samples the trained policy exactly is the
backend's own answer (`samples_trained_policy()`, read by
srpo.rollout.backends.protocol.check_training_backend when training starts).

Backends are found by srpo.plugins' one lookup (registered, entry point group "srpo.backends",
srpo's own `BUILTIN_BACKENDS`), so a package that declares such an entry point adds a backend
without touching srpo. A backend's module is imported on first use only (CTranslate2 itself
only when its backend is built).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from srpo.plugins import Registry
from srpo.rollout.backends.protocol import (
    BackendStats,
    Generation,
    GenerationBackend,
    GenerationRequest,
    check_training_backend,
)

__all__ = ["BACKENDS", "BUILTIN_BACKENDS", "BackendSettings", "BackendSpec", "BackendStats", "Generation",
           "GenerationBackend", "GenerationRequest", "check_training_backend", "get_backend", "known_backend_names",
           "register_backend"]

ENTRY_POINT_GROUP = "srpo.backends"
# srpo's own backends, by the references pyproject.toml's entry points give them: used when no
# entry point of that name is installed (tests/rollout/test_backends.py keeps the two equal).
BUILTIN_BACKENDS = {
    "ctranslate2": "srpo.rollout.backends.ctranslate2:BACKEND",
    "hf": "srpo.rollout.backends.hf:BACKEND",
}


class BackendSettings(BaseModel):
    """Base of a backend's own config section (`rollout.<backend name>`): strict types, unknown
    keys refused, finite floats, as every srpo config section. A field's check raises
    ValueError; the config loader names the dotted key (`rollout.ctranslate2.threads: ...`)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


@dataclass(frozen=True)
class BackendSpec:
    """What a generation backend provides (module doc).

    name: the `rollout.backend` that selects it, and the key of its section under `rollout`
        (so not one of rollout's own keys: backend, max_batch_size, record_logprobs).
    description: one line.
    build: (config, policies) -> a GenerationBackend (srpo.rollout.backends.protocol) over `policies`;
        config is the whole srpo.config.Config: the backend reads rollout.max_batch_size,
        rollout.record_logprobs and its own section, `config.rollout.settings_of(name)`.
    settings: its section's model, a subclass of BackendSettings (default: no settings).
    """

    name: str
    description: str
    build: Callable[[Any, Any], Any]
    settings: type[BackendSettings] = BackendSettings

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a backend needs a name that is an identifier (it is a config key), "
                             f"got {self.name!r}")
        if not callable(self.build):
            raise ValueError(f"backend {self.name!r}: build must be callable")
        if not (isinstance(self.settings, type) and issubclass(self.settings, BackendSettings)):
            raise ValueError(f"backend {self.name!r}: settings must be a subclass of "
                             f"srpo.rollout.backends.BackendSettings")


def _accept(obj: Any, name: str, where: str) -> BackendSpec:
    if not isinstance(obj, BackendSpec):
        what = f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"
        raise ValueError(f"{where} is {what}, not a srpo.rollout.backends.BackendSpec value")
    return obj


# a backend's name is a config key (its section rollout.<name>), so no "file.py:NAME" reference
BACKENDS: Registry[BackendSpec] = Registry("generation backend", plural="backends", group=ENTRY_POINT_GROUP,
                                     accept=_accept, builtins=BUILTIN_BACKENDS)


def register_backend(backend: BackendSpec) -> BackendSpec:
    """Make `backend` selectable by its name (e.g. one defined in a test or a notebook)."""
    if not isinstance(backend, BackendSpec):
        raise ValueError(f"register_backend takes a BackendSpec, got {type(backend).__name__}")
    return BACKENDS.register(backend.name, backend)


def known_backend_names() -> list[str]:
    """The registered backends, the installed (entry point) ones and srpo's own, sorted."""
    return BACKENDS.names()


def get_backend(name: str) -> BackendSpec:
    """The backend `name`: registered, installed (entry point) or srpo's own (BUILTIN_BACKENDS).
    ValueError with the known names (and the closest one) for any other."""
    return BACKENDS.get(name)
