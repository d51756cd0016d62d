"""Adaptive, asymmetric and soft trust regions (method catalogue): entropy- and probability-adaptive bounds, elastic
and asymmetric importance-sampling clips, unbounded positive ratios, log-fidelity and unconditional clipping."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.clip_forms.base import (
    CLIP_FORMS,
    ClippedLogRatio,
    log_bounds,
)

# ------------------------------------------------------------------------------------------------- adaptive bounds


# -------------------------------------------------------------------------------------------- asymmetric and soft


@CLIP_FORMS.register(
    "unbounded_positive",
    formula="A>0: ℓ̃ = ℓ − sg(ℓ) (ratio πθ/sg(πθ), unclipped); A≤0: PPO floor at 1−ε_low",
    source="[223] UP",
    summary="Unbounded positive updates anchored by stop-gradient; negative updates keep PPO clipping.",
)
def unbounded_positive_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.2,
) -> ClippedLogRatio:
    """UP [223]: a positive-advantage action uses the ratio ``πθ / sg(πθ)`` (value 1, gradient ``∇logπθ``), anchored
    to the current policy and never clipped; negative-advantage actions keep PPO's floor at ``1 − ε_low``. Works at
    every ratio level (token, sequence, ...).

    Args:
        log_ratio, advantages: ``[N, T]``.
        batch: unused.
        eps_low: PPO lower clip range for ``A < 0``.
    """
    low, _ = log_bounds(eps_low, None)
    anchored = log_ratio - log_ratio.detach()  # [N, T]
    clipped_low = (advantages < 0) & (log_ratio < low)  # [N, T]
    log_weight = torch.where(advantages > 0, anchored, torch.where(clipped_low, low, log_ratio))
    return ClippedLogRatio(log_weight, clipped_low, torch.zeros_like(clipped_low))
