"""A penalty in place of the clip: Simple Policy Optimization (SPO [123]).

PPO's clip zeroes the gradient of an action whose ratio left the trust region, so nothing pulls it back; SPO keeps
every gradient and adds a quadratic penalty on the ratio's distance from 1 whose optimum is the edge of the trust
region, so the ratio is drawn back towards ``1 + sign(A)·ε`` from either side.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.clip_forms.base import CLIP_FORMS, ClippedLogRatio

#: the log-ratio is clamped to this range before ``exp`` (the penalty's gradient grows with ρ²: an exploding ratio
#: must not turn into ``inf``)
MAX_LOG_RATIO = 20.0


def spo_gradient_scale(ratio: Tensor, advantages: Tensor, eps: float) -> Tensor:
    """``[N, T]`` the factor ``w = 1 − sign(A)·(ρ − 1)/ε`` by which SPO's objective scales the plain importance-weighted
    gradient: ``∇[ρA − |A|/(2ε)·(ρ − 1)²] = ρ·(A − |A|(ρ − 1)/ε)·∇logπθ = w·ρA·∇logπθ`` (``ratio``, ``advantages``
    ``[N, T]``). ``w = 1`` at ``ρ = 1``, ``w = 0`` at the trust-region edge ``ρ = 1 + sign(A)·ε``, negative beyond."""
    return 1.0 - torch.sign(advantages) * (ratio - 1.0) / eps


@CLIP_FORMS.register(
    "spo",
    formula="surrogate ρA − |A|/(2ε)·(ρ − 1)² (no clip); as a log-weight: ℓ̃ = sg(ℓ) + sg(w)·(ℓ − sg ℓ), "
    "w = 1 − sign(A)(ρ − 1)/ε (value ρ, gradient exactly SPO's)",
    source="[123] SPO (Simple Policy Optimization, the paper's objective)",
    summary="A quadratic penalty keeps the ratio in the trust region: gradients are never zeroed, and a ratio past "
    "1 + sign(A)·ε is pulled back instead of merely stopped.",
)
def spo_penalty(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps: float = 0.2,
) -> ClippedLogRatio:
    """Simple Policy Optimization [123]: the per-action objective ``ρA − |A|/(2ε)·(ρ − 1)²`` replaces PPO's
    ``min(ρA, clip(ρ)A)``. For ``A > 0`` it is maximal at ``ρ = 1 + ε`` and for ``A < 0`` at ``ρ = 1 − ε``, so its
    gradient pushes the ratio towards the trust region's edge from inside and back to it from outside, where PPO's
    gradient is zero and a ratio can drift on through other actions' updates.

    A clip form hands the ratio objective an effective log-weight ``ℓ̃`` whose surrogate is ``A·exp(ℓ̃)``; SPO's
    objective can be negative, so it has no such log-weight. ``ℓ̃ = sg(ℓ) + sg(w)·(ℓ − sg ℓ)`` with
    :func:`spo_gradient_scale` ``w`` has the value ``ℓ`` and the gradient ``w·∇ℓ``, hence ``∇(A·exp ℓ̃) = w·ρA·∇logπθ``,
    exactly SPO's gradient: training follows SPO, while the logged loss value is the unpenalised ``−ρA`` (equal to
    SPO's ``−A`` at the first step on a batch, where ``ρ = 1``). ``ℓ`` is clamped to ``±20`` before ``exp``.

    ``clipped_high`` / ``clipped_low`` flag the actions beyond the trust region's edge (``w < 0``: the penalty pulls
    them back), for ``A > 0`` and ``A < 0`` respectively.

    Args:
        log_ratio: ``[N, T]`` ``ℓ = logπθ − logπold`` at the chosen level.
        advantages: ``[N, T]``.
        batch: unused.
        eps: ``ε > 0``, the trust-region half-width of the ratio (SPO's ε, PPO's clip range).
    """
    if not eps > 0:
        raise ValueError(f"eps must be > 0 (the trust-region half-width of the ratio, e.g. 0.2), got {eps!r}")
    bounded = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # [N, T]
    scale = spo_gradient_scale(bounded.detach().exp(), advantages, eps)  # [N, T] w
    log_weight = bounded.detach() + scale.detach() * (bounded - bounded.detach())  # [N, T] value ℓ, gradient w·∇ℓ
    beyond = scale < 0  # [N, T]
    return ClippedLogRatio(log_weight, beyond & (advantages < 0), beyond & (advantages > 0))
