"""srpo: Setwise Relative Policy Optimization for multi-agent LLM systems.

The active set (the outputs one transition consumed) is the unit of update: one
cardinality-normalized set ratio, one relative advantage, one setwise clip.

    from srpo import SRPOConfig, SRPOTrainer     # the Python API (srpo.api, docs/python-api.md)
"""

from typing import Any

from srpo.objective.advantages import set_relative_advantages
from srpo.objective.losses import setwise_policy_loss

__version__ = "0.1.0"
# The Python API, imported on first use (PEP 562): `import srpo` (which every `import srpo.x`
# runs first) loads no trainer, model or task pack.
_API = ("SRPOConfig", "SRPOTrainer", "TrainResult")
__all__ = ["set_relative_advantages", "setwise_policy_loss", "__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        import srpo.api

        return getattr(srpo.api, name)
    raise AttributeError(f"module 'srpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
