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
``ratio=True`` for objectives composed of a ratio level and a clip form (their hyper-parameters include
``ratio_level`` and ``clip``, see :func:`objective_hyperparameters`); ``uses_old_logp=False`` for objectives that never
read ``old_logp`` (the trainer then skips the scoring pass that would compute it); ``whole_groups=True`` for
objectives that weigh samples within their group (every micro-batch must hold whole groups); ``phases=P`` for
objectives whose update runs ``P`` times over the batch, one phase after the other (the batch's ``phase``, Lopti
[219]); ``aggregation=mode`` for objectives whose published form needs one aggregation mode (e.g.
``seq_mean_token_mean`` for one loss per sample written on its actions): ``algorithm.aggregation`` defaults to it, and
another mode is refused at config load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor

from genalign.algorithms.options import accepted_hyperparameters, check_hyperparameters
from genalign.algorithms.policy_loss import check_objective_hyperparameters
from genalign.registry import Registry

Objective = Callable[..., tuple[Tensor, dict[str, Tensor]]]

#: name -> ``fn(score: ScoreOutput, advantages, batch: StepBatch, **hp) -> (loss [n, T], metrics)``
OBJECTIVES: Registry[Objective] = Registry("objective", catalogue="genalign.experimental.objectives")


def objective_hyperparameters(name: str, *, ratio_level: str, clip: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of objective ``name``: ``args`` plus, for ratio objectives, the chosen ratio level and
    clip form (a ratio objective's own keywords, e.g. Lopti's ``threshold``, pass through; the others must belong to
    the level or the clip form). Validates them (unknown names and keywords raise with a did-you-mean hint)."""
    if OBJECTIVES.meta(name).get("ratio", False):
        own = set(accepted_hyperparameters(OBJECTIVES, name)) - {"ratio_level", "clip"}
        check_objective_hyperparameters(ratio_level, clip, {k: v for k, v in args.items() if k not in own})
        return {"ratio_level": ratio_level, "clip": clip, **args}
    check_hyperparameters(OBJECTIVES, name, args)
    return dict(args)
