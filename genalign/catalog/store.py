"""The generated catalogue (``catalog.json``, written by ``python -m genalign.catalog``) read without importing any
option's module: a :class:`CataloguedRegistry` per registry answers what config checks ask a
:class:`~genalign.registry.Registry` (names, meta, tier, keyword hyper-parameters, :meth:`~CataloguedRegistry.binding`),
with the same messages; :class:`CataloguedSignal` holds what they ask of a signal declaration.

The file holds, per registry (a key of :data:`genalign.catalog.registries.LIVE_REGISTRIES`), its ``kind`` and, per
option: ``tier``, ``binding``, the JSON-readable ``meta`` (summary, source, formula, needs, ...; the bound forms and
vocabulary-term binders are code, recorded only through ``binding``), ``line`` (what ``genalign list`` prints),
``hyperparameters`` (``[{name, default | required, type}]``: the keyword-only ones, as
:meth:`genalign.registry.Registry.hyperparameters` gives them) and, for rewards, ``arguments`` (what
``rewards[i].args`` may hold: ``[{name, choices?}]``). Then ``signals`` (producer, whether measuring one
needs the rewards), ``families`` (the signals each supplies with its default options) and the command that
regenerates it.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genalign.registry import Binding, UnknownOptionError, did_you_mean

CATALOG_PATH = Path(__file__).resolve().parent / "catalog.json"
#: the command that regenerates :data:`CATALOG_PATH` (tests/test_catalog.py fails with it when the file is stale)
REGENERATE = "python -m genalign.catalog"


@functools.cache
def catalogue() -> dict[str, Any]:
    """The catalogue, read once."""
    if not CATALOG_PATH.is_file():
        raise FileNotFoundError(f"{CATALOG_PATH} is missing; regenerate it with `{REGENERATE}`.")
    return json.loads(CATALOG_PATH.read_text(encoding="utf-8"))


def _default(record: dict[str, Any]) -> Any:
    """The default of a catalogued hyper-parameter (``inspect.Parameter.empty`` when it has none)."""
    if record.get("required"):
        return inspect.Parameter.empty
    return record["default"] if "default" in record else record["default_repr"]


class CataloguedRegistry:
    """The catalogue's record of one registry, read like the :class:`~genalign.registry.Registry` it describes (no
    ``get``: the implementations are not here)."""

    def __init__(self, key: str) -> None:
        entry = catalogue()["registries"][key]
        self.key, self.kind = key, entry["kind"]
        self._options: dict[str, dict[str, Any]] = entry["options"]

    def option(self, name: str) -> dict[str, Any]:
        """The catalogue entry of ``name``; an unknown name raises :class:`UnknownOptionError` as ``Registry.get``."""
        try:
            return self._options[name]
        except KeyError:
            raise UnknownOptionError(
                f"unknown {self.kind} {name!r}.{did_you_mean(name, self.names())} "
                f"Valid names: {', '.join(self.names())}."
            ) from None

    def names(self) -> list[str]:
        return sorted(self._options)

    def __contains__(self, name: object) -> bool:
        return name in self._options

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._options)

    def meta(self, name: str) -> dict[str, Any]:
        return self.option(name)["meta"]

    def tier(self, name: str) -> str:
        return self.option(name)["tier"]

    def binding(self, name: str) -> Binding:
        return self.option(name)["binding"]

    def hyperparameters(self, name: str) -> dict[str, Any]:
        return {record["name"]: _default(record) for record in self.option(name)["hyperparameters"]}

    def arguments(self, name: str) -> list[dict[str, Any]]:
        """What ``args`` option ``name`` takes (rewards): ``[{name, choices?}]``."""
        return self.option(name)["arguments"]

    def __repr__(self) -> str:
        return f"CataloguedRegistry({self.kind!r}, {self.names()})"


@dataclass(frozen=True)
class CataloguedSignal:
    """What config checks read of a signal declaration (:class:`genalign.algorithms.signals.Signal`)."""

    name: str
    producer: str
    needs_rewards: bool = False


@functools.cache
def catalogued_signals() -> dict[str, CataloguedSignal]:
    return {name: CataloguedSignal(name, **facts) for name, facts in catalogue()["signals"].items()}


__all__ = ["CATALOG_PATH", "REGENERATE", "CataloguedRegistry", "CataloguedSignal", "catalogue", "catalogued_signals"]
