"""Model-family adapters. Each family module defines a config dataclass and ``build_policy(config, device)``.

Family modules are imported lazily so that using one family never imports another's heavy dependencies.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from genalign.policies.base import Policy, Rollout, ScoreOutput
from genalign.registry import UnknownOptionError, did_you_mean

#: family name -> module defining ``CONFIG_CLASS`` and ``build_policy(config, device) -> Policy``.
FAMILY_MODULES: dict[str, str] = {
    "causal_lm": "genalign.policies.causal_lm",
    "vlm": "genalign.policies.vlm",
    "flow": "genalign.policies.flow",
    "diffusion_lm": "genalign.policies.diffusion_lm",
}


def load_family(name: str) -> ModuleType:
    """Import and return the module of policy family ``name``."""
    if name not in FAMILY_MODULES:
        raise UnknownOptionError(
            f"unknown policy family {name!r}.{did_you_mean(name, list(FAMILY_MODULES))} "
            f"Valid names: {', '.join(sorted(FAMILY_MODULES))}."
        )
    return importlib.import_module(FAMILY_MODULES[name])


__all__ = ["FAMILY_MODULES", "Policy", "Rollout", "ScoreOutput", "load_family"]
