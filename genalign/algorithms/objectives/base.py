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

from genalign import option_rules
from genalign.algorithms.clip_forms import CLIP_FORMS
from genalign.algorithms.options import Option, accepted_hyperparameters
from genalign.algorithms.ratio_levels import RATIO_LEVELS
from genalign.registry import Registry

Objective = Callable[..., tuple[Tensor, dict[str, Tensor]]]

#: name -> ``fn(score: ScoreOutput, advantages, batch: StepBatch, **hp) -> (loss [n, T], metrics)``
OBJECTIVES: Registry[Objective] = Registry("objective", catalogue="genalign.experimental.objectives")


def objective_hyperparameters(
    objective: Option, *, ratio_level: Option | None = None, clip: Option | None = None
) -> dict[str, Any]:
    """The keyword arguments objective ``objective`` is bound with: its own ``args`` plus, for ratio objectives, the
    ratio level's and the clip form's names and keywords (default ``token`` and ``ppo``; ignored otherwise), each
    validated against its own registry (:func:`genalign.option_rules.objective_hyperparameters`)."""
    return option_rules.objective_hyperparameters(
        objective, ratio_level=ratio_level, clip=clip, objectives=OBJECTIVES, ratio_levels=RATIO_LEVELS,
        clip_forms=CLIP_FORMS,
    )  # fmt: skip


def checked_binding(name: str, check: Callable[..., None]) -> Callable[..., Objective]:
    """A registry ``bind`` (meta) for objective ``name`` that runs ``check(**hyper-parameters)`` (the objective's
    defaults completed by the config's values; it raises ``ValueError`` naming the bad value) once, at config load,
    then binds the values."""

    def bind(**hp: Any) -> Objective:
        check(**(accepted_hyperparameters(OBJECTIVES, name) | hp))
        return functools.partial(OBJECTIVES.get(name), **hp)

    return bind
