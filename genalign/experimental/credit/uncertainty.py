"""Uncertainty credit whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.uncertainty import batch_quantile
from genalign.algorithms.signals import declare_signal

declare_signal("teacher_logp", ("N", "T"), "rollout",
               "Log-probability of each action under the same model given privileged information (the row's "
               "reference answer) in the prompt.", source="[132] RLSD")  # fmt: skip


@CREDIT_RULES.register(
    "entropy_gated",
    needs=("entropy",),
    formula="w_it = 1 if H_it ≥ τ else w_low, τ = quantile_q(H over the batch's valid actions) (or a fixed τ); "
    "A_it = A_it·w_it",
    source="[84] EGSPO (entropy-gated stage only)",
    summary="Full updates for high-entropy tokens, attenuated updates (same advantage sign) for low-entropy ones.",
)
def entropy_gated(
    advantages: Tensor,
    batch: StepBatch,
    *,
    quantile: float = 0.8,
    threshold: float | None = None,
    low_weight: float = 0.5,
) -> Tensor:
    """Entropy-gated gradient allocation of EGSPO [84]: high-entropy tokens get the full PPO update (exploration),
    low-entropy tokens an attenuated one (less variance, preserved knowledge); both keep the advantage's sign, so wrong
    trajectories are always pushed down.

    Reading chosen: the gate is the batch's ``quantile`` of token entropy (0.8: the top 20 % are "high entropy", the
    forking-token share of [200]) unless a fixed ``threshold`` is given, and attenuation multiplies the advantage by
    ``low_weight``. EGSPO's SFT warm-up stage and its sample-level mixing with expert data are not part of this rule.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``entropy`` and ``mask``.
        quantile: in ``[0, 1]``, used when ``threshold`` is None.
        threshold: a fixed entropy gate (nats).
        low_weight: attenuation in ``[0, 1]``.
    Returns:
        ``[N, T]`` advantages.
    """
    if not 0 <= quantile <= 1 or not 0 <= low_weight <= 1:
        raise ValueError(f"need quantile and low_weight in [0, 1], got {quantile!r}, {low_weight!r}")
    entropy = batch.require("entropy", "entropy_gated").detach().to(advantages.device)
    valid = batch.mask.to(advantages.device) > 0
    gate = torch.as_tensor(threshold) if threshold is not None else batch_quantile(entropy, valid, quantile)
    weights = torch.where(entropy >= gate.to(entropy.device), 1.0, low_weight)  # [N, T]
    return advantages * torch.where(valid, weights, 1.0).to(advantages.dtype)


@CREDIT_RULES.register(
    "self_distill_magnitude",
    needs=("teacher_logp", "behaviour_logp"),
    formula="δ_it = log π_teacher(o_t | x, answer, o_<t) − log π(o_t | x, o_<t); w_it = clamp(e^{sign(A_i)·δ_it}, "
    "1/w_max, w_max), normalised to mean 1 over the response; A_it = A_it·w_it",
    source="[132] RLSD (self-teacher with the reference answer; magnitude from the teacher, sign from the reward)",
    summary="Token magnitudes from the policy difference to a self-teacher that sees the reference answer; the "
    "reward still decides the direction.",
)
def self_distill_magnitude(
    advantages: Tensor, batch: StepBatch, *, max_weight: float = 3.0, normalize: bool = True
) -> Tensor:
    """RLVR with Self-Distillation [132]: the same model, given the reference answer in its prompt, is a privileged
    teacher (``teacher_logp``, scored at rollout time); its token-level difference to the sampling policy sets
    how much each token's update weighs, while the verifiable reward (the sign of the sample advantage) sets the
    direction, so the teacher's leaked information never decides which way a token moves.

    Reading chosen: the magnitude is ``exp(sign(A_i)·δ_t)`` (the teacher-to-student probability ratio for a correct
    response, its inverse for a wrong one: tokens the informed teacher prefers carry more of a success, tokens it
    rejects more of a failure), clamped to ``[1/w_max, w_max]`` and, with ``normalize``, rescaled to mean 1 over the
    response so the response's total credit stays the reward's.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``teacher_logp``, ``behaviour_logp``, ``sample_advantages`` (sign), ``mask``.
        max_weight: ``w_max >= 1``.
        normalize: rescale each response's weights to mean 1 over its valid actions.
    Returns:
        ``[N, T]`` ``advantages · w``.
    """
    if max_weight < 1:
        raise ValueError(f"max_weight must be >= 1, got {max_weight!r}")
    device = advantages.device
    teacher = batch.require("teacher_logp", "credit rule 'self_distill_magnitude'").to(device).float()
    student = batch.require("behaviour_logp", "self_distill_magnitude").detach().to(device).float()
    valid = batch.mask.to(device) > 0
    sign = torch.sign(batch["sample_advantages"].to(device).float())[:, None]  # [N, 1]
    weights = torch.exp(sign * (teacher - student)).clamp(1.0 / max_weight, max_weight)  # [N, T]
    weights = torch.where(valid, weights, 0.0)
    if normalize:
        mean = weights.sum(1, keepdim=True) / valid.sum(1, keepdim=True).clamp_min(1)
        weights = weights / mean.clamp_min(1e-12)
    return advantages * torch.where(valid, weights, 1.0).to(advantages.dtype)
