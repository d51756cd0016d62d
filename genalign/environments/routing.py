"""Choosing and creating environments: one instance per trajectory, picked per row by a dataset column
(:class:`EnvironmentSet`), from config entries (:func:`environment_factory`).

An entry names an environment as a registered name (``"guess_number"``), a mapping ``{name: ..., **args}`` (args go
to the class), an import path (``"path/to/file.py:ClassName"``, ``"package.module:ClassName"``: see
:mod:`genalign.environments.loading`), or, from Python, a class or a no-argument factory. A class that subclasses
:class:`~genalign.environments.Environment` is built with the args; any other class or factory whose instances have
TRL's ``reset`` is a TRL-style environment (:mod:`genalign.environments.trl`), built with no argument and adapted
(``tool_limits`` is the one arg it accepts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from genalign.environments.base import ENVIRONMENTS, Environment, first_observation
from genalign.environments.loading import import_target
from genalign.environments.trl import TRLEnvironment, is_trl_style
from genalign.environments.types import Observation
from genalign.registry import UnknownOptionError, did_you_mean

EnvironmentSpec = str | Mapping[str, Any] | Callable[..., Any]


def environment_factory(spec: EnvironmentSpec) -> Callable[[], Environment]:
    """A no-argument factory of fresh environments from one config entry or Python object (module docstring).

    Errors (an unknown name, an import path that names nothing, a class that is neither kind) are raised here, at
    config load, not when the first row arrives.
    """
    args: dict[str, Any] = {}
    if isinstance(spec, Mapping):
        if "name" not in spec:
            raise ValueError(f"environment {dict(spec)!r}: a mapping needs a 'name' key (a registered name or path).")
        args = {key: value for key, value in spec.items() if key != "name"}
        spec = spec["name"]
    label = spec if isinstance(spec, str) else getattr(spec, "__name__", repr(spec))
    target: Any = spec
    if isinstance(spec, str):
        if spec in ENVIRONMENTS:
            target = ENVIRONMENTS.get(spec)
        else:
            target = import_target(spec, kind="environment")
            if target is None:
                ENVIRONMENTS.get(spec)  # raises UnknownOptionError with the names and a did-you-mean hint
    if isinstance(target, type) and issubclass(target, Environment):
        accepted = accepted_arguments(target)
        for key in args:
            if accepted is not None and key not in accepted:
                raise ValueError(
                    f"environment {label!r}: unknown argument {key!r}.{did_you_mean(key, sorted(accepted))} "
                    f"Valid arguments: {', '.join(sorted(accepted))}."
                )
        target(**args).close()  # build one now: a wrong value fails at config load, with the class's own message

        def make() -> Environment:
            return target(**args)

        return make
    if isinstance(target, type) and not is_trl_style(target):
        raise TypeError(
            f"environment {label!r}: {target.__name__} is neither a genalign Environment subclass nor a TRL-style "
            "environment (a class with reset(self, **kwargs) whose public methods are tools)."
        )
    if not callable(target):
        raise TypeError(f"environment {label!r}: {type(target).__name__} is not a class or a factory.")
    unknown = sorted(set(args) - {"tool_limits"})
    if unknown:
        raise ValueError(
            f"environment {label!r} is TRL-style: it is built with no argument, so {unknown} cannot be passed "
            "(only tool_limits, which the adapter takes). Read configuration inside its __init__ instead."
        )
    return TRLEnvironment.factory(_checked_trl_factory(target, label), tool_limits=args.get("tool_limits"))


def accepted_arguments(cls: type) -> set[str] | None:
    """The keyword arguments ``cls(...)`` accepts: its ``__init__``'s, and while an ``__init__`` passes ``**kwargs``
    on, those of the next class up that defines one. None when that chain ends in an open ``**kwargs``."""
    import inspect

    accepted: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in klass.__dict__:
            continue
        if klass is object:
            return accepted
        parameters = list(inspect.signature(klass.__dict__["__init__"]).parameters.values())[1:]
        accepted.update(p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            return accepted
    return None


def _checked_trl_factory(factory: Callable[[], Any], label: str) -> Callable[[], Any]:
    def make() -> Any:
        instance = factory()
        if isinstance(instance, Environment):
            raise TypeError(
                f"environment {label!r}: the factory returned a genalign Environment; name its class instead."
            )
        if not is_trl_style(instance):
            raise TypeError(
                f"environment {label!r}: the factory returned {type(instance).__name__}, which has no reset()."
            )
        return instance

    make.__name__ = getattr(factory, "__name__", "environment")
    return make


@dataclass
class Episode:
    """One trajectory's environment, started.

    Args:
        name: the environment's name in the set (the row's routing value).
        environment: the instance (reset already called).
        observation: what ``reset`` returned, to append to the prompt's last user message (None: nothing).
        tool_schemas: the JSON schemas of its tools, for the chat template's ``tools=``.
    """

    name: str
    environment: Environment
    observation: Observation | None = None
    tool_schemas: list[dict[str, Any]] = field(default_factory=list)


class EnvironmentSet:
    """The environments of a run, and the per-row choice among them.

    Args:
        environments: ``{name: entry}`` (each row's ``column`` holds a name); a list of entries (each named by its
            registered name or import path; an entry mapping by its ``name``); or one entry (every row uses it, and
            rows need no ``column``).
        column: the row column that names the environment (``"env"``; TRL datasets use ``"environment"``). It is
            not passed to ``reset``.

    Raises:
        ValueError / UnknownOptionError / TypeError: an entry that cannot be built (at construction, not per row).
    """

    def __init__(
        self,
        environments: Mapping[str, EnvironmentSpec] | Sequence[EnvironmentSpec] | EnvironmentSpec,
        *,
        column: str = "env",
    ) -> None:
        self.column = column
        self.single: str | None = None
        if isinstance(environments, Mapping) and "name" not in environments:
            entries = dict(environments)
        elif isinstance(environments, Sequence) and not isinstance(environments, str):
            entries = {_entry_name(entry): entry for entry in environments}
            if len(entries) != len(environments):
                raise ValueError("two environment entries have the same name; give them names with a mapping.")
        else:
            self.single = _entry_name(environments)
            entries = {self.single: environments}
        if not entries:
            raise ValueError("EnvironmentSet needs at least one environment.")
        self.factories: dict[str, Callable[[], Environment]] = {}
        for name, entry in entries.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"environment names must be non-empty strings, got {name!r}.")
            self.factories[name] = environment_factory(entry)

    @property
    def names(self) -> list[str]:
        return sorted(self.factories)

    def name_for(self, row: Mapping[str, Any]) -> str:
        """The name of the environment that ``row`` asks for.

        Raises:
            KeyError: the row has no routing column (and the set has several environments).
            UnknownOptionError: the row names an environment not in the set (with a did-you-mean hint).
        """
        if self.single is not None and self.column not in row:
            return self.single
        if self.column not in row:
            raise KeyError(
                f"the row has no {self.column!r} column to choose among the environments {self.names}; add it to the "
                f"data (task rows carry it) or set the environment column. Row columns: {sorted(row)}."
            )
        name = row[self.column]
        if name not in self.factories:
            raise UnknownOptionError(
                f"the row asks for environment {name!r} ({self.column!r} column), which is not in this run."
                f"{did_you_mean(str(name), self.names)} Environments: {', '.join(self.names)}."
            )
        return name

    def create(self, row: Mapping[str, Any]) -> Environment:
        """A fresh, not yet reset, environment for ``row``."""
        return self.factories[self.name_for(row)]()

    def start(self, row: Mapping[str, Any]) -> Episode:
        """A fresh environment for ``row``, reset with the row's columns (the routing column removed)."""
        name = self.name_for(row)
        environment = self.factories[name]()
        columns = {key: value for key, value in row.items() if key != self.column}
        observation = first_observation(environment, columns)
        return Episode(name, environment, observation, environment.tool_schemas())


def _entry_name(entry: EnvironmentSpec) -> str:
    if isinstance(entry, Mapping):
        if "name" not in entry or not entry["name"]:
            raise ValueError(f"environment {dict(entry)!r}: a mapping needs a 'name' key.")
        return _entry_name(entry["name"])  # a string, or from Python a class or factory
    if isinstance(entry, str):
        return entry
    return getattr(entry, "__name__", type(entry).__name__)
