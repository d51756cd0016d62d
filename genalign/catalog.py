"""What can be named in a config: every registered option with a one-line summary and its source, the policy families
with their capabilities, and the presets (``genalign list``)."""

from __future__ import annotations

import inspect
from pathlib import Path

#: ``genalign list <kind>`` -> what it lists
KINDS = (
    "rewards", "sample_sources", "advantages", "combiners", "shapers", "credit", "objectives", "ratio_levels", "clips", "aggregations",
    "regularizers", "kl", "proxies", "families", "presets",
)  # fmt: skip
PRESETS_DIR = Path(__file__).resolve().parents[1] / "configs"


def _registry(kind: str):
    from genalign import algorithms as alg

    if kind == "rewards":
        from genalign.rewards import REWARDS

        return REWARDS
    if kind == "sample_sources":
        from genalign.sampling import SAMPLE_SOURCES

        return SAMPLE_SOURCES
    if kind == "proxies":
        from genalign.policies.dlm.likelihood import LIKELIHOOD_PROXIES

        return LIKELIHOOD_PROXIES
    return {
        "advantages": alg.ADVANTAGE_ESTIMATORS, "combiners": alg.REWARD_COMBINERS, "shapers": alg.REWARD_SHAPERS,
        "credit": alg.CREDIT_RULES,
        "objectives": alg.OBJECTIVES, "ratio_levels": alg.RATIO_LEVELS, "clips": alg.CLIP_FORMS,
        "aggregations": alg.AGGREGATIONS, "regularizers": alg.REGULARIZERS, "kl": alg.KL_ESTIMATORS,
    }[kind]  # fmt: skip


def _summary(registry, name: str) -> str:
    meta = registry.meta(name)
    target = inspect.unwrap(registry.get(name))
    text = meta.get("summary") or (inspect.getdoc(target) or "").split("\n")[0]
    text = text or f"from {getattr(target, '__module__', '?')} (no docstring)"
    details = [meta["source"]] if meta.get("source") else []
    details += ["experimental"] if registry.tier(name) == "experimental" else []
    details += [f"needs {', '.join(meta['needs'])}"] if meta.get("needs") else []
    return f"{text} ({'; '.join(details)})" if details else text


def preset_summaries() -> list[tuple[str, str]]:
    """``(preset file name, first comment line)`` of every preset in ``configs/`` (empty when not installed)."""
    if not PRESETS_DIR.is_dir():
        return []
    found = []
    for path in sorted(PRESETS_DIR.glob("*.yaml")):
        first = next((line[1:].strip() for line in path.read_text().splitlines() if line.startswith("#")), "")
        found.append((path.name, first))
    return found


def listing(kind: str) -> list[tuple[str, str]]:
    """``(name, one-line description)`` rows of ``kind`` (one of :data:`KINDS`)."""
    if kind not in KINDS:
        from genalign.registry import did_you_mean

        raise ValueError(f"unknown kind {kind!r}.{did_you_mean(kind, list(KINDS))} Valid: {', '.join(KINDS)}.")
    if kind == "presets":
        return preset_summaries()
    if kind == "families":
        from genalign.policies import family_names, load_family

        rows = []
        for name in family_names():
            capabilities = load_family(name).CONFIG_CLASS().capabilities()
            supplies = sorted(capabilities.signals)
            rows.append((name, f"supplies {', '.join(supplies) or 'log-probs only'} with its default options"))
        return rows
    registry = _registry(kind)
    return [(name, _summary(registry, name)) for name in registry.names()]


def format_listing(kind: str) -> str:
    rows = listing(kind)
    width = max((len(name) for name, _ in rows), default=0)
    return "\n".join(f"{name.ljust(width)}  {text}" for name, text in rows)
