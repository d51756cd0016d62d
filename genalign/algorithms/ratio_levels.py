"""More importance-ratio levels (method catalogue): sentence, prefix, power-mean, cumulative, minimum-prefix, hybrid
and variance-based ratios. Each composes with every clip form of :data:`CLIP_FORMS`.

Same contract as the levels in :mod:`genalign.algorithms.objectives`: ``fn(log_ratio [N, T], advantages [N, T],
mask [N, T], clip_fn, context, **hp) -> LevelOutput``; ``log_ratio`` ``ℓ = logπθ − logπold`` is 0 on padding; the
surrogate to maximise is ``A · exp(ℓ̃)`` per action. "Position" ``t`` counts the valid actions of a sequence (1-based),
so left padding or holes in the mask do not shift it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.context import ObjectiveContext, require
from genalign.algorithms.objectives import RATIO_LEVELS, ClipFn, LevelOutput


def _positions(mask: Tensor) -> Tensor:
    """``[N, T]`` 1-based index of each action among the valid actions of its row (padding: the last count, >= 1)."""
    return torch.cumsum(mask, 1).clamp_min(1.0)


def _row_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Masked mean over ``T``: ``[N, T] -> [N, 1]``."""
    return ((values * mask).sum(1) / mask.sum(1).clamp_min(1.0))[:, None]


def _output(advantages: Tensor, log_weight: Tensor, ratio_log: Tensor, clipped) -> LevelOutput:
    return LevelOutput(
        surrogate=advantages * log_weight.exp(),  # [N, T]
        ratio=ratio_log.detach().exp(),
        clipped_low=clipped.clipped_low,
        clipped_high=clipped.clipped_high,
    )


# ----------------------------------------------------------------------------------------------------------- sentence
def _segment_ids(mask: Tensor, context: ObjectiveContext, segment_length: int) -> Tensor:
    """``[N, T]`` long: ``context.segment_ids`` or consecutive windows of ``segment_length`` valid actions."""
    if context.segment_ids is not None:
        return context.segment_ids.to(torch.long)
    return ((_positions(mask) - 1.0) // segment_length).to(torch.long)  # [N, T]


def _segment_mean(values: Tensor, mask: Tensor, segments: Tensor) -> Tensor:
    """Masked mean of ``values`` over each (row, segment), broadcast back to ``[N, T]``."""
    n, t = values.shape
    starts = torch.cat([torch.zeros_like(segments[:, :1]), (segments.diff(dim=1) != 0).long()], 1)  # [N, T]
    offset = torch.cumsum(starts, 1)  # [N, T] sentences renumbered 0 .. T-1 per row
    key = (torch.arange(n, device=values.device)[:, None] * t + offset).flatten()  # [N*T]
    sums = values.new_zeros(n * t).index_add_(0, key, (values * mask).flatten())  # [N*T]
    counts = values.new_zeros(n * t).index_add_(0, key, mask.flatten())  # [N*T]
    return (sums / counts.clamp_min(1.0))[key].view(n, t)  # [N, T]


@RATIO_LEVELS.register(
    "sentence",
    formula="s_{i,k} = exp(mean_{t∈sentence k} ℓ_it), clipped per sentence and placed on its actions; "
    "the clip form sees the sentence-mean entropy",
    source="[15] SSPO",
    summary="Sentence-level ratio between GRPO's token ratio and GSPO's sequence ratio.",
)
def sentence_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    context: ObjectiveContext,
    *,
    segment_length: int = 16,
) -> LevelOutput:
    """SSPO [15]: one importance ratio per sentence, ``s_{i,k} = exp(mean_{t ∈ k} ℓ_{i,t})`` (GSPO's length-normalised
    form applied inside each sentence), clipped per sentence; every action of the sentence carries its surrogate.

    Reading chosen: the abstract does not define a sentence; genalign uses ``context.segment_ids`` when the caller
    provides them (e.g. split at ".", "\\n" by the policy adapter), else consecutive windows of ``segment_length``
    actions. With ``clip="entropy_adaptive"`` the clip form receives each sentence's mean entropy ("sentence
    entropy" in the abstract), which is SSPO's pairing.

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form.
        context: optional ``segment_ids`` / ``entropy``.
        segment_length: window size (actions) used when ``context.segment_ids`` is None; >= 1.
    """
    if segment_length < 1:
        raise ValueError(f"segment_length must be >= 1 (actions per sentence window), got {segment_length!r}")
    segments = _segment_ids(mask, context, segment_length)  # [N, T]
    sentence = _segment_mean(log_ratio, mask, segments)  # [N, T]
    sentence_context = context
    if context.entropy is not None:
        sentence_context = replace(context, entropy=_segment_mean(context.entropy, mask, segments))
    clipped = clip_fn(sentence, advantages, sentence_context)
    return _output(advantages, clipped.log_weight, sentence, clipped)


# ------------------------------------------------------------------------------------------------------------ prefixes
@RATIO_LEVELS.register(
    "prefix_geometric",
    formula="w_it = exp(mean_{j≤t} ℓ_ij) = (Π_{j≤t} ρ_ij)^{1/t}, clipped per action",
    source="[21] PNPO",
    summary="Geometric mean of the ratios along the causal prefix of each action.",
)
def prefix_geometric_level(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, context: ObjectiveContext
) -> LevelOutput:
    """PNPO [21]: the weight of action ``t`` is the geometric mean of the likelihood ratios of its causal prefix,
    ``exp(mean_{j≤t} ℓ_j)``, which replaces the cumulative prefix ratio ``Π_{j≤t} ρ_j`` (its length-normalised form);
    the gradient flows to every prefix action. Clipped per action with the chosen clip form. Shapes ``[N, T]``."""
    prefix_mean = torch.cumsum(log_ratio * mask, 1) / _positions(mask)  # [N, T]
    clipped = clip_fn(prefix_mean, advantages)
    return _output(advantages, clipped.log_weight, prefix_mean, clipped)


@RATIO_LEVELS.register(
    "cumulative",
    formula="L_it = Σ_{j≤t} ℓ_ij; ℓ̃ = s_t · clip(L_it / s_t) with s_t = √t (sqrt), t (linear) or 1 (none)",
    source="[271] CTPO",
    summary="Cumulative prefix ratio Π_{j≤t} ρ_j with position-adaptive clipping in log space.",
)
def cumulative_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    context: ObjectiveContext,
    *,
    position_scaling: Literal["sqrt", "linear", "none"] = "sqrt",
) -> LevelOutput:
    """CTPO [271]: the weight of action ``t`` is the cumulative prefix ratio ``Π_{j≤t} ρ_j = exp(L_t)``, the unbiased
    prefix correction. Position-adaptive clipping: the clip form's log-space bounds are multiplied by ``s_t``
    (implemented as ``s_t · clip(L_t / s_t)``, whose gradient is ``∇L_t`` where unclipped).

    Reading chosen: the abstract says the bounds follow the "natural growth" of the cumulative log-ratio (a sum of
    ``t`` roughly independent terms), i.e. ``s_t = √t`` (default); ``linear`` (``s_t = t``, which clips the prefix
    mean) and ``none`` (fixed bounds) are exposed as the free choice.

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form.
        context: unused.
        position_scaling: ``"sqrt"``, ``"linear"`` or ``"none"``.
    """
    if position_scaling not in ("sqrt", "linear", "none"):
        raise ValueError(f"position_scaling must be 'sqrt', 'linear' or 'none', got {position_scaling!r}")
    cumulative = torch.cumsum(log_ratio * mask, 1)  # [N, T]
    positions = _positions(mask)  # [N, T]
    scale = {"sqrt": positions.sqrt(), "linear": positions, "none": torch.ones_like(positions)}[position_scaling]
    clipped = clip_fn(cumulative / scale, advantages)
    return _output(advantages, clipped.log_weight * scale, cumulative, clipped)


@RATIO_LEVELS.register(
    "min_prefix",
    formula="ℓ̃_it = min_{j≤t} ℓ_ij (the smallest ratio of the prefix), clipped per action",
    source="[236] MinPRO",
    summary="Non-cumulative prefix surrogate: the minimum token ratio of the preceding prefix.",
)
def min_prefix_level(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, context: ObjectiveContext
) -> LevelOutput:
    """MinPRO [236]: action ``t`` is weighted by ``min_{j≤t} ρ_j`` (reading chosen, as the index states: the minimum
    token ratio over the prefix including ``t``), a bounded stand-in for the cumulative prefix ratio; the gradient
    flows to the arg-min action. Clipped per action. Shapes ``[N, T]``."""
    filled = torch.where(mask > 0, log_ratio, torch.inf)  # [N, T]
    prefix_min = torch.cummin(filled, dim=1).values  # [N, T]
    prefix_min = torch.where(torch.isfinite(prefix_min), prefix_min, 0.0)  # rows/positions before any valid action
    clipped = clip_fn(prefix_min, advantages)
    return _output(advantages, clipped.log_weight, prefix_min, clipped)


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
    context: ObjectiveContext,
    *,
    holder_p: float = 1.0,
    holder_p_end: float | None = None,
) -> LevelOutput:
    """HölderPO [55]: the sequence ratio is the power mean ``M_p`` of its token ratios, computed in log space,
    ``log M_p = (logsumexp_t(p·ℓ_t) − log|o_i|) / p``; ``p = 0`` is the geometric mean (GSPO's ratio), ``p = 1`` the
    arithmetic mean, larger ``p`` concentrates the gradient on the largest ratios. Clipped once per sequence and
    placed on each action.

    Reading chosen: the standard power mean (the index marks it inferred); annealing is linear in training progress,
    ``p = holder_p + (holder_p_end − holder_p) · context.progress`` (the abstract says only "annealed").

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form (sequence-level bounds: use small eps as for GSPO).
        context: ``progress`` is required when ``holder_p_end`` is set.
        holder_p: ``p`` (at the start of training when annealed); any real number.
        holder_p_end: ``p`` at the end of training, or None for a constant ``p``.
    """
    p = holder_p
    if holder_p_end is not None:
        progress = float(require(context, "progress", "ratio level 'holder' with holder_p_end"))
        p = holder_p + (holder_p_end - holder_p) * progress
    count = mask.sum(1, keepdim=True)  # [N, 1]
    if p == 0:
        log_mean = _row_mean(log_ratio, mask)  # [N, 1]
    else:
        empty = count == 0  # [N, 1]
        scaled = torch.where((mask > 0) | empty, p * log_ratio, -torch.inf)  # [N, T]
        log_mean = (torch.logsumexp(scaled, 1, keepdim=True) - count.clamp_min(1.0).log()) / p  # [N, 1]
        log_mean = torch.where(empty, 0.0, log_mean)
    sequence = log_mean.expand_as(log_ratio)  # [N, T]
    clipped = clip_fn(sequence, advantages)
    return _output(advantages, clipped.log_weight, sequence, clipped)


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
    context: ObjectiveContext,
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
        context: ``entropy`` is required by ``mixing="entropy"``.
        mixing: ``"average"`` (constant ``mix_weight``) or ``"entropy"``.
        mix_weight: weight ``α`` of the token branch for ``"average"``, in ``[0, 1]``.
    """
    if mixing not in ("average", "entropy"):
        raise ValueError(f"mixing must be 'average' or 'entropy', got {mixing!r}")
    if not 0 <= mix_weight <= 1:
        raise ValueError(f"mix_weight must be in [0, 1], got {mix_weight!r}")
    if mixing == "entropy":
        entropy = require(context, "entropy", "ratio level 'hybrid' with mixing='entropy'")
        mean_entropy = _row_mean(entropy, mask)  # [N, 1]
        alpha = torch.where(entropy + mean_entropy > 0, entropy / (entropy + mean_entropy).clamp_min(1e-12), 0.5)
    else:
        alpha = torch.full_like(log_ratio, mix_weight)  # [N, T]
    sequence = _row_mean(log_ratio, mask).expand_as(log_ratio)  # [N, T]
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
    context: ObjectiveContext,
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
        context: ``old_logp`` (filled by ``policy_loss``).
        occurrence_group_size: ``G`` for the occurrence normalisation, or None to skip it.
        max_prob: probabilities are capped here before ``log(1 − π)`` (keeps it finite).
    """
    if not 0 < max_prob < 1:
        raise ValueError(f"max_prob must be in (0, 1), got {max_prob!r}")
    if occurrence_group_size is not None and occurrence_group_size < 1:
        raise ValueError(f"occurrence_group_size must be >= 1 or None, got {occurrence_group_size!r}")
    old_logp = require(context, "old_logp", "ratio level 'bernoulli_variance'")
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
    return _output(advantages, log_weight, variance_ratio, clipped)
