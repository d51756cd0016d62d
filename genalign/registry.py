"""A name -> callable registry with helpful errors.

Every pluggable family in genalign (advantage estimators, objectives, aggregation modes, SDE dynamics, likelihood
proxies, reward functions, ...) lives in one :class:`Registry`. A registry enforces the rule of
``shared/ARCHITECTURE.md``: one fixed call signature per family, so callers never special-case a name.

A registry may name a *catalogue*: a module (the registry's sub-package of ``genalign.experimental``) that registers
more options into it. It is imported the first time the registry is read (a name looked up, listed or counted), so
every option of the tier is there whatever imported the registry first, and the package that defines the registry
never imports the tier that builds on it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


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
