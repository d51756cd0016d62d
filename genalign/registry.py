"""A name -> callable registry with helpful errors.

Every pluggable family in genalign (advantage estimators, objectives, aggregation modes, SDE dynamics, likelihood
proxies, reward functions, ...) lives in one :class:`Registry`. A registry enforces the rule of
``shared/ARCHITECTURE.md``: one fixed call signature per family, so callers never special-case a name. A configured
choice of a registry is an :class:`Option`: a name and its keyword hyper-parameters.

A registry may name a *catalogue*: a module (the registry's sub-package of ``genalign.experimental``) that registers
more options into it. It is imported the first time the registry is read (a name looked up, listed or counted), so
every option of the tier is there whatever imported the registry first, and the package that defines the registry
never imports the tier that builds on it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: how an option is written, for messages
OPTION_FORMS = "an option name, or a mapping of its name and keyword hyper-parameters ({name: NAME, KEYWORD: VALUE})"


class UnknownOptionError(KeyError, ValueError):
    """Raised when a registry is asked for a name it does not hold."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


def did_you_mean(name: str, choices: list[str] | tuple[str, ...]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"


@dataclass(frozen=True)
class Option:
    """One configured option: ``name`` in its registry and its keyword hyper-parameters ``args`` (a plain dict).

    A config writes it as the bare name, or as a mapping of the name and the hyper-parameters:
    ``advantage: grpo`` is ``Option("grpo")``, ``advantage: {name: grpo, eps: 1.0e-6}`` is
    ``Option("grpo", {"eps": 1.0e-6})`` (:meth:`to_config` gives the written form back).
    """

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", dict(self.args))

    def to_config(self) -> str | dict[str, Any]:
        """The form a config writes: the bare name without hyper-parameters, else ``{name, **args}``."""
        return {"name": self.name, **self.args} if self.args else self.name

    @classmethod
    def parse(cls, value: Any, where: str = "option") -> Option:
        """The option written as ``value``: an ``Option``, its name, or a mapping of ``name`` and its keyword
        hyper-parameters. Anything else raises ``ValueError`` naming ``where`` (the field), the value and the forms."""
        if isinstance(value, Option):
            return value
        if isinstance(value, str) and value:
            return cls(value)
        if isinstance(value, Mapping):
            if "name" not in value:
                keywords = ", ".join(f"{key}: ..." for key in value) or "KEYWORD: VALUE"
                raise ValueError(
                    f"{where}: the mapping {dict(value)!r} has no 'name'; an option is {OPTION_FORMS}, e.g. "
                    f"{where}: {{name: NAME, {keywords}}}."
                )
            if not isinstance(value["name"], str) or not value["name"]:
                raise ValueError(f"{where}.name: expected the option's name (a string), got {value['name']!r}.")
            return cls(value["name"], {str(key): v for key, v in value.items() if key != "name"})
        if isinstance(value, list | tuple):
            raise ValueError(f"{where}: expected one option, got the list {list(value)!r}; give {OPTION_FORMS}.")
        raise ValueError(f"{where}: expected {OPTION_FORMS}, got {value!r}.")


class Registry(Generic[T]):
    """Maps option names to implementations of one kind.

    Args:
        kind: human name of the family, used in error messages (e.g. ``"advantage estimator"``).
    """

    def __init__(self, kind: str, *, catalogue: str | None = None) -> None:
        self.kind = kind
        self.catalogue = catalogue
        self._items: dict[str, T] = {}
        self._meta: dict[str, dict] = {}
        self._catalogue_loaded = catalogue is None

    def _load_catalogue(self) -> None:
        """Import the catalogue module once (its registrations land here)."""
        if not self._catalogue_loaded:
            self._catalogue_loaded = True  # first: the catalogue reads this registry while it registers
            importlib.import_module(self.catalogue)

    def register(self, name: str, **meta) -> Callable[[T], T]:
        """Decorator registering ``obj`` under ``name``; ``meta`` (formula, source, ...) is kept for docs."""

        def decorator(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            self._meta[name] = dict(meta)
            return obj

        return decorator

    def get(self, name: str) -> T:
        if name not in self._items:
            self._load_catalogue()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownOptionError(
                f"unknown {self.kind} {name!r}.{did_you_mean(name, self.names())} "
                f"Valid names: {', '.join(self.names())}."
            ) from None

    def meta(self, name: str) -> dict:
        self.get(name)
        return self._meta[name]

    def names(self) -> list[str]:
        self._load_catalogue()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        if name not in self._items:
            self._load_catalogue()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load_catalogue()
        return len(self._items)

    def tier(self, name: str) -> str:
        """``experimental`` for an option defined in the experimental tier (``genalign.experimental``), else
        ``stable``: the tier follows from where an option lives."""
        option = self.get(name)
        module = getattr(option, "__module__", None) or type(option).__module__
        return "experimental" if module.startswith("genalign.experimental.") else "stable"

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
