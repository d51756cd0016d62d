"""Rules between configured options that read only what their registries declare (keyword hyper-parameters and
meta), written once for the live registries (:mod:`genalign.algorithms`, which binds the options) and for the
catalogue (``genalign validate``, which checks a config without importing torch: :mod:`genalign.catalog`). Each takes
the registries it reads; either kind answers the same questions (:class:`genalign.registry.Registry`,
:class:`genalign.catalog.store.CataloguedRegistry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genalign.registry import HyperparameterError, Option, check_hyperparameters, did_you_mean


def check_rule_order(names: Sequence[str], credit_rules: Any) -> None:
    """A credit rule with meta ``replaces=True`` ignores the advantages it receives, so it must come first."""
    for position, name in enumerate(names):
        if position > 0 and credit_rules.meta(name).get("replaces", False):
            raise ValueError(
                f"credit rule {name!r} computes per-action advantages from the sample advantages and the rollout "
                f"structure, discarding what {names[position - 1]!r} produced; put it first in the credit list."
            )


def objective_hyperparameters(
    objective: Option,
    *,
    ratio_level: Option | None,
    clip: Option | None,
    objectives: Any,
    ratio_levels: Any,
    clip_forms: Any,
) -> dict[str, Any]:
    """The keyword arguments ``objective`` is bound with: its own ``args`` plus, for ratio objectives (meta ``ratio``),
    the ratio level's and the clip form's names and keywords (default ``token`` and ``ppo``; ignored otherwise). Each
    option's keywords are validated against its own registry (unknown names and keywords raise with a did-you-mean
    hint); a ratio objective's ``args`` hold only its own keywords (e.g. Lopti's ``threshold``), never those of the
    level or the clip form."""
    if not objectives.meta(objective.name).get("ratio", False):
        check_hyperparameters(objectives, objective.name, objective.args)
        return dict(objective.args)
    level, form = ratio_level or Option("token"), clip or Option("ppo")
    check_hyperparameters(ratio_levels, level.name, level.args)
    check_hyperparameters(clip_forms, form.name, form.args)
    own = set(objectives.hyperparameters(objective.name)) - {"ratio_level", "clip"}
    foreign = [key for key in objective.args if key not in own]
    if foreign:
        owners = {key: f"ratio level {level.name!r}" for key in ratio_levels.hyperparameters(level.name)}
        owners |= {key: f"clip form {form.name!r}" for key in clip_forms.hyperparameters(form.name)}
        where = "; ".join(
            f"{key!r} is a keyword of {owners[key]}: give it with that option" if key in owners
            else f"{key!r} is not a keyword of objective {objective.name!r}.{did_you_mean(key, [*own, *owners])}"
            for key in foreign
        )  # fmt: skip
        raise HyperparameterError(
            f"objective {objective.name!r} got hyper-parameter(s) {', '.join(map(repr, foreign))} that are not its "
            f"own ({where}). Its own keywords: {', '.join(sorted(own)) or 'none'}."
        )
    return {"ratio_level": level.name, "clip": form.name, **level.args, **form.args, **objective.args}


__all__ = ["check_rule_order", "objective_hyperparameters"]
