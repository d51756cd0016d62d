"""Where config checks read registries and signal declarations: the live ones, or the generated catalogue.

The live registries are filled by importing the options' modules, which import torch (~2 s). A config check that only
reads what a registry declares (option names, meta, keyword hyper-parameters) gets the same answers, with the same
messages, from the catalogue (:mod:`genalign.catalog.store`), which a test keeps equal to the live registries.
``genalign validate`` checks a config inside :func:`catalogued_checks`; everything else (training, ``eval``,
``sample``, a config built in Python) reads the live registries, so options registered from Python are seen there.

* :func:`options` — the registry of ``kind`` for reading (catalogued inside :func:`catalogued_checks`);
* :func:`implementations` — the live registry, for a check that must run an option's code (a bound form or class
  that checks its values, a reward file): it imports the option's modules, in either mode;
* :func:`declared_signals` / :func:`signals_by` — the signal declarations, likewise.

The live registries are named by module path (strings, like the families' modules), so this package sits below the
packages it describes.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from genalign.catalog.store import CataloguedRegistry, catalogued_signals

#: registry key -> (module, attribute) of the live registry
LIVE_REGISTRIES: dict[str, tuple[str, str]] = {
    "rewards": ("genalign.rewards", "REWARDS"),
    "sample_sources": ("genalign.sampling", "SAMPLE_SOURCES"),
    "advantages": ("genalign.algorithms", "ADVANTAGE_ESTIMATORS"),
    "combiners": ("genalign.algorithms", "REWARD_COMBINERS"),
    "shapers": ("genalign.algorithms", "REWARD_SHAPERS"),
    "credit": ("genalign.algorithms", "CREDIT_RULES"),
    "objectives": ("genalign.algorithms", "OBJECTIVES"),
    "ratio_levels": ("genalign.algorithms", "RATIO_LEVELS"),
    "clips": ("genalign.algorithms", "CLIP_FORMS"),
    "aggregations": ("genalign.algorithms", "AGGREGATIONS"),
    "regularizers": ("genalign.algorithms", "REGULARIZERS"),
    "kl": ("genalign.algorithms", "KL_ESTIMATORS"),
    "update_schedules": ("genalign.algorithms.update_schedules", "UPDATE_SCHEDULES"),
    "proxies": ("genalign.policies.dlm.likelihood", "LIKELIHOOD_PROXIES"),
    "decoding_policies": ("genalign.policies.dlm.base", "DECODING_POLICIES"),
    "sde_dynamics": ("genalign.schedulers.sde_dynamics", "SDE_DYNAMICS"),
    "ode_solvers": ("genalign.schedulers.ode_solvers", "ODE_SOLVERS"),
    "architectures": ("genalign.pipelines.architectures", "FLOW_ARCHITECTURES"),
    "engines": ("genalign.policies.lm.engines", "ENGINES"),
}
#: the module whose ``declared()`` lists every signal declaration
LIVE_SIGNALS = "genalign.algorithms.signals"

_CATALOGUED: ContextVar[bool] = ContextVar("genalign_catalogued_checks", default=False)


@contextmanager
def catalogued_checks() -> Iterator[None]:
    """Within this block, :func:`options` and :func:`declared_signals` read the catalogue (no option module, no
    torch)."""
    token = _CATALOGUED.set(True)
    try:
        yield
    finally:
        _CATALOGUED.reset(token)


def catalogued() -> bool:
    """Inside :func:`catalogued_checks`."""
    return _CATALOGUED.get()


def implementations(key: str) -> Any:
    """The live :class:`~genalign.registry.Registry` of ``key`` (imports its options' modules)."""
    module, attribute = LIVE_REGISTRIES[key]
    return getattr(importlib.import_module(module), attribute)


def options(key: str) -> Any:
    """The registry of ``key`` for reading names, meta and keywords: its catalogue inside :func:`catalogued_checks`,
    else the live registry."""
    return CataloguedRegistry(key) if catalogued() else implementations(key)


def declared_signals() -> Mapping[str, Any]:
    """Signal name -> declaration (``producer``, ``needs_rewards``): the catalogue's inside :func:`catalogued_checks`,
    else every live declaration."""
    if catalogued():
        return catalogued_signals()
    return importlib.import_module(LIVE_SIGNALS).declared()


def signals_by(producer: str, names: Iterable[str]) -> frozenset[str]:
    """The declared names among ``names`` whose producer is ``producer`` (undeclared names are left out)."""
    signals = declared_signals()
    return frozenset(name for name in names if name in signals and signals[name].producer == producer)


__all__ = [
    "LIVE_REGISTRIES",
    "catalogued",
    "catalogued_checks",
    "declared_signals",
    "implementations",
    "options",
    "signals_by",
]
