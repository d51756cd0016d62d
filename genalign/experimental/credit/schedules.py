"""Credit allocation scheduled over training: a token-selection criterion that holds early and fades into uniform
optimisation (rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.vision import top_fraction_per_row


def attenuation(progress: float, *, until: float, shape: Literal["linear", "cosine"]) -> float:
    """How far the schedule has moved from targeted (0) to uniform (1) optimisation at training ``progress``:
    ``s = min(progress / until, 1)``, or ``(1 − cos(π·s)) / 2`` for ``shape="cosine"``."""
    fraction = min(float(progress) / until, 1.0)
    return fraction if shape == "linear" else 0.5 * (1.0 - math.cos(math.pi * fraction))


@CREDIT_RULES.register(
    "scheduled_token_focus",
    needs=("entropy",),
    formula="targeted_it = H_it in the top (1 − q) of trajectory i's entropies (trajectory percentile q); "
    "w_it = 1 if targeted else w₀ + (1 − w₀)·s(progress), s rising from 0 to 1 at progress = until",
    source="[260] temporal scheduling of credit allocation",
    summary="Train the high-entropy tokens of each trajectory first, then let the other tokens back in over training "
    "until the update is uniform.",
)
def scheduled_token_focus(
    advantages: Tensor,
    batch: StepBatch,
    *,
    percentile: float = 0.8,
    start_weight: float = 0.0,
    until: float = 0.5,
    shape: Literal["linear", "cosine"] = "linear",
) -> Tensor:
    """Temporal scheduling of credit allocation [260]: *when* a learning signal is given matters as much as *where*.

    Targeted tokens are those above the ``percentile`` of their own trajectory's entropies (a trajectory percentile:
    the top ``1 − q`` share of each sequence's valid actions, at least one per sequence); they keep their advantage
    throughout. The other tokens start at weight ``w₀`` and are attenuated back in as training progresses: ``w =
    w₀ + (1 − w₀)·s``, with ``s`` moving from 0 to 1 between progress 0 and ``until`` (linearly or along a half
    cosine), after which the update is ordinary uniform optimisation.

    Reading chosen: the abstract names trajectory percentiles of "policy behaviours" and a schedule from targeted
    tokens to general optimisation; we take the token entropy as the behaviour (high-entropy forking tokens),
    ``w₀ = 0`` (targeted tokens only at the start) and a schedule that ends halfway through training.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``entropy`` ``[N, T]`` (scoring pass before the update) and ``progress``.
        percentile: ``q`` in ``[0, 1)``: the share of each trajectory's tokens below the targeted ones.
        start_weight: ``w₀`` in ``[0, 1]``, the other tokens' weight at the start.
        until: progress in ``(0, 1]`` at which every token has weight 1.
        shape: ``"linear"`` or ``"cosine"`` attenuation.
    Returns:
        ``[N, T]`` ``advantages · w`` (unchanged on padding).
    """
    if not (0 <= percentile < 1 and 0 <= start_weight <= 1 and 0 < until <= 1):
        raise ValueError(
            f"scheduled_token_focus needs 0 <= percentile < 1, 0 <= start_weight <= 1 and 0 < until <= 1, got "
            f"percentile={percentile!r}, start_weight={start_weight!r}, until={until!r}"
        )
    if shape not in ("linear", "cosine"):
        raise ValueError(f"shape must be 'linear' or 'cosine', got {shape!r}")
    progress = batch.require("progress", "scheduled_token_focus")  # in [0, 1] (checked by its declaration)
    device = advantages.device
    entropy = batch.require("entropy", "scheduled_token_focus").detach().float().to(device)  # [N, T]
    valid = batch.mask.to(device) > 0  # [N, T]
    targeted = top_fraction_per_row(entropy, valid, 1.0 - percentile)  # [N, T]
    others = start_weight + (1.0 - start_weight) * attenuation(progress, until=until, shape=shape)
    weights = torch.where(targeted | ~valid, 1.0, others)  # [N, T]
    return advantages * weights.to(advantages.dtype)  # [N, T]
