"""SAGE-GRPO's manifold-aware SDE [76], whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.schedulers.sde_dynamics import SDE_DYNAMICS, _log_integrated_terms, _per_sample


@SDE_DYNAMICS.register(
    "manifold_sde",
    source="[76] SAGE-GRPO",
    formula="std² = a² [ln((1-σ')/(1-σ)) - (σ-σ')], mean = x + dt v - a²/2 ln((1-σ')/(1-σ)) (x + (1-σ) v)",
    summary="Flow-GRPO's SDE with its diffusion integrated exactly over the step (logarithmic correction): less "
    "noise than Euler-Maruyama where g² = a² σ/(1-σ) curves steeply.",
)
def manifold_sde_step(
    sample: Tensor,
    velocity: Tensor,
    sigma: Tensor,
    sigma_next: Tensor,
    *,
    noise_level: float | Tensor,
    sigma_max: float,
) -> tuple[Tensor, Tensor]:
    """SAGE-GRPO [76] manifold-aware SDE with a logarithmic curvature correction.

    Reading chosen: the abstract names "a precise manifold-aware SDE with a logarithmic curvature correction"; genalign
    reads it as Flow-GRPO's marginal-preserving SDE (:func:`flow_sde_step`, ``g² = a² σ / (1 − σ)``) whose diffusion
    is integrated *exactly* over the step instead of frozen at its left end (Euler–Maruyama). ``g²`` is convex in
    ``σ`` and steepest near pure noise, so the frozen value over-injects noise there (the excess noise the paper blames
    for leaving the data manifold); the exact integrals carry a logarithm::

        ∫_{σ'}^{σ} g² ds      = a² [ln((1 − σ')/(1 − σ)) − (σ − σ')]          (variance of the step)
        ∫_{σ'}^{σ} g²/(2s) ds = a²/2 · ln((1 − σ')/(1 − σ))                   (coefficient of the score term)

    with the velocity and the predicted noise ``x̂1 = x + (1 − σ) v`` held at the step start, as every dynamics here
    does: ``mean = x + dt v − a²/2 · ln((1 − σ')/(1 − σ)) · x̂1``, ``std = a · sqrt(I_var)``. To first order in ``dt``
    both integrals are Flow-GRPO's terms (``g² (−dt)`` and ``g² dt / (2σ)``), so small steps agree with ``flow_sde``;
    the step from ``σ = 1`` uses Flow-GRPO's cap (``1 − s`` held at ``1 − sigma_max`` above ``sigma_max``), where the
    integrals are polynomial. ``noise_level = 0`` gives the Euler step. The paper's exact constants are not in the
    abstract; ``a`` keeps Flow-GRPO's meaning (0.7 by default).
    """
    s = _per_sample(sigma, sample)  # [B, 1, ...]
    s_next = _per_sample(sigma_next, sample)  # [B, 1, ...]
    integral_var, integral_drift = _log_integrated_terms(s, s_next, sigma_max)  # [B, 1, ...]
    a = _per_sample(noise_level, sample)  # [B, 1, ...]
    predicted_noise = sample + (1 - s) * velocity  # [B, ...]
    mean = sample + (s_next - s) * velocity - 0.5 * a**2 * integral_drift * predicted_noise  # [B, ...]
    return mean, a * torch.sqrt(integral_var.clamp_min(0))
