"""Vision-language token credit: per-action weights from how much each generated token depends on the image
(rules of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

Both rules read token features that only a family with images computes in its scoring pass before the update
(:class:`~genalign.algorithms.scores.ScoreRequest`): ``visual_similarity`` (PEPO [129]: the cosine similarity of each
generated token's hidden states to the image tokens' hidden states, averaged over the layers) and
``logp_without_image`` (VPPO [329]: the log-probability of each sampled token when the image is blanked out). A config
asking for them with a text-only family is rejected at load time. Weights that use batch statistics are computed once
on the whole rollout batch of the process (the trainer's credit stage), before it is split into micro-batches.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal

declare_signal("logp_without_image", ("N", "T"), "score",
               "Log-probabilities of the stored actions from a second pass with every image blanked out (same tokens "
               "and positions), at the sampling temperature (detached; families with images).",
               source="[329] VPPO, [230] Video-KTR")  # fmt: skip
declare_signal("visual_similarity", ("N", "T"), "score",
               "Mean over the model's layers of the mean cosine similarity between the hidden state at each action's "
               "token and the hidden states at the image tokens (detached; 0 without images).",
               source="[129] PEPO")  # fmt: skip


def _row_min_max(values: Tensor, valid: Tensor, eps: float) -> Tensor:
    """``(v − min_row) / max(max_row − min_row, eps)`` over the valid entries of each row of ``values`` ``[N, T]``;
    0 on invalid entries."""
    low = torch.where(valid, values, torch.inf).amin(1, keepdim=True)  # [N, 1]
    high = torch.where(valid, values, -torch.inf).amax(1, keepdim=True)  # [N, 1]
    scaled = (values - low) / (high - low).clamp_min(eps)  # [N, T]
    return torch.where(valid, scaled, 0.0)


@CREDIT_RULES.register(
    "perception_prior",
    needs=("visual_similarity", "entropy"),
    formula="v̂, Ĥ = per-sequence min-max of the visual similarity v and entropy H; g = 1 + α·tanh(v̂ + Ĥ − "
    "mean_i(v̂ + Ĥ)); w_it = |o_i|·softmax_t(v_it·g_it / τ); A_it ← A_it·((1 − p) + p·w_it), p = progress",
    source="[129] PEPO (official code; α = 0.1, τ = 1.8 of its Qwen2.5-VL-3B recipe)",
    summary="Perception prior: token weights from hidden-state similarity to the image, gated by entropy, "
    "softmax-normalised per sequence and phased in over training.",
)
def perception_prior(
    advantages: Tensor,
    batch: StepBatch,
    *,
    gate_alpha: float = 0.1,
    gate_temperature: float = 1.8,
    anneal: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Perception-Exploration Policy Optimization [129]: token-level advantages from a perception prior.

    The prior is the similarity ``v_it`` of token ``t``'s hidden states to the image tokens' hidden states (feature
    ``visual_similarity``, averaged over the layers). A smooth gate mixes it with the token entropy ``H_it``: both are
    min-max normalised within the sequence, their sum centred on its sequence mean, and ``g = 1 + α·tanh(·)``. The
    weights ``w = |o_i|·softmax_t(v·g / τ)`` average exactly 1 over each sequence, so the sequence's total credit is
    unchanged; they move it towards visually grounded tokens (high ``v``) and, through the gate, towards uncertain
    (exploratory) ones. As in the official code the weights are phased in linearly with training progress ``p``:
    ``A ← A·((1 − p) + p·w)`` (``anneal=False`` applies ``w`` from the start). The weight multiplies the advantage,
    which equals PEPO's weighting of the clipped per-token loss because ``w > 0``.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``visual_similarity`` ``[N, T]``, ``entropy`` ``[N, T]`` and ``progress`` (with
            ``anneal``).
        gate_alpha: ``α >= 0``, the gate's strength (official code default 0.05; its Qwen2.5-VL recipes use 0.1).
        gate_temperature: ``τ > 0`` of the softmax (code default 1.0; recipes 1.8).
        anneal: phase the weights in with ``progress``.
        eps: floor of the min-max ranges.
    Returns:
        ``[N, T]`` ``advantages * multiplier`` (multiplier 1 on padding).
    """
    if not (gate_alpha >= 0 and gate_temperature > 0):
        raise ValueError(f"need gate_alpha >= 0 and gate_temperature > 0, got {gate_alpha!r}, {gate_temperature!r}")
    device = advantages.device
    similarity = batch.require("visual_similarity", "perception_prior").detach().float().to(device)  # [N, T]
    entropy = batch.require("entropy", "perception_prior").detach().float().to(device)  # [N, T]
    valid = batch.mask.to(device) > 0  # [N, T]
    count = valid.sum(1, keepdim=True)  # [N, 1]
    mixed = _row_min_max(similarity, valid, eps) + _row_min_max(entropy, valid, eps)  # [N, T]
    centred = mixed - torch.where(valid, mixed, 0.0).sum(1, keepdim=True) / count.clamp_min(1)  # [N, T]
    gate = 1.0 + gate_alpha * torch.tanh(centred)  # [N, T]
    logits = torch.where(valid, similarity * gate / gate_temperature, -torch.inf)  # [N, T]
    logits = torch.where(count > 0, logits, 0.0)  # a row without actions: no NaN from an all -inf softmax
    weights = torch.softmax(logits, dim=1) * count  # [N, T], mean 1 over each sequence's valid actions
    if anneal:
        progress = batch.require("progress", "perception_prior")
        if not 0 <= progress <= 1:
            raise ValueError(f"perception_prior with anneal=True needs progress in [0, 1], got {progress!r}")
        weights = (1.0 - progress) + progress * weights  # [N, T]
    return advantages * torch.where(valid, weights, 1.0).to(advantages.dtype)  # [N, T]


def visual_dependency_scores(logp: Tensor, logp_without_image: Tensor, mask: Tensor, *, cap: float = 10.0) -> Tensor:
    """Token visual dependency of VPPO [329]: the ``k3`` estimate of ``KL(π(·|image) ‖ π(·|no image))`` at the sampled
    token, ``d = exp(δ) − δ − 1`` with ``δ = logπ_no_image − logπ_image`` (clamped to ``[−20, 20]``), capped at
    ``cap``; ``[N, T]``, 0 on padding."""
    delta = (logp_without_image.float() - logp.float()).clamp(-20.0, 20.0)  # [N, T]
    dependency = (delta.exp() - delta - 1.0).clamp(0.0, cap)  # [N, T]
    return torch.where(mask > 0, dependency, 0.0)


def top_fraction_per_row(scores: Tensor, valid: Tensor, fraction: float) -> Tensor:
    """``[N, T]`` bool: the ``⌈fraction·|o_i|⌉`` highest ``scores`` of each row's valid entries (ties by position)."""
    count = valid.sum(1)  # [N]
    keep = torch.ceil(count.double() * fraction - 1e-9).long()  # [N]
    order = torch.sort(torch.where(valid, scores, -torch.inf), dim=1, descending=True, stable=True).indices  # [N, T]
    positions = torch.arange(scores.shape[1], device=scores.device).expand_as(order).contiguous()  # [N, T]
    rank = torch.empty_like(order).scatter_(1, order, positions)  # [N, T] rank of each action in its row
    return valid & (rank < keep[:, None])  # [N, T]


def _trajectory_scale(dependency: Tensor, valid: Tensor, min_scale: float) -> Tensor:
    """VPPO's trajectory advantage shaping ``[N]``: ``α_i = β_min + n_i·(1 − β_min)/mean(n)`` with ``n_i`` the
    batch min-max normalised mean dependency of sequence ``i`` (1 where undefined)."""
    count = valid.sum(1)  # [N]
    present = count > 0  # [N]
    score = dependency.sum(1) / count.clamp_min(1)  # [N] mean token dependency S_i
    ones = torch.ones_like(score)
    if int(present.sum()) < 2:
        return ones
    low, high = score[present].min(), score[present].max()
    if not high - low > 1e-6:
        return ones
    normalised = ((score - low) / (high - low)).clamp(0.0, 1.0)  # [N]
    mean = normalised[present].mean()
    scale = min_scale + normalised * (1.0 - min_scale) / (mean + 1e-8)  # [N], mean over sequences = 1
    return torch.where(present, scale, ones)


@CREDIT_RULES.register(
    "visual_dependency",
    needs=("logp_without_image", "behaviour_logp"),
    formula="d_it = exp(δ) − δ − 1, δ = logπ(o_it|no image) − logπ(o_it|image); S_i = mean_t d_it; n_i = batch "
    "min-max of S_i; α_i = β_min + n_i·(1 − β_min)/mean(n); A_it ← α_i·1[d_it in the top ⌈k·|o_i|⌉ of row i]·A_it",
    source="[329] VPPO (official code: k = 0.2, β_min = 0.8; KL by the k3 estimator at the sampled token)",
    summary="Token perception: reweight each trajectory by its mean visual dependency and update only its most "
    "visually dependent tokens.",
)
def visual_dependency(
    advantages: Tensor,
    batch: StepBatch,
    *,
    top_fraction: float = 0.2,
    min_scale: float = 0.8,
    max_dependency: float = 10.0,
) -> Tensor:
    """Visually-Perceptive Policy Optimization [329]: token perception from a second scoring pass without the image.

    Token visual dependency ``d_it`` is the ``k3`` estimate of ``KL(π(·|image) ‖ π(·|no image))`` at the sampled
    token (:func:`visual_dependency_scores`), from the behaviour log-probs and the feature ``logp_without_image``.
    Two mechanisms use it:

    * *Trajectory advantage shaping*: each sequence's advantage is multiplied by ``α_i = β_min + n_i(1 − β_min)/n̄``,
      ``n_i`` its mean dependency min-max normalised over the batch; the dynamic upper end keeps the batch mean of
      ``α`` at 1 (``min_scale = 1`` turns it off).
    * *Token gradient filtering*: only the ``⌈k·|o_i|⌉`` most dependent tokens of each sequence keep their advantage;
      the others get 0 but stay in the aggregation's denominators, as VPPO masks the per-token loss
      (``top_fraction = 1`` turns it off).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``behaviour_logp`` ``[N, T]`` (with the image) and ``logp_without_image`` ``[N, T]``.
        top_fraction: ``k`` in ``(0, 1]``, the share of each sequence's tokens that is trained.
        min_scale: ``β_min`` in ``[0, 1]``, the weight of the least visually dependent trajectory.
        max_dependency: cap on ``d`` (the official code clamps the estimate to ``[0, 10]``).
    Returns:
        ``[N, T]`` ``α_i · keep_it · advantages``.
    """
    if not (0 < top_fraction <= 1 and 0 <= min_scale <= 1 and max_dependency > 0):
        raise ValueError(
            f"need 0 < top_fraction <= 1, 0 <= min_scale <= 1 and max_dependency > 0, got top_fraction="
            f"{top_fraction!r}, min_scale={min_scale!r}, max_dependency={max_dependency!r}"
        )
    device = advantages.device
    without_image = batch.require("logp_without_image", "visual_dependency").detach().to(device)  # [N, T]
    logp = batch.require("behaviour_logp", "visual_dependency").detach().to(device)  # [N, T]
    valid = batch.mask.to(device) > 0  # [N, T]
    dependency = visual_dependency_scores(logp, without_image, valid, cap=max_dependency)  # [N, T]
    keep = top_fraction_per_row(dependency, valid, top_fraction)  # [N, T]
    scale = _trajectory_scale(dependency, valid, min_scale)  # [N]
    return advantages * (scale[:, None] * keep).to(advantages.dtype)  # [N, T]
