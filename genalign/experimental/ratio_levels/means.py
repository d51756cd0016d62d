"""Power-mean, hybrid and variance-based ratio levels (method catalogue): Hölder means with an annealed ``p`` (HölderPO
[55]), token/sequence hybrids and the Bernoulli-variance ratio."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.ratio_levels.base import (
    RATIO_LEVELS,
    ClipFn,
    LevelOutput,
    level_output,
    row_mean,
)


# ------------------------------------------------------------------------------------------------- sequence aggregates
@RATIO_LEVELS.register(
    "holder",
    formula="M_p = ((1/|o_i|) Σ_t ρ_it^p)^{1/p} (p→0: geometric mean), p = p₀ + (p₁ − p₀)·progress; clipped per "
    "sequence",
    source="[55] HölderPO",
    summary="Power (Hölder) mean of the token ratios as the sequence ratio, with an annealed p.",
)
def holder_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    holder_p: float = 1.0,
    holder_p_end: float | None = None,
) -> LevelOutput:
    """HölderPO [55]: the sequence ratio is the power mean ``M_p`` of its token ratios, computed in log space,
    ``log M_p = (logsumexp_t(p·ℓ_t) − log|o_i|) / p``; ``p = 0`` is the geometric mean (GSPO's ratio), ``p = 1`` the
    arithmetic mean, larger ``p`` concentrates the gradient on the largest ratios. Clipped once per sequence and
    placed on each action.

    Reading chosen: the standard power mean (the index marks it inferred); annealing is linear in training progress,
    ``p = holder_p + (holder_p_end − holder_p) · progress`` (the abstract says only "annealed").

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form (sequence-level bounds: use small eps as for GSPO).
        batch: ``progress`` is required when ``holder_p_end`` is set.
        holder_p: ``p`` (at the start of training when annealed); any real number.
        holder_p_end: ``p`` at the end of training, or None for a constant ``p``.
    """
    p = holder_p
    if holder_p_end is not None:
        progress = float(require(batch, "progress", "ratio level 'holder' with holder_p_end"))
        p = holder_p + (holder_p_end - holder_p) * progress
    count = mask.sum(1, keepdim=True)  # [N, 1]
    if p == 0:
        log_mean = row_mean(log_ratio, mask)  # [N, 1]
    else:
        empty = count == 0  # [N, 1]
        scaled = torch.where((mask > 0) | empty, p * log_ratio, -torch.inf)  # [N, T]
        log_mean = (torch.logsumexp(scaled, 1, keepdim=True) - count.clamp_min(1.0).log()) / p  # [N, 1]
        log_mean = torch.where(empty, 0.0, log_mean)
    sequence = log_mean.expand_as(log_ratio)  # [N, T]
    clipped = clip_fn(sequence, advantages)
    return level_output(advantages, clipped.log_weight, sequence, clipped)


@RATIO_LEVELS.register(
    "hybrid",
    formula="A·(α_t·clip(ρ_it) + (1−α_t)·clip(s_i)); α_t = mix_weight (average) or H_t/(H_t + mean_i H) (entropy)",
    source="[212] DHPO",
    summary="Mixes the token ratio and the sequence ratio, each clipped in its own trust region.",
)
def hybrid_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    mixing: Literal["average", "entropy"] = "average",
    mix_weight: float = 0.5,
) -> LevelOutput:
    """DHPO [212]: one surrogate mixing the token-level (GRPO) and sequence-level (GSPO) ratios, each clipped by the
    chosen clip form before mixing: ``A · (α_t · clip(ρ_t) + (1 − α_t) · clip(s_i))``.

    Reading chosen for "entropy-guided" mixing: ``α_t = H_t / (H_t + H̄_i)`` with ``H̄_i`` the sequence's mean
    entropy, so an action of average entropy mixes half/half and uncertain (forking) actions lean on their own token
    ratio. Note that one clip form (one ``eps``) serves both branches.

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form.
        batch: ``entropy`` is required by ``mixing="entropy"``.
        mixing: ``"average"`` (constant ``mix_weight``) or ``"entropy"``.
        mix_weight: weight ``α`` of the token branch for ``"average"``, in ``[0, 1]``.
    """
    if mixing not in ("average", "entropy"):
        raise ValueError(f"mixing must be 'average' or 'entropy', got {mixing!r}")
    if not 0 <= mix_weight <= 1:
        raise ValueError(f"mix_weight must be in [0, 1], got {mix_weight!r}")
    if mixing == "entropy":
        entropy = require(batch, "entropy", "ratio level 'hybrid' with mixing='entropy'")
        mean_entropy = row_mean(entropy, mask)  # [N, 1]
        alpha = torch.where(entropy + mean_entropy > 0, entropy / (entropy + mean_entropy).clamp_min(1e-12), 0.5)
    else:
        alpha = torch.full_like(log_ratio, mix_weight)  # [N, T]
    sequence = row_mean(log_ratio, mask).expand_as(log_ratio)  # [N, T]
    token, seq = clip_fn(log_ratio, advantages), clip_fn(sequence, advantages)
    weight = alpha * token.log_weight.exp() + (1.0 - alpha) * seq.log_weight.exp()  # [N, T]
    mixed_ratio = alpha * log_ratio.exp() + (1.0 - alpha) * sequence.exp()  # [N, T]
    return LevelOutput(
        surrogate=advantages * weight,
        ratio=mixed_ratio.detach(),
        clipped_low=token.clipped_low | seq.clipped_low,
        clipped_high=token.clipped_high | seq.clipped_high,
    )


# ----------------------------------------------------------------------------------------------------- variance-based
@RATIO_LEVELS.register(
    "bernoulli_variance",
    formula="ℓ̃_it = ℓ_it + sg[log(1−πθ) − log(1−πold)] (value π(1−π)/(πold(1−πold)), gradient per action); "
    "× sg[1/max(1, G·πold(o_i))] with occurrence_group_size=G",
    source="[59] ReCo",
    summary="Variance-based ratio that scales non-saturated actions up; optional occurrence-normalised responses.",
)
def bernoulli_variance_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    occurrence_group_size: int | None = None,
    max_prob: float = 1.0 - 1e-6,
) -> LevelOutput:
    """ReCo [59]: replace the token ratio ``ρ = πθ/πold`` by the ratio of the Bernoulli variances of the sampled
    action, ``v = πθ(1−πθ) / (πold(1−πold)) = ρ · (1−πθ)/(1−πold)``, which shrinks as an action saturates
    (``πθ → 1``) and keeps its scale where alternatives remain plausible. Response level: each response is divided by
    its expected number of occurrences in a group of ``G``, ``max(1, G·πold(o_i))``.

    Reading chosen: the abstract names "a variance-based ratio" and "expected occurrence" without formulas; genalign
    takes the Bernoulli variance of the sampled action, with the correction factor ``(1−πθ)/(1−πold)`` detached so
    that the gradient keeps the sign of ``∇logπθ`` (value ``v``, gradient ``v·∇logπθ``), and ``G·πold(o_i)`` (the
    expected count of an identical response among ``G`` samples) for the occurrence. The result is clipped per
    action by the chosen clip form.

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form.
        batch: ``old_logp`` (filled by ``policy_loss``).
        occurrence_group_size: ``G`` for the occurrence normalisation, or None to skip it.
        max_prob: probabilities are capped here before ``log(1 − π)`` (keeps it finite).
    """
    if not 0 < max_prob < 1:
        raise ValueError(f"max_prob must be in (0, 1), got {max_prob!r}")
    if occurrence_group_size is not None and occurrence_group_size < 1:
        raise ValueError(f"occurrence_group_size must be >= 1 or None, got {occurrence_group_size!r}")
    old_logp = require(batch, "old_logp", "ratio level 'bernoulli_variance'")
    log_cap = math.log(max_prob)
    new_logp = (old_logp + log_ratio).detach()  # [N, T]
    correction = torch.log1p(-new_logp.clamp(max=log_cap).exp()) - torch.log1p(-old_logp.clamp(max=log_cap).exp())
    variance_ratio = log_ratio + torch.where(mask > 0, correction, 0.0)  # [N, T]
    clipped = clip_fn(variance_ratio, advantages)
    log_weight = clipped.log_weight
    if occurrence_group_size is not None:
        sequence_logp = (old_logp * mask).sum(1, keepdim=True)  # [N, 1]
        expected = (math.log(occurrence_group_size) + sequence_logp).clamp_min(0.0)  # [N, 1] log max(1, G·π)
        log_weight = log_weight - expected
    return level_output(advantages, log_weight, variance_ratio, clipped)
