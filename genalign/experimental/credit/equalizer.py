"""SAGE-GRPO [76] gradient-norm equaliser: per-timestep weights that give every trained denoising step the same
expected policy-gradient magnitude. The action axis ``T`` is the denoising steps."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def equalizer_weights(advantages: Tensor, step_std: Tensor, trained: Tensor, *, max_weight: float) -> Tensor:
    """``[T]`` weights ``w_t = mean_{t'} n_{t'} / n_t`` clipped to ``[1/max_weight, max_weight]``, where
    ``n_t = mean_i |A_it| / std_it`` over the trained samples of step ``t`` is the predicted gradient scale of the step;
    1 on steps no sample trains.

    Args:
        advantages: ``[N, T]``; step_std: ``[N, T]`` transition std (0 on deterministic steps); trained: ``[N, T]`` bool.
    """
    active = trained & (step_std > 0)  # [N, T]
    scale = torch.where(active, advantages.abs() / step_std.clamp_min(1e-12), 0.0)  # [N, T]
    count = active.float().sum(0)  # [T]
    norm = scale.sum(0) / count.clamp_min(1.0)  # [T]: n_t
    used = (count > 0) & (norm > 0)  # [T]
    if not bool(used.any()):
        return torch.ones_like(norm)
    target = norm[used].mean()
    weights = torch.where(used, target / norm.clamp_min(1e-30), 1.0)  # [T]
    return weights.clamp(1.0 / max_weight, max_weight)


@CREDIT_RULES.register(
    "gradient_norm_equalizer",
    needs=("step_std",),
    formula="n_t = mean_i |A_it| / σ_it; w_t = clip(mean_t' n_t' / n_t, 1/w_max, w_max); A_it ← w_t · A_it",
    source="[76] SAGE-GRPO",
    summary="Per-timestep weights that equalise the predicted policy-gradient norm of every trained denoising step.",
)
def gradient_norm_equalizer(advantages: Tensor, batch: StepBatch, *, max_weight: float = 5.0) -> Tensor:
    """SAGE-GRPO [76] gradient-norm equaliser across timesteps.

    The gradient of a Gaussian step log-probability with respect to the transition mean is ``(x' − μ) / σ² = ε / σ``,
    so a step's contribution ``A · ∇ log p`` scales as ``|A| / σ``: low-noise (late) steps get large, noisy gradients
    and dominate the update. The rule measures ``n_t = mean_i |A_it| / σ_it`` over the batch at every timestep and
    rescales step ``t`` by ``mean_t' n_t' / n_t``, so every trained timestep contributes the same expected gradient
    norm; the advantage signs and the order of samples within a step are unchanged.

    Reading chosen: the abstract names "a gradient norm equalizer to stabilize ... updates across timesteps"; genalign
    equalises the predicted norm ``|A| / σ`` from the declared step noise instead of measuring per-step gradients (one
    backward pass per step), and treats the velocity-to-mean Jacobian as equal across steps. With per-sample advantages
    (``|A_it|`` equal along ``t``) the weights are proportional to ``σ_t`` (TempFlow's noise-aware weights, but
    normalised over the batch); after per-step credit (``vgpo_values``, ``dense_step_gains``) they also undo the
    spread of advantage magnitudes across steps. ``max_weight = 5`` is genalign's default.

    Args:
        advantages: ``[N, T]`` incoming advantages.
        batch: reads ``step_std`` ``[N, T]`` and ``mask``.
        max_weight: bound on each weight and its inverse (``>= 1``).
    """
    if not max_weight >= 1:
        raise ValueError(f"gradient_norm_equalizer: max_weight={max_weight!r} must be >= 1 (5 by default).")
    step_std = batch.require("step_std", "credit rule 'gradient_norm_equalizer'").float().cpu()
    trained = batch.mask.cpu() > 0  # [N, T]
    step_std = step_std.expand(trained.shape)
    weights = equalizer_weights(advantages.detach().float().cpu(), step_std, trained, max_weight=max_weight)  # [T]
    return advantages * weights.to(device=advantages.device, dtype=advantages.dtype)[None, :]
