"""Model-family adapters. Each family provides a config dataclass (with ``capabilities()``) and
``build_policy(config, device) -> Policy``.

Built-in family modules are imported lazily so that using one family never imports another's heavy dependencies, and
a built-in family's config class lives in a module of its own that imports neither torch nor the model libraries
(:data:`FAMILY_CONFIG_MODULES`), so that a config is read and checked without them (``genalign validate``). A family
of your own is added with :func:`register_family` (docs/extending.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

from genalign.policies.capabilities import FamilyTraits, PolicyCapabilities
from genalign.registry import UnknownOptionError, did_you_mean

#: names served from :mod:`genalign.policies.base` (which imports torch) on first use
_FROM_BASE = ("Policy", "Rollout", "RolloutRequest", "ScoreOutput", "ScoreRequest")

#: family name -> module defining ``CONFIG_CLASS`` and ``build_policy(config, device) -> Policy``.
FAMILY_MODULES: dict[str, str] = {
    "causal_lm": "genalign.policies.lm.causal",
    "vlm": "genalign.policies.vlm",
    "flow": "genalign.policies.flow",
    "diffusion_lm": "genalign.policies.dlm.policy",
}
#: built-in family name -> the module of its ``CONFIG_CLASS`` alone (no torch, no model library)
FAMILY_CONFIG_MODULES: dict[str, str] = {
    "causal_lm": "genalign.policies.lm.config",
    "vlm": "genalign.policies.vlm.config",
    "flow": "genalign.policies.flow.config",
    "diffusion_lm": "genalign.policies.dlm.config",
}
#: the families genalign ships (the docs and the contract test list these; tests may add their own to FAMILY_MODULES)
BUILTIN_FAMILIES: tuple[str, ...] = tuple(sorted(FAMILY_MODULES))
_REGISTERED: dict[str, SimpleNamespace] = {}


def __getattr__(name: str) -> Any:
    if name in _FROM_BASE:
        return getattr(importlib.import_module("genalign.policies.base"), name)
    raise AttributeError(f"module 'genalign.policies' has no attribute {name!r}")


def register_family(name: str, *, config_class: type, build_policy: Callable[[Any, Any], Any]) -> None:
    """Make ``policy.family: <name>`` select ``config_class`` (a dataclass with a ``family`` field and a
    ``capabilities()`` method) and ``build_policy(config, device)``."""
    if name in FAMILY_MODULES or name in _REGISTERED:
        raise ValueError(f"policy family {name!r} is registered twice")
    _REGISTERED[name] = SimpleNamespace(CONFIG_CLASS=config_class, build_policy=build_policy)


def family_names() -> list[str]:
    return sorted([*FAMILY_MODULES, *_REGISTERED])


def load_family(name: str) -> ModuleType | SimpleNamespace:
    """The module (or registration) of policy family ``name``: ``CONFIG_CLASS`` and ``build_policy``."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in FAMILY_MODULES:
        raise UnknownOptionError(
            f"unknown policy family {name!r}.{did_you_mean(name, family_names())} "
            f"Valid names: {', '.join(family_names())}."
        )
    return importlib.import_module(FAMILY_MODULES[name])


def family_config_class(name: str) -> type:
    """The config class of policy family ``name``, read without importing the family's model code (a built-in
    family's :data:`FAMILY_CONFIG_MODULES` entry)."""
    if name in FAMILY_CONFIG_MODULES:
        return importlib.import_module(FAMILY_CONFIG_MODULES[name]).CONFIG_CLASS
    return load_family(name).CONFIG_CLASS


def family_traits(policy_config: Any) -> FamilyTraits:
    """The :class:`FamilyTraits` a family config class declares (``traits``); a family registered without them gets
    the defaults (no planner workload, text samples, a transformers export folder)."""
    return getattr(type(policy_config), "traits", None) or FamilyTraits()


def traits_of_family(name: str) -> FamilyTraits:
    """The :class:`FamilyTraits` of policy family ``name`` (from its config class)."""
    return getattr(family_config_class(name), "traits", None) or FamilyTraits()


__all__ = [
    "BUILTIN_FAMILIES",
    "FAMILY_CONFIG_MODULES",
    "FAMILY_MODULES",
    "FamilyTraits",
    "Policy",
    "PolicyCapabilities",
    "Rollout",
    "RolloutRequest",
    "ScoreOutput",
    "ScoreRequest",
    "family_config_class",
    "family_names",
    "family_traits",
    "load_family",
    "register_family",
    "traits_of_family",
]
