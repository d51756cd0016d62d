"""A name -> callable registry with helpful errors.

Every pluggable family in genalign (advantage estimators, objectives, aggregation modes, SDE dynamics, likelihood
proxies, reward functions, ...) lives in one :class:`Registry`. A registry enforces the rule of
``shared/ARCHITECTURE.md``: one fixed call signature per family, so callers never special-case a name. A configured
choice of a registry is an :class:`Option`: a name and its keyword hyper-parameters.

A registry may name a *catalogue*: a module (the registry's sub-package of ``genalign.experimental``) that registers
more options into it. It is imported the first time the registry is read (a name looked up, listed or counted), so
every option of the tier is there whatever imported the registry first, and the package that defines the registry
never imports the tier that builds on it.

What a config check reads of a registry (names, meta, keyword hyper-parameters, :meth:`Registry.binding`) is also
written to the generated catalogue (:mod:`genalign.catalog`), which answers the same questions without importing the
options' modules (and torch); :func:`check_hyperparameters` reads either.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")

#: how an option is written, for messages
OPTION_FORMS = "an option name, or a mapping of its name and keyword hyper-parameters ({name: NAME, KEYWORD: VALUE})"


#: how binding an option checks its hyper-parameters (:meth:`Registry.binding`)
Binding = Literal["keywords", "code"]


class UnknownOptionError(KeyError, ValueError):
    """Raised when a registry is asked for a name it does not hold."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class HyperparameterError(TypeError, ValueError):
    """Raised when an option receives a keyword it does not accept."""


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

    def hyperparameters(self, name: str) -> dict[str, Any]:
        """``{keyword: default}`` of the keyword-only hyper-parameters of option ``name`` (``inspect.Parameter.empty``
        for one without a default): those a declared-keyword object lists (``hyperparameters``), else the keyword-only
        parameters of the function or of the class's ``__init__``."""
        option = self.get(name)
        if hasattr(option, "hyperparameters") and not isinstance(option, type):  # an object that declares them
            return dict(option.hyperparameters)
        params = inspect.signature(option.__init__ if isinstance(option, type) else option).parameters.values()
        return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}

    def binding(self, name: str) -> Binding:
        """How binding option ``name`` (``bind_option``) checks its hyper-parameters: ``keywords`` when it only checks
        that they are keywords the option takes (a function bound with ``functools.partial``, an object that declares
        its keywords, or an option registered with meta ``binding="keywords"``), ``code`` when a bound form (meta
        ``bind``), a class or a vocabulary-term binder runs checks of its own (values), which need the option's
        module."""
        option, meta = self.get(name), self._meta[name]
        if "binding" in meta:
            return meta["binding"]
        return "code" if isinstance(option, type) or "bind" in meta or "vocab_term" in meta else "keywords"

    def tier(self, name: str) -> str:
        """``experimental`` for an option defined in the experimental tier (``genalign.experimental``), else
        ``stable``: the tier follows from where an option lives."""
        option = self.get(name)
        module = getattr(option, "__module__", None) or type(option).__module__
        return "experimental" if module.startswith("genalign.experimental.") else "stable"

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"


def check_hyperparameters(registry: Any, name: str, hp: Mapping[str, Any], *, supplied: tuple[str, ...] = ()) -> None:
    """Raise :class:`HyperparameterError` if ``hp`` holds a keyword that option ``name`` of ``registry`` (a
    :class:`Registry` or its catalogue, :class:`genalign.catalog.store.CataloguedRegistry`) does not take, or one of
    the keywords the caller ``supplied`` itself; an unknown ``name`` raises :class:`UnknownOptionError` (with the valid
    names). E.g. ``check_hyperparameters(ADVANTAGE_ESTIMATORS, "grpo", {"epsilon": 1e-6})`` fails and suggests
    ``eps``."""
    accepted = [key for key in registry.hyperparameters(name) if key not in supplied]
    given = [key for key in hp if key in supplied]
    if given:
        raise HyperparameterError(
            f"{registry.kind} {name!r} got {', '.join(map(repr, given))}, which the trainer supplies itself; remove "
            f"{'it' if len(given) == 1 else 'them'}. Accepted keywords: {', '.join(accepted) or 'none'}."
        )
    unknown = [key for key in hp if key not in accepted]
    if unknown:
        hints = "".join(did_you_mean(key, accepted) for key in unknown)
        valid = ", ".join(accepted) if accepted else "none"
        raise HyperparameterError(
            f"{registry.kind} {name!r} got unknown hyper-parameter(s) {', '.join(map(repr, unknown))}.{hints} "
            f"Accepted keywords: {valid}."
        )
