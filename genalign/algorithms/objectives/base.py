"""The objective registry: one signature for every training objective (ratio, likelihood-weighted, likelihood-free).

::

    objective(score: ScoreOutput, advantages [n] | [n, T], batch: StepBatch, **hp) -> (loss [n, T], metrics)

``score`` is what the policy's scoring pass returned for the micro-batch (log-probs and the features of this pass,
e.g. entropy or the velocities of DiffusionNFT); ``batch`` is the micro-batch's slice of the step batch
(:class:`~genalign.algorithms.batch.StepBatch`): ``old_logp`` and ``mask`` ``[n, T]``, ``group_ids`` ``[n]``, the
sampler's ``behaviour_logp``, group reward spread, progress, the update phase and the signals the objective's
``needs`` declare. The per-action loss is aggregated by the shared :func:`~genalign.algorithms.aggregate` with the
global normaliser, whatever the objective.

Registry meta: ``needs`` (signals the objective reads, checked against the policy family at config load);
``ratio=True`` for objectives composed of a ratio level and a clip form (bound with the level's and the clip form's
names and keywords, see :func:`objective_hyperparameters`); ``uses_old_logp=False`` for objectives that never
read ``old_logp`` (the trainer then skips the scoring pass that would compute it); ``whole_groups=True`` for
objectives that weigh samples within their group (every micro-batch must hold whole groups); ``phases=P`` for
objectives whose update runs ``P`` times over the batch, one phase after the other (the batch's ``phase``, Lopti
[219]); ``aggregation=mode`` for objectives whose published form needs one aggregation mode (e.g.
``seq_mean_token_mean`` for one loss per sample written on its actions): ``algorithm.aggregation`` defaults to it, and
another mode is refused at config load.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from torch import Tensor

from genalign.algorithms.clip_forms import CLIP_FORMS
from genalign.algorithms.options import HyperparameterError, Option, accepted_hyperparameters, check_hyperparameters
from genalign.algorithms.ratio_levels import RATIO_LEVELS
from genalign.registry import Registry, did_you_mean

Objective = Callable[..., tuple[Tensor, dict[str, Tensor]]]

#: name -> ``fn(score: ScoreOutput, advantages, batch: StepBatch, **hp) -> (loss [n, T], metrics)``
OBJECTIVES: Registry[Objective] = Registry("objective", catalogue="genalign.experimental.objectives")


def objective_hyperparameters(
    objective: Option, *, ratio_level: Option | None = None, clip: Option | None = None
) -> dict[str, Any]:
    """The keyword arguments objective ``objective`` is bound with: its own ``args`` plus, for ratio objectives, the
    ratio level's and the clip form's names and keywords (default ``token`` and ``ppo``; ignored otherwise). Each
    option's keywords are validated against its own registry (unknown names and keywords raise with a did-you-mean
    hint); a ratio objective's ``args`` hold only its own keywords (e.g. Lopti's ``threshold``), never those of the
    level or the clip form."""
    if not OBJECTIVES.meta(objective.name).get("ratio", False):
        check_hyperparameters(OBJECTIVES, objective.name, objective.args)
        return dict(objective.args)
    level, form = ratio_level or Option("token"), clip or Option("ppo")
    check_hyperparameters(RATIO_LEVELS, level.name, level.args)
    check_hyperparameters(CLIP_FORMS, form.name, form.args)
    own = set(accepted_hyperparameters(OBJECTIVES, objective.name)) - {"ratio_level", "clip"}
    foreign = [key for key in objective.args if key not in own]
    if foreign:
        owners = {key: f"ratio level {level.name!r}" for key in accepted_hyperparameters(RATIO_LEVELS, level.name)}
        owners |= {key: f"clip form {form.name!r}" for key in accepted_hyperparameters(CLIP_FORMS, form.name)}
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


def checked_binding(name: str, check: Callable[..., None]) -> Callable[..., Objective]:
    """A registry ``bind`` (meta) for objective ``name`` that runs ``check(**hyper-parameters)`` (the objective's
    defaults completed by the config's values; it raises ``ValueError`` naming the bad value) once, at config load,
    then binds the values."""

    def bind(**hp: Any) -> Objective:
        check(**(accepted_hyperparameters(OBJECTIVES, name) | hp))
        return functools.partial(OBJECTIVES.get(name), **hp)

    return bind
