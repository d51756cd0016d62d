"""Write the catalogue (``genalign/catalog/catalog.json``) from the live registries, signal declarations and policy
families: ``python -m genalign.catalog`` (``--check``: exit 1 when the committed file differs; tests/test_catalog.py
runs the same comparison). This imports every option's module, and torch with them; reading the catalogue never does.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from typing import Any

from genalign.catalog.registries import LIVE_REGISTRIES, LIVE_SIGNALS, implementations
from genalign.catalog.signatures import hyperparameter_records, option_target, reward_arguments
from genalign.catalog.store import CATALOG_PATH, REGENERATE


def _json_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The registry meta JSON can hold (tuples become lists); code (bound forms, binders) is left out."""
    kept = {}
    for key, value in meta.items():
        try:
            kept[key] = json.loads(json.dumps(value))
        except (TypeError, ValueError):
            continue
    return kept


def _line(registry: Any, name: str) -> dict[str, str]:
    """For an option without a meta summary, the line ``genalign list`` prints instead: its docstring's first line."""
    if registry.meta(name).get("summary"):
        return {}
    target = inspect.unwrap(registry.get(name))
    text = (inspect.getdoc(target) or "").split("\n")[0]
    return {"line": text or f"from {getattr(target, '__module__', '?')} (no docstring)"}


def option_record(key: str, registry: Any, name: str) -> dict[str, Any]:
    """The catalogue entry of option ``name`` of ``registry`` (the one of registry key ``key``)."""
    option = registry.get(name)
    record = {
        "tier": registry.tier(name),
        "binding": registry.binding(name),
        **_line(registry, name),
        "meta": _json_meta(registry.meta(name)),
        "hyperparameters": hyperparameter_records(registry.hyperparameters(name), option_target(option)),
    }
    if key == "rewards":
        record["arguments"] = reward_arguments(option)
    return record


def shipped(option: Any) -> bool:
    """The option is one genalign ships (defined in a genalign module), not one registered by a plugin or a test."""
    module = getattr(option, "__module__", None) or type(option).__module__
    return module == "genalign" or module.startswith("genalign.")


def families() -> dict[str, dict[str, Any]]:
    """The built-in policy families with the signals their default options supply."""
    policies = importlib.import_module("genalign.policies")
    return {
        name: {"signals": sorted(policies.load_family(name).CONFIG_CLASS().capabilities().signals)}
        for name in policies.BUILTIN_FAMILIES
    }


def build() -> dict[str, Any]:
    """The catalogue, from the live registries: the options genalign ships (:func:`shipped`)."""
    registries = {}
    for key in LIVE_REGISTRIES:
        registry = implementations(key)
        names = [name for name in registry.names() if shipped(registry.get(name))]
        registries[key] = {
            "kind": registry.kind,
            "options": {name: option_record(key, registry, name) for name in names},
        }
    signals = {
        name: {"producer": spec.producer, "needs_rewards": spec.needs_rewards}
        for name, spec in sorted(importlib.import_module(LIVE_SIGNALS).declared().items())
    }
    return {"regenerate": REGENERATE, "registries": registries, "signals": signals, "families": families()}


def _one_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def render() -> str:
    """The file's text: one line per option, signal and family, so that a change reads as a line of the diff."""
    data = build()
    lines = ["{", f' "regenerate": {_one_line(data["regenerate"])},', ' "registries": {']
    for i, (key, registry) in enumerate(data["registries"].items()):
        lines.append(f'  {_one_line(key)}: {{"kind": {_one_line(registry["kind"])}, "options": {{')
        options = [f"   {_one_line(name)}: {_one_line(record)}" for name, record in registry["options"].items()]
        lines += [",\n".join(options), "  }}" + ("," if i < len(data["registries"]) - 1 else "")]
    for section in ("signals", "families"):
        entries = [f"  {_one_line(name)}: {_one_line(record)}" for name, record in data[section].items()]
        lines += [" },", f' "{section}": {{', ",\n".join(entries)]
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {CATALOG_PATH.name} is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = CATALOG_PATH.read_text(encoding="utf-8") if CATALOG_PATH.exists() else ""
        if current != text:
            print(f"{CATALOG_PATH} is out of date; run: {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    CATALOG_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {CATALOG_PATH}")
    return 0


__all__ = ["build", "families", "main", "option_record", "render"]
