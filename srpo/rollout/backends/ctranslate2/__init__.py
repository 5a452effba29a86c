"""The ctranslate2 backend (`rollout.backend: ctranslate2`, the default job's): CTranslate2
generates from a copy of each policy converted from the live weights, re-converted after each
update (.backend; the conversion is .convert).

Its section, `rollout.ctranslate2`:

    compute_type: float32    # "float32" (the policy itself) or "int8" (quantized: a different
                             # policy, refused in training; for srpo rollout / srpo eval)
    threads: null            # CPU threads of each policy's generator (null: torch's thread count)

CTranslate2 is optional (`pip install 'srpo[ct2]'`): this module and its settings import
without it (a config naming the backend loads anywhere); the package is imported when a backend
is built, with an error saying how to install it.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from srpo.rollout.backends import BackendSettings, BackendSpec
from srpo.rollout.backends.ctranslate2.backend import COMPUTE_TYPES, CT2Stats, CTranslate2Backend
from srpo.rollout.backends.ctranslate2.logprobs import processed_logprobs


class CTranslate2Settings(BackendSettings):
    """`rollout.ctranslate2`: the ctranslate2 backend's own settings (module doc)."""

    compute_type: str = "float32"  # "float32" (the policy itself) | "int8" (not for training)
    threads: int | None = None  # CPU threads of each policy's generator (None: torch's count)

    @field_validator("compute_type")
    @classmethod
    def _compute_type(cls, compute_type: str) -> str:
        if compute_type not in COMPUTE_TYPES:
            raise ValueError(f"must be one of {list(COMPUTE_TYPES)}, got {compute_type!r}")
        return compute_type

    @field_validator("threads")
    @classmethod
    def _threads(cls, threads: int | None) -> int | None:
        if threads is not None and threads < 1:
            raise ValueError(f"must be > 0 (or null: torch's thread count), got {threads}")
        return threads


def build(cfg: Any, policies: Any) -> CTranslate2Backend:
    """The ctranslate2 backend of a config (srpo.config.Config) over these policies."""
    own = cfg.rollout.settings_of("ctranslate2")
    return CTranslate2Backend(policies, compute_type=own.compute_type, intra_threads=own.threads,
                              max_batch_size=cfg.rollout.max_batch_size,
                              record_logprobs=cfg.rollout.record_logprobs)


BACKEND = BackendSpec(
    name="ctranslate2",
    description="CTranslate2, converted from the live weights after every update (srpo[ct2])",
    build=build,
    settings=CTranslate2Settings,
)

__all__ = [
    "COMPUTE_TYPES",
    "BACKEND",
    "CT2Stats",
    "CTranslate2Backend",
    "CTranslate2Settings",
    "build",
    "processed_logprobs",
]
