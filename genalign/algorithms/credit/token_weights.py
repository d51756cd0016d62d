"""Per-action credit weights: a multiplier on the advantage of each action.

Every weight function has the signature
``fn(advantages [N], mask [N, T], entropy [N, T], logp=None, progress=None, **hp) -> weights [N, T]``;
the trainer uses ``advantages[:, None] * weights`` (``[N, T]``) in :func:`genalign.algorithms.policy_loss`.

``entropy`` is the per-action entropy of the policy that sampled (or re-scored) the batch; ``logp`` ``[N, T]`` the
behaviour log-probs of the sampled actions (``Rollout.old_logp``); both are treated as constants (detached).
``progress`` is ``step / max_steps`` in ``[0, 1]``, for annealed weights. An option that needs ``logp`` or
``progress`` raises a ``ValueError`` when the caller leaves it ``None``. Weights that depend on batch statistics must
be computed once on the whole optimisation batch, before it is split into micro-batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor, check_mask, check_shape
from genalign.registry import Registry

CreditWeight = Callable[..., Tensor]

#: name -> ``fn(advantages [N], mask [N, T], entropy [N, T], logp [N, T] | None, progress | None, **hp) -> [N, T]``
CREDIT_WEIGHTS: Registry[CreditWeight] = Registry("credit weight")


def _check_inputs(advantages: Tensor, mask: Tensor, entropy: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    entropy = check_float_tensor(entropy, "entropy", "[N, T]")
    if entropy.ndim != 2:
        raise ValueError(f"entropy must have shape [N, T], got {list(entropy.shape)}")
    advantages = check_shape(advantages, "advantages", (entropy.shape[0],), "[N]")
    mask = check_mask(mask, tuple(entropy.shape), entropy.dtype)
    return advantages.detach(), mask > 0, entropy.detach()


@CREDIT_WEIGHTS.register(
    "none",
    formula="w_it = 1",
    source="formulas.md §1",
    summary="Every action gets its sequence's advantage.",
)
def uniform_weights(
    advantages: Tensor, mask: Tensor, entropy: Tensor, logp: Tensor | None = None, progress: float | None = None
) -> Tensor:
    """All-ones weights ``[N, T]``: the sequence advantage is broadcast to every action."""
    _check_inputs(advantages, mask, entropy)
    return torch.ones_like(entropy)


def _normalised_share(score: Tensor, subset: Tensor) -> Tensor:
    """``score / mean_{subset}(score)`` ``[N, T]`` (1 outside ``subset`` or if the subset is empty)."""
    count = subset.sum()
    mean = torch.where(subset, score, 0.0).sum() / count.clamp_min(1)
    return torch.where(subset & (count > 0), score / mean.clamp_min(torch.finfo(score.dtype).tiny), 1.0)


@CREDIT_WEIGHTS.register(
    "entropy_weighted",
    formula="A>0: w = 1−α + α·H_it / mean_{A>0}(H); A<0: w = 1−α + α·H_it⁻¹ / mean_{A<0}(H⁻¹); "
    "level=sequence uses each sequence's mean entropy (GRPO-S)",
    source="[232] GTPO / GRPO-S (form inferred from the abstract)",
    summary="Entropy-weighted advantages: more credit to uncertain actions of good samples, more blame to "
    "confident actions of bad ones.",
)
def entropy_weighted(
    advantages: Tensor,
    mask: Tensor,
    entropy: Tensor,
    logp: Tensor | None = None,
    progress: float | None = None,
    *,
    alpha: float = 0.5,
    level: Literal["token", "sequence"] = "token",
    eps: float = 1e-6,
) -> Tensor:
    """Dynamic entropy weighting (GTPO, token level; GRPO-S, sequence level) [232].

    The abstract gives the idea, not the formula; genalign's form: within the positive-advantage actions the weight
    grows with entropy (high entropy = a pivotal decision that led to success), within the negative-advantage actions
    it grows with *inverse* entropy (a confident step of a failed answer is blamed most). Each subset's weights average
    exactly 1, so the total credit per subset is unchanged; ``alpha`` mixes with uniform weights.

    Args:
        advantages: ``[N]`` sequence advantages (only their sign is used).
        mask: ``[N, T]`` 1 where an action is trained.
        entropy: ``[N, T]`` per-action entropy (detached).
        alpha: mixing weight in ``[0, 1]``; 0 gives all-ones weights.
        level: ``"token"`` (GTPO) or ``"sequence"`` (GRPO-S: every action gets its sequence's weight).
        eps: floor on the entropy before inverting.
    Returns:
        ``[N, T]`` non-negative weights (1 where ``A = 0`` and on padding).
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1] (weights stay non-negative), got {alpha!r}")
    if level not in ("token", "sequence"):
        raise ValueError(f"level must be 'token' or 'sequence', got {level!r}")
    advantages, valid, entropy = _check_inputs(advantages, mask, entropy)
    if level == "sequence":
        per_sequence = torch.where(valid, entropy, 0.0).sum(1) / valid.sum(1).clamp_min(1)  # [N]
        entropy = per_sequence[:, None].expand_as(entropy)  # [N, T]
        valid = valid.any(1, keepdim=True).expand_as(valid)  # [N, T]; every row counts T times: a mean over sequences
    positive = valid & (advantages > 0)[:, None]  # [N, T]
    negative = valid & (advantages < 0)[:, None]  # [N, T]
    floored = entropy.clamp_min(eps)  # [N, T]
    share = torch.where(positive, _normalised_share(floored, positive), _normalised_share(1.0 / floored, negative))
    return torch.where(positive | negative, (1.0 - alpha) + alpha * share, 1.0)  # [N, T]


@CREDIT_WEIGHTS.register(
    "high_entropy_tokens",
    formula="w_it = 1 if H_it is among the top ⌈ρ·#valid⌉ entropies of the batch, else 0",
    source="[200] (forking tokens)",
    summary="Train only on the top-ρ fraction of highest-entropy actions of the batch (default 20 %).",
)
def high_entropy_tokens(
    advantages: Tensor,
    mask: Tensor,
    entropy: Tensor,
    logp: Tensor | None = None,
    progress: float | None = None,
    *,
    rho: float = 0.2,
) -> Tensor:
    """Keep the gradient of "forking tokens" only: the top ``rho`` fraction of valid actions by entropy [200].

    The other actions get weight 0 (advantage 0) but stay in the aggregation denominators; ties at the threshold are
    all kept.

    Args:
        advantages: ``[N]`` sequence advantages (checked for shape only).
        mask: ``[N, T]`` 1 where an action is trained.
        entropy: ``[N, T]`` per-action entropy (detached).
        rho: fraction of valid actions kept, in ``(0, 1]``.
    Returns:
        ``[N, T]`` weights in {0, 1}.
    """
    if not 0 < rho <= 1:
        raise ValueError(f"rho must be in (0, 1], got {rho!r}")
    _, valid, entropy = _check_inputs(advantages, mask, entropy)
    scores = entropy[valid]  # [n_valid]
    if scores.numel() == 0:
        return torch.zeros_like(entropy)
    k = math.ceil(rho * scores.numel())
    threshold = torch.topk(scores, k).values[-1]
    return (valid & (entropy >= threshold)).to(entropy.dtype)  # [N, T]


@CREDIT_WEIGHTS.register(
    "entropy_driven",
    formula="w_i = clamp(mean_batch(H̄) / H̄_i, w_min, w_max), H̄_i = mean entropy of sequence i",
    source="[99] EDGE-GRPO (entropy-driven advantage)",
    summary="Scale each response's advantage by its inverse normalised entropy: confident responses move more.",
)
def entropy_driven(
    advantages: Tensor,
    mask: Tensor,
    entropy: Tensor,
    logp: Tensor | None = None,
    progress: float | None = None,
    *,
    min_weight: float = 0.5,
    max_weight: float = 2.0,
    eps: float = 1e-6,
) -> Tensor:
    """Entropy-Driven Advantage of EDGE-GRPO [99]: ``A_i / P̂_i`` with ``P̂_i`` the response's mean entropy divided
    by the mean over responses, so a confident correct response is reinforced more and a confident wrong one is
    penalised more, which separates responses whose rewards (and so advantages) look alike.

    Reading chosen: the normalisation runs over the responses of the batch (credit weights do not see groups), and the
    weight is clamped to ``[w_min, w_max]``. EDGE-GRPO's second part, Guided Error Correction (injecting corrective
    guidance into wrong responses of collapsed groups), acts on the rollout and is not part of this option.

    Args:
        advantages: ``[N]`` sequence advantages (checked for shape).
        mask: ``[N, T]`` 1 where an action is trained.
        entropy: ``[N, T]`` per-action entropy (detached).
        min_weight, max_weight: clamp, ``0 <= min_weight <= 1 <= max_weight``.
        eps: floor on the mean entropy of a response.
    Returns:
        ``[N, T]`` weights, constant along each sequence (1 for a sequence without valid actions).
    """
    if not 0 <= min_weight <= 1 <= max_weight:
        raise ValueError(f"need 0 <= min_weight <= 1 <= max_weight, got {min_weight!r}, {max_weight!r}")
    _, valid, entropy = _check_inputs(advantages, mask, entropy)
    present = valid.any(1)  # [N]
    per_sequence = torch.where(valid, entropy, 0.0).sum(1) / valid.sum(1).clamp_min(1)  # [N]
    batch_mean = per_sequence[present].mean() if present.any() else entropy.new_ones(())
    weight = (batch_mean.clamp_min(eps) / per_sequence.clamp_min(eps)).clamp(min_weight, max_weight)  # [N]
    return torch.where(present, weight, 1.0)[:, None].expand_as(entropy).clone()  # [N, T]


@CREDIT_WEIGHTS.register(
    "polarity_token_weights",
    formula="p_it = exp(logπ_behaviour); A>0: w = 1 + α₊·s·(1 − p_it); A<0: w = 1 + α₋·s·p_it; A=0: w = 1; "
    "s = 1 − progress if anneal else 1",
    source="[111] A3PO (token-level part)",
    summary="Asymmetric token shaping: more credit to uncertain tokens of good samples, more blame to confident "
    "tokens of bad ones.",
)
def polarity_token_weights(
    advantages: Tensor,
    mask: Tensor,
    entropy: Tensor,
    logp: Tensor | None = None,
    progress: float | None = None,
    *,
    alpha_pos: float = 0.5,
    alpha_neg: float = 0.5,
    anneal: bool = False,
) -> Tensor:
    """Token-level half of A3PO [111]: the advantage of each token is reshaped according to the sample's polarity.

    Reading chosen: the abstract says "adaptive and asymmetric token-level advantage shaping ... key tokens across
    different polarities" without the criterion. genalign takes the behaviour probability ``p_t`` of the sampled
    token: in a positive sample the *low*-probability tokens are where the correct pattern was still uncertain, and
    sharpening them matters (``w = 1 + α₊(1 − p_t)``); in a negative sample the *high*-probability tokens are the
    confident errors (``w = 1 + α₋·p_t``). "Adaptive": with ``anneal`` both ``α`` decay linearly to 0 over training
    (``α·(1 − progress)``). Weights are ``>= 1`` and not renormalised. Pair it with ``advantage: asymmetric`` (the
    sample-level half) for A3PO.

    Args:
        advantages: ``[N]`` sequence advantages (only their sign is used).
        mask: ``[N, T]`` 1 where an action is trained.
        entropy: ``[N, T]`` (checked for shape only).
        logp: ``[N, T]`` behaviour log-probs of the sampled tokens (``Rollout.old_logp``; required).
        progress: ``step / max_steps`` in ``[0, 1]`` (required with ``anneal``).
        alpha_pos, alpha_neg: ``α₊, α₋ >= 0``.
        anneal: decay both ``α`` linearly to 0 with ``progress``.
    Returns:
        ``[N, T]`` weights in ``[1, 1 + α]`` (1 where ``A = 0`` and on padding).
    """
    if not (alpha_pos >= 0 and alpha_neg >= 0):
        raise ValueError(f"alpha_pos and alpha_neg must be >= 0, got {alpha_pos!r}, {alpha_neg!r}")
    advantages, valid, entropy = _check_inputs(advantages, mask, entropy)
    if logp is None:
        raise ValueError(
            "credit 'polarity_token_weights' needs logp [N, T], the behaviour log-probs of the sampled tokens: call "
            "CREDIT_WEIGHTS.get(name)(advantages, mask, entropy, logp=rollout.old_logp, progress=step / max_steps)"
        )
    logp = check_shape(logp, "logp", tuple(entropy.shape), "[N, T]").detach()
    scale = 1.0
    if anneal:
        if progress is None or not 0 <= progress <= 1:
            raise ValueError(f"polarity_token_weights with anneal=True needs progress in [0, 1], got {progress!r}")
        scale = 1.0 - progress
    probs = torch.where(valid, logp, 0.0).to(entropy.dtype).exp().clamp_max(1.0)  # [N, T] p_t
    positive = valid & (advantages > 0)[:, None]  # [N, T]
    negative = valid & (advantages < 0)[:, None]  # [N, T]
    weights = torch.where(positive, 1.0 + scale * alpha_pos * (1.0 - probs), 1.0)  # [N, T]
    return torch.where(negative, 1.0 + scale * alpha_neg * probs, weights)  # [N, T]
