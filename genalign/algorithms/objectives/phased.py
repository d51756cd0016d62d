"""Objectives whose update runs in phases over the same batch (registry meta ``phases``): Lopti's separate update of
low-probability tokens [219] (registered in :data:`OBJECTIVES`).

The trainer runs the whole epochs × minibatches schedule once per phase, against the same old log-probs, and passes
the phase in the batch's ``phase`` (:func:`genalign.trainer.update.run_update`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.objectives.base import OBJECTIVES
from genalign.algorithms.policy_loss import bind_policy_loss
from genalign.algorithms.scores import ScoreOutput


def phase_tokens(old_logp: Tensor, mask: Tensor, phase: int, *, threshold: float, low_first: bool) -> Tensor:
    """``[N, T]`` bool: the actions trained in ``phase`` (0 or 1): those with ``π_old < η`` in the low-probability
    phase (the first when ``low_first``), the others in the other phase.

    Args:
        old_logp: ``[N, T]`` log-probs of the old policy.
        mask: ``[N, T]`` 1 where an action is trained.
    """
    if phase not in (0, 1):
        raise ValueError(f"lopti has two phases (0: first, 1: second), got phase={phase!r}")
    low = old_logp < math.log(threshold)  # [N, T]
    in_low_phase = phase == (0 if low_first else 1)
    return (mask > 0) & (low if in_low_phase else ~low)


class Lopti:
    """The bound form of ``lopti``: the threshold, the ratio level, the clip form and their keywords validated once."""

    def __init__(
        self,
        *,
        ratio_level: str = "token",
        clip: str = "ppo",
        threshold: float = 0.5,
        low_first: bool = True,
        **hp: Any,
    ) -> None:
        if not 0 < threshold < 1:
            raise ValueError(f"threshold must be in (0, 1) (a probability), got {threshold!r}")
        self.threshold, self.low_first = threshold, low_first
        self.loss = bind_policy_loss(ratio_level, clip, **hp)

    def __call__(self, score: ScoreOutput, advantages: Tensor, batch: StepBatch) -> tuple[Tensor, dict[str, Tensor]]:
        old_logp = require(batch, "old_logp", "objective 'lopti'")
        mask = require(batch, "mask", "objective 'lopti'")
        phase = require(batch, "phase", "objective 'lopti'")
        loss, metrics = self.loss(score.logp.float(), old_logp, advantages, mask, batch)
        trained = phase_tokens(old_logp, mask, int(phase), threshold=self.threshold, low_first=self.low_first)
        valid = (mask > 0).sum().clamp_min(1)
        metrics = {**metrics, "phase_token_frac": trained.sum().to(loss.dtype) / valid}
        return torch.where(trained, loss, 0.0), metrics  # [n, T]


@OBJECTIVES.register(
    "lopti",
    ratio=True,
    bind=Lopti,
    phases=2,
    formula="phase 1: L_it = clipped-ratio loss on {π_old(o_it) < η}, 0 elsewhere; optimizer steps; phase 2: the same "
    "on {π_old >= η}, against the same π_old",
    source="[219] Lopti (AR-Lopti code: seperate_updating, seperate_prob η = 0.5, low-probability tokens first); "
    "differs: a KL term in the loss is not masked per phase",
    summary="Low-Probability Token Isolation: update the low-probability tokens first, then the high-probability "
    "ones, so the large gradients of the former stop crowding out the latter.",
)
def lopti(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    ratio_level: str = "token",
    clip: str = "ppo",
    threshold: float = 0.5,
    low_first: bool = True,
    **hp: Any,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Low-Probability Token Isolation (Lopti) of [219].

    The rollout batch is updated twice: first with the loss restricted to the tokens whose old probability is below
    ``η`` (the low-probability tokens, whose gradients are large), then, from the parameters that update produced,
    with the loss restricted to the other tokens. Both phases use the same old log-probs, so the second phase's
    ratios carry the first phase's change. Each phase is the ratio objective (``ratio_level`` × ``clip`` with their
    keywords in ``hp``, as ``clipped_ratio``) with the other phase's tokens given loss 0; they stay in the
    aggregation's denominators, as in the published code (which zeroes their advantages). Combine with the credit
    rule ``probability_damping`` for AR + Lopti (the paper's best setting, ``α = 0.3``).

    Where genalign differs from the published code: a KL term in the loss (``kl_coef > 0``, placement ``loss``) is
    added by the trainer to every token in both phases (the code masks it to the phase's tokens); the learning-rate
    schedule counts both phases' optimizer steps.

    Args:
        score: ``logp`` ``[n, T]`` of the micro-batch (with grad).
        advantages: ``[n]`` or ``[n, T]``.
        batch: needs ``old_logp``, ``mask`` and ``phase`` (set by the trainer).
        ratio_level, clip: as for ``clipped_ratio``.
        threshold: ``η`` in ``(0, 1)``.
        low_first: update the low-probability tokens first (the published default; ``False``: high first).
        **hp: keywords of the ratio level and of the clip form.
    Returns:
        ``(loss [n, T], metrics)``; ``metrics["phase_token_frac"]`` is the fraction of valid actions in this phase.
    """
    bound = Lopti(ratio_level=ratio_level, clip=clip, threshold=threshold, low_first=low_first, **hp)
    return bound(score, advantages, batch)
