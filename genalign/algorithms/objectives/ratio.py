"""The GRPO family's objective: an importance-ratio level × a clip form (:func:`genalign.algorithms.policy_loss`)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.objectives.base import OBJECTIVES
from genalign.algorithms.policy_loss import bind_policy_loss
from genalign.algorithms.scores import ScoreOutput


class ClippedRatio:
    """The bound form of ``clipped_ratio``: the ratio level, the clip form and their keywords validated once."""

    def __init__(self, *, ratio_level: str = "token", clip: str = "ppo", **hp: Any) -> None:
        self.loss = bind_policy_loss(ratio_level, clip, **hp)

    def __call__(self, score: ScoreOutput, advantages: Tensor, batch: StepBatch) -> tuple[Tensor, dict[str, Tensor]]:
        old_logp = require(batch, "old_logp", "objective 'clipped_ratio'")
        mask = require(batch, "mask", "objective 'clipped_ratio'")
        return self.loss(score.logp.float(), old_logp, advantages, mask, batch)


@OBJECTIVES.register(
    "clipped_ratio",
    group_free=True,
    bind=ClippedRatio,
    binding="keywords",  # the bound form only splits the keywords between the ratio level and the clip form
    ratio=True,
    formula="L_it = −A_it·exp(ℓ̃_it), ℓ̃ = clip form (ratio level (logπθ − logπ_old))",
    source="formulas.md §2 (PPO / GRPO [319]; levels and clip forms in their own tables)",
    summary="Ratio level × clip form: GRPO, DAPO, GSPO, GMPO, CISPO, SAPO and the trust-region catalogue.",
)
def clipped_ratio(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    ratio_level: str = "token",
    clip: str = "ppo",
    **hp: Any,
) -> tuple[Tensor, dict[str, Tensor]]:
    """:func:`~genalign.algorithms.policy_loss` on ``score.logp`` against the batch's ``old_logp``; ``hp`` are the
    keywords of the ratio level and of the clip form (``eps_low``, ``eps_high``, ...)."""
    return ClippedRatio(ratio_level=ratio_level, clip=clip, **hp)(score, advantages, batch)
