"""Credit rules that accompany sample-source rules: D³S's token-level down-sampling [27] and XRPO's novelty-aware
advantage sharpening [241] (rules of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

Both compute their weights once on the whole optimisation batch, before it is split into micro-batches.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from genalign.algorithms._groups import group_sum, make_groups
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.entropy_gates import top_by_score


def annealed_fraction(progress: float, start: float, relax_until: float) -> float:
    """D³S's dynamic down-sampling schedule: the kept fraction is ``start`` at progress 0 and rises linearly to 1 at
    ``relax_until`` (1 afterwards; ``relax_until = 0``: always 1). Shared by the sample and token levels."""
    if relax_until <= 0:
        return 1.0
    return start + (1.0 - start) * min(max(progress, 0.0) / relax_until, 1.0)


def check_schedule(start_fraction: float, relax_until: float) -> None:
    if not 0.0 < start_fraction <= 1.0:
        raise ValueError(f"start_fraction = {start_fraction!r} must be in (0, 1] (the fraction kept at the start)")
    if not 0.0 <= relax_until <= 1.0:
        raise ValueError(f"relax_until = {relax_until!r} must be in [0, 1] (a training progress)")


@CREDIT_RULES.register(
    "d3s_tokens",
    needs=("entropy",),
    formula="ρ = ρ₀ + (1−ρ₀)·min(progress/p_relax, 1); keep the top ⌈ρ·|valid|⌉ valid tokens of the batch by "
    "|A_it|·H_it; A_it ← A_it on kept tokens, 0 elsewhere",
    source="[27] D³S (token-level down-sampling with the dynamic schedule)",
    summary="Train only on the tokens where the policy is both uncertain and impactful (largest |advantage| × "
    "entropy), few early in training and all of them by the end of the schedule.",
)
def d3s_tokens(
    advantages: Tensor, batch: StepBatch, *, start_fraction: float = 0.5, relax_until: float = 0.75
) -> Tensor:
    """D³S [27], token level: keep the tokens with the largest ``|A_{i,t}|·H_{i,t}`` across the batch.

    The score of a valid action is the product of its (incoming) advantage magnitude and the policy entropy at it
    from the scoring pass before the update; the top ``⌈ρ·n_valid⌉`` of the batch keep their advantage, the others
    get 0 (they stay in the aggregation's normaliser: the update is the full one restricted to the selected tokens).
    ``ρ`` follows the dynamic schedule shared with the sample level (:func:`annealed_fraction`): aggressive at the
    start, every token from progress ``p_relax`` on. Reading chosen: selection (not soft weighting) over the whole
    batch ("across groups"); the linear schedule and its defaults are genalign's choices.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``entropy`` and ``progress``.
        start_fraction: ``ρ₀`` in ``(0, 1]``, the fraction of tokens kept at the start.
        relax_until: ``p_relax`` in ``[0, 1]``, the progress from which every token is kept.
    Returns:
        ``[N, T]`` advantages, 0 on the tokens not selected.
    """
    check_schedule(start_fraction, relax_until)
    entropy = batch.require("entropy", "d3s_tokens").detach()  # [N, T]
    progress = batch.require("progress", "d3s_tokens")
    fraction = annealed_fraction(progress, start_fraction, relax_until)
    valid = batch.mask > 0  # [N, T]
    if fraction >= 1.0:
        return advantages
    score = advantages.detach().abs().float() * entropy.float()  # [N, T]
    chosen = top_by_score(score, valid, fraction)  # [N, T] bool
    return advantages * chosen.to(advantages.dtype)


@CREDIT_RULES.register(
    "xrpo_novelty",
    needs=("behaviour_logp",),
    formula="s_i = exp(mean_t logπ_old(o_it)); ν_i = max(0, 1 − s_i/mean_G s); for A_i > 0: "
    "A_i ← A_i + min(λ·ν_i, κ·A_i) (a factor 1 + min(λν_i/A_i, κ) on every action); others unchanged",
    source="[241] XRPO (novelty-aware advantage sharpening)",
    summary="Amplify the advantage of correct responses the policy found unlikely (low sequence likelihood relative "
    "to their group), bounded to a fraction of the advantage, to push the policy's reach beyond sparse rewards.",
)
def xrpo_novelty(
    advantages: Tensor, batch: StepBatch, *, novelty_weight: float = 0.5, max_ratio: float = 0.5
) -> Tensor:
    """XRPO [241]: group-relative, novelty-aware advantage sharpening from sequence likelihoods.

    A response's likelihood is its geometric-mean token probability ``s_i = exp(mean_t log π_old(o_{i,t}))`` (length
    normalised, so long responses are not novel by length alone); its novelty is how far it falls below its group's
    mean, ``ν_i = max(0, 1 − s_i/mean_G s)``. A response with positive advantage gets the bonus ``min(λ·ν_i, κ·A_i)``
    (the cap keeps sharpening from overturning the group's ordering); negative and zero advantages are unchanged.
    The sample-level factor ``1 + bonus/A_i`` multiplies every action of the incoming advantages.

    Reading chosen: the abstract says the mechanism "leverages sequence likelihoods to amplify low-probability yet
    correct responses" and is group-relative, without the formula; the length-normalised likelihood, the ratio to the
    group mean, the additive clipped bonus and the defaults (``λ = 0.5``, ``κ = 0.5``) are genalign's choices.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``sample_advantages``, ``mask``, ``group_ids`` and ``behaviour_logp``.
        novelty_weight: ``λ >= 0``.
        max_ratio: ``κ >= 0``, the largest bonus as a fraction of the advantage.
    Returns:
        ``[N, T]`` sharpened advantages.
    """
    if not (novelty_weight >= 0 and max_ratio >= 0 and math.isfinite(novelty_weight + max_ratio)):
        raise ValueError(f"novelty_weight = {novelty_weight!r} and max_ratio = {max_ratio!r} must be finite and >= 0")
    logp = batch.require("behaviour_logp", "xrpo_novelty").detach().double()  # [N, T]
    mask = (batch.mask > 0).double()  # [N, T]
    likelihood = torch.exp((logp * mask).sum(1) / mask.sum(1).clamp_min(1.0))  # [N]
    groups = make_groups(batch.group_ids.to(logp.device), logp.shape[0], min_size=1)
    sums = group_sum(torch.stack([likelihood, torch.ones_like(likelihood)], 1), groups)  # [G, 2]
    group_mean = (sums[:, 0] / sums[:, 1])[groups.index]  # [N]
    novelty = (1.0 - likelihood / group_mean).clamp_min(0.0)  # [N]
    sample = batch["sample_advantages"].detach().double().to(logp.device)  # [N]
    positive = sample > 0
    bonus = torch.minimum(novelty_weight * novelty, max_ratio * sample)  # [N]
    factor = torch.where(positive, 1.0 + bonus / torch.where(positive, sample, 1.0), 1.0)  # [N]
    return advantages * factor.to(advantages.dtype)[:, None]
