"""The GRPO family's objective: an importance-ratio level × a clip form (:func:`genalign.algorithms.policy_loss`)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from genalign.algorithms.context import ObjectiveContext, require
from genalign.algorithms.objectives.base import OBJECTIVES
from genalign.algorithms.policy_loss import policy_loss
from genalign.algorithms.scores import ScoreOutput


@OBJECTIVES.register(
    "clipped_ratio",
    ratio=True,
    formula="L_it = −A_it·exp(ℓ̃_it), ℓ̃ = clip form (ratio level (logπθ − logπ_old))",
    source="formulas.md §2 (PPO / GRPO [319]; levels and clip forms in their own tables)",
    summary="Ratio level × clip form: GRPO, DAPO, GSPO, GMPO, CISPO, SAPO and the trust-region catalogue.",
)
def clipped_ratio(
    score: ScoreOutput,
    advantages: Tensor,
    context: ObjectiveContext,
    *,
    ratio_level: str = "token",
    clip: str = "ppo",
    **hp: Any,
) -> tuple[Tensor, dict[str, Tensor]]:
    """:func:`~genalign.algorithms.policy_loss` on ``score.logp`` against ``context.old_logp``; ``hp`` are the
    keywords of the ratio level and of the clip form (``eps_low``, ``eps_high``, ...)."""
    old_logp = require(context, "old_logp", "objective 'clipped_ratio'")
    mask = require(context, "mask", "objective 'clipped_ratio'")
    return policy_loss(
        score.logp.float(), old_logp, advantages, mask, ratio_level=ratio_level, clip=clip, context=context, **hp
    )
