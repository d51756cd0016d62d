"""Signatures as the catalogue records them, read from the live objects: an option's keyword hyper-parameters and a
reward factory's arguments. The catalogue builder writes them (:mod:`genalign.catalog.build`); the reward check of a
config reads the same records of a reward the catalogue does not hold (an import path, a Python callable).
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable
from typing import Any, Literal

#: parameters of a reward's signature that are the reward's inputs, never ``args``
REWARD_INPUTS = ("self", "prompts", "completions")


def _type_text(annotation: Any) -> str | None:
    """The annotation as written (``float``, ``Literal['a', 'b']``), or None when there is none."""
    if annotation is inspect.Parameter.empty:
        return None
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def default_record(default: Any) -> dict[str, Any]:
    """How a default is written: ``{"required": true}`` without one, ``{"default": value}`` when JSON holds it (a tuple
    becomes a list), else ``{"default_repr": repr}``."""
    if default is inspect.Parameter.empty:
        return {"required": True}
    try:
        json.dumps(default)
    except (TypeError, ValueError):
        return {"default_repr": repr(default)}
    return {"default": default}


def hyperparameter_records(hyperparameters: dict[str, Any], target: Callable[..., Any] | None) -> list[dict[str, Any]]:
    """``[{name, default | required, type}]`` of ``{keyword: default}`` (``Registry.hyperparameters``), with the
    annotations of ``target`` (the function or ``__init__`` that takes them, when there is one)."""
    params = inspect.signature(target).parameters if target is not None else {}
    records = []
    for name, default in hyperparameters.items():
        record = {"name": name, **default_record(default)}
        annotation = _type_text(params[name].annotation) if name in params else None
        records.append(record | ({"type": annotation} if annotation else {}))
    return records


def option_target(option: Any) -> Callable[..., Any] | None:
    """What takes an option's keywords: a class's ``__init__``, a function; None for an object declaring them."""
    if isinstance(option, type):
        return option.__init__
    return None if hasattr(option, "hyperparameters") else option


def reward_arguments(factory: Callable[..., Any]) -> list[dict[str, Any]]:
    """What ``rewards[i].args`` may hold for the reward factory ``factory`` (a class, or a function whose keywords the
    config binds): ``[{name, choices?}]``, ``choices`` the values of a ``Literal`` annotation (the only annotations
    checked)."""
    target = factory.__init__ if isinstance(factory, type) else inspect.unwrap(factory)
    try:
        hints = typing.get_type_hints(inspect.unwrap(target))
    except Exception:  # annotations that cannot be resolved are simply not type-checked
        hints = {}
    arguments = []
    for name, param in inspect.signature(target).parameters.items():
        if param.kind not in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD) or name in REWARD_INPUTS:
            continue
        record: dict[str, Any] = {"name": name}
        if typing.get_origin(hints.get(name)) is Literal:
            record["choices"] = list(typing.get_args(hints[name]))
        arguments.append(record)
    return arguments


__all__ = ["default_record", "hyperparameter_records", "option_target", "reward_arguments"]
