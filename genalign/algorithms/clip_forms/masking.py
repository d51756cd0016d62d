"""Masking rules and off-policy corrections (method catalogue): prefix divergence and stale-sample vetoes, IcePop and
truncated importance sampling for training/inference mismatch, the off-policy clip and the entropy-split clip.
"Masked" actions keep their value and lose their gradient (``ℓ̃ = sg(ℓ)``), except IcePop's, which contribute
nothing (``ℓ̃ = −inf``)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.clip_forms.base import (
    CLIP_FORMS,
    ClippedLogRatio,
    check_eps,
    log_bounds,
    ppo_with_bounds,
)


# ------------------------------------------------------------------------------------------------------ masking rules
def prefix_before(flags: Tensor) -> Tensor:
    """``[N, T]`` bool: some earlier action of the row is flagged (strictly before ``t``)."""
    counts = torch.cumsum(flags.to(torch.long), 1)  # [N, T]
    return (counts - flags.to(torch.long)) > 0


# ------------------------------------------------------------------------------- behaviour (rollout engine) mismatch
def engine_mismatch(batch: StepBatch | None, option: str) -> Tensor:
    """``log k = logπold(train) − logπ(rollout engine)`` ``[N, T]``."""
    behaviour_logp = require(batch, "behaviour_logp", option)
    old_logp = require(batch, "old_logp", option)
    return old_logp - behaviour_logp


@CLIP_FORMS.register(
    "truncated_is",
    formula="PPO(ℓ) · min(π_train/π_infer, C) (constant weight)",
    source="[318] (training/inference mismatch); truncated importance sampling",
    summary="PPO surrogate times a truncated importance weight correcting for the rollout engine.",
)
def truncated_is_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    truncation: float = 2.0,
) -> ClippedLogRatio:
    """Truncated importance sampling for rollouts produced by a different engine (the mismatch studied by [318]):
    the PPO surrogate of each action is multiplied by the constant ``min(k, C)``,
    ``k = π_train(a)/π_infer(a) = exp(old_logp − behaviour_logp)``.

    Args:
        log_ratio, advantages: ``[N, T]``.
        batch: ``behaviour_logp`` ``[N, T]`` is required.
        eps_low, eps_high: PPO clip ranges.
        truncation: ``C >= 1``.
    """
    check_eps(eps_low, eps_high)
    if not truncation >= 1:
        raise ValueError(f"truncation must be >= 1, got {truncation!r}")
    log_k = engine_mismatch(batch, "clip form 'truncated_is'").clamp(max=math.log(truncation))  # [N, T]
    low, high = log_bounds(eps_low, eps_high)
    ppo = ppo_with_bounds(log_ratio, advantages, torch.full_like(log_ratio, low), torch.full_like(log_ratio, high))
    return ClippedLogRatio(ppo.log_weight + log_k, ppo.clipped_low, ppo.clipped_high)
