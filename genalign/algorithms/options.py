"""Configured options: an :class:`Option` (a registry name and its hyper-parameters), their validation, and binding.

Every choice of the backend is an option of one registry, written in a config as a name or as
``{name: ..., **hyper-parameters}``. Hyper-parameters are checked against the option's keywords and *bound* once,
when the config loads (:func:`bind_option`): the trainer then calls the bound option with the registry's positional
arguments only, and nothing is inspected per micro-batch. A registered *class* is instantiated with its
hyper-parameters; an instance that keeps statistics across steps offers the state protocol
(:class:`Stateful`) and is checkpointed with the run. (:class:`Option`, :func:`check_hyperparameters` and
:class:`HyperparameterError` live in :mod:`genalign.registry`, which the config machinery reads without importing
torch.)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from genalign.registry import HyperparameterError, Option, Registry, check_hyperparameters


def accepted_hyperparameters(registry: Registry, name: str) -> dict[str, Any]:
    """Return ``{keyword: default}`` for the keyword-only hyper-parameters of option ``name`` of ``registry``
    (:meth:`genalign.registry.Registry.hyperparameters`).

    Raises :class:`genalign.registry.UnknownOptionError` (listing the valid names) for an unknown ``name``.
    """
    return registry.hyperparameters(name)


def bind_option(registry: Registry, name: str, hp: Mapping[str, Any]) -> Any:
    """Option ``name`` of ``registry`` with its hyper-parameters ``hp`` validated and bound, once (config load).

    Every registry entry is a function of the registry's signature (``fn(*inputs, **hp)``), usable directly. Its
    registry meta ``bind`` may give a *bound form*: ``bind(**hp) -> callable(*inputs)``, which validates the
    hyper-parameters once and may keep state across steps (a :class:`Stateful` object with a per-step ``update``,
    e.g. an estimator that learns a prior from earlier steps; the trainer checkpoints it). Without ``bind`` the
    function's keywords are checked and bound with :func:`functools.partial`. A registered class is instantiated
    with ``hp``. The result is called with the registry's positional inputs only."""
    option = registry.get(name)
    binder = registry.meta(name).get("bind")
    target = option.__init__ if isinstance(option, type) else option
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(target).parameters.values())
    if not takes_any:  # an option taking **hp validates them itself (e.g. a ratio objective's level and clip keywords)
        check_hyperparameters(registry, name, hp)
    if binder is not None:
        return binder(**hp)
    return option(**hp) if isinstance(option, type) else functools.partial(option, **hp)


@runtime_checkable
class Stateful(Protocol):
    """The one state protocol: a component whose state changes during training and must be checkpointed (a stateful
    option, the sample-source stage, the asynchronous rollout schedule, ...). ``state_dict`` returns plain values and
    tensors (JSON + safetensors, never a pickle); ``load_state_dict`` restores them exactly. A stateful option that
    keeps statistics of earlier steps also has a per-step ``update(...)``, which the stage that owns it calls."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


__all__ = [
    "HyperparameterError",
    "Option",
    "Stateful",
    "accepted_hyperparameters",
    "bind_option",
    "check_hyperparameters",
]
