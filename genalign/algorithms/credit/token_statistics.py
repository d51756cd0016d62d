"""Token credit from statistics over the tokens of a group's responses (rules of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`): conflict tokens (GTPO [138]), token–correctness association
(KTAE [158]), intra-group variance weights (TW-GRPO [156]) and low-entropy segments unique to correct or incorrect
responses (LESS [195]).

The rules read the token of every action (``action_ids``) and compare the responses of each group; they run
once on the whole optimisation batch before it is split into micro-batches (the trainer's credit stage), so a group's
statistics always see all of its responses. "Correct" means a positive sample advantage.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def group_members(group_ids: Tensor) -> list[Tensor]:
    """Row indices of each group, in order of first appearance."""
    groups = group_ids.cpu()
    return [(groups == g).nonzero().flatten() for g in groups.unique()]


def token_inputs(batch: StepBatch, rule: str) -> tuple[Tensor, Tensor, Tensor]:
    """``(action ids [N, T] long, valid [N, T] bool, sample advantages [N] float)`` on the CPU."""
    ids = batch.require("action_ids", f"credit rule {rule!r}").long().cpu()
    if ids.shape != batch.mask.shape:
        raise ValueError(f"credit rule {rule!r}: action_ids {tuple(ids.shape)} must match the mask")
    return ids, batch.mask.cpu() > 0, batch["sample_advantages"].detach().float().cpu()


# ---- GTPO [138] ------------------------------------------------------------------------------------------------------
def _aligned_conflicts(ids: Tensor, valid: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
    """``[G, T]`` bool: the token at ``t`` also sits at ``t`` in a positive and in a negative member (valid ones)."""
    same = (ids[:, None, :] == ids[None, :, :]) & valid[:, None, :] & valid[None, :, :]  # [G, G, T]
    in_positive = (same & positive[None, :, None]).any(1)  # [G, T]
    in_negative = (same & negative[None, :, None]).any(1)  # [G, T]
    return in_positive & in_negative & valid


def _from_end(x: Tensor, lengths: Tensor) -> Tensor:
    """``x`` ``[G, T]`` with each row's first ``lengths[i]`` entries reversed (right-aligned), the rest unchanged."""
    width = x.shape[1]
    position = torch.arange(width)[None, :]  # [1, T]
    index = torch.where(position < lengths[:, None], lengths[:, None] - 1 - position, position)
    return x.gather(1, index)


def conflict_masks(
    ids: Tensor, valid: Tensor, positive: Tensor, negative: Tensor, positions: Literal["runs", "all"]
) -> tuple[Tensor, Tensor]:
    """``(forward [G, T], backward [G, T])`` conflict tokens of one group (see :func:`conflict_tokens`)."""
    forward = _aligned_conflicts(ids, valid, positive, negative)
    if positions == "all":
        return forward, torch.zeros_like(forward)
    lengths = valid.sum(1)
    rev_ids, rev_valid = _from_end(ids, lengths), _from_end(valid, lengths)
    backward = _aligned_conflicts(rev_ids, rev_valid, positive, negative)
    forward = torch.cumprod(forward.long(), dim=1).bool()  # the leading run only
    backward = _from_end(torch.cumprod(backward.long(), dim=1).bool() & rev_valid, lengths)
    return forward, backward


@CREDIT_RULES.register(
    "conflict_tokens",
    needs=("action_ids", "entropy"),
    formula="conflict token: same token at the same position in a positive and a negative completion of the group "
    "(leading run from the start and from the end); w = W (A>0) or 0 (A<0) per direction, w_it = w_fwd·w_bwd; "
    "A_it = (A_it − β·H̄_i)·w_it / max(1, n_conflict_i) if H̄_i ≤ H_max else 0",
    source="[138] GTPO (public implementation)",
    summary="Protect tokens shared by good and bad completions: skip their negative updates, amplify their positive "
    "ones; drop completions whose mean entropy is too high.",
)
def conflict_tokens(
    advantages: Tensor,
    batch: StepBatch,
    *,
    conflict_weight: float = 2.0,
    entropy_threshold: float = 0.7,
    entropy_coef: float = 0.1,
    positions: Literal["runs", "all"] = "runs",
    scale_by_conflicts: bool = True,
) -> Tensor:
    """GTPO [138]: conflict tokens, tokens at the same position in completions with opposite rewards, keep their
    positive updates (times ``conflict_weight``) and skip their negative ones; completions with mean entropy above
    ``entropy_threshold`` get no update; the others' advantages are lowered by ``entropy_coef`` times their mean
    entropy.

    Follows the authors' public implementation: positions are compared from the start and, right-aligned, from the
    end, and only the *leading run* of consecutive conflicts in each direction counts (the shared format tokens at
    both ends; ``positions="all"`` takes every start-aligned conflict, the abstract's literal definition); the two
    directions' weights multiply; each completion's advantage is divided by its number of conflict tokens (at least
    1), the implementation's per-completion loss scaling; defaults ``W = 2``, ``H_max = 0.7``, ``β = 0.1``.
    The mean entropy comes from genalign's scoring pass before the update, at the sampling temperature (the
    implementation measures it in the update's forward pass, under the same weights, on the untempered logits).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``action_ids``, ``entropy``, ``sample_advantages`` (sign), ``group_ids``, ``mask``.
        conflict_weight: ``W >= 0``, the weight of a conflict token of a positive completion (per direction).
        entropy_threshold: completions with a larger mean entropy get advantage 0.
        entropy_coef: ``β >= 0``.
        positions: ``"runs"`` (implementation) or ``"all"``.
        scale_by_conflicts: divide each completion by its number of conflict tokens.
    Returns:
        ``[N, T]`` advantages (0 on padding).
    """
    if conflict_weight < 0 or entropy_coef < 0:
        raise ValueError(f"conflict_weight and entropy_coef must be >= 0, got {conflict_weight}, {entropy_coef}")
    if positions not in ("runs", "all"):
        raise ValueError(f"positions must be 'runs' or 'all', got {positions!r}")
    ids, valid, sample = token_inputs(batch, "conflict_tokens")
    weights = torch.ones(ids.shape)  # [N, T]
    counts = torch.ones(ids.shape[0])  # [N]
    for rows in group_members(batch.group_ids):
        positive, negative = sample[rows] > 0, sample[rows] < 0
        if not (positive.any() and negative.any()):
            continue
        forward, backward = conflict_masks(ids[rows], valid[rows], positive, negative, positions)
        per_direction = torch.where(positive[:, None], conflict_weight, 0.0)  # [G, 1]
        w = torch.where(forward, per_direction, 1.0) * torch.where(backward, per_direction, 1.0)  # [G, T]
        active = (positive | negative)[:, None]
        weights[rows] = torch.where(active, w, 1.0)
        counts[rows] = torch.where(active[:, 0], (forward | backward).sum(1).float().clamp_min(1), 1.0)
    entropy = batch.require("entropy", "conflict_tokens").detach().float().cpu()
    mean_entropy = torch.where(valid, entropy, 0.0).sum(1) / valid.sum(1).clamp_min(1)  # [N]
    device = advantages.device
    shifted = advantages - entropy_coef * mean_entropy.to(device, advantages.dtype)[:, None]  # [N, T]
    kept = (mean_entropy <= entropy_threshold).to(device)[:, None]
    scale = weights / (counts[:, None] if scale_by_conflicts else 1.0)
    result = torch.where(kept, shifted * scale.to(device, advantages.dtype), 0.0)
    return torch.where(valid.to(device), result, 0.0)


# ---- KTAE [158] ------------------------------------------------------------------------------------------------------
def _log_comb(n: Tensor, k: Tensor) -> Tensor:
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def fisher_exact_p(a: Tensor, b: Tensor, c: Tensor, d: Tensor) -> Tensor:
    """Two-sided Fisher exact test p-values ``[V]`` of the 2×2 tables ``[[a, b], [c, d]]`` (float counts): the sum of the
    hypergeometric probabilities of the tables with the same margins that are not more likely than the observed one."""
    row, col, n = a + b, a + c, a + b + c + d
    low, high = (row + col - n).clamp_min(0), torch.minimum(row, col)  # [V]
    k = torch.arange(int(high.max()) + 1 if high.numel() else 1, dtype=a.dtype)[None, :]  # [1, K]
    inside = (k >= low[:, None]) & (k <= high[:, None])
    log_p = _log_comb(col[:, None], k) + _log_comb((n - col)[:, None], (row[:, None] - k)) - _log_comb(n, row)[:, None]
    p = torch.where(inside, log_p.exp(), 0.0)  # [V, K]
    observed = (_log_comb(col, a) + _log_comb(n - col, row - a) - _log_comb(n, row)).exp()  # [V]
    return torch.where(inside & (p <= observed[:, None]), p, 0.0).sum(1)


def _information_gain(a: Tensor, b: Tensor, c: Tensor, d: Tensor) -> Tensor:
    """Information gain (bits) of "contains the token" about correctness, ``[V]``."""

    def h(*parts: Tensor) -> Tensor:
        total = sum(parts)
        return sum(torch.where(p > 0, -(p / total) * torch.log2(p / total.clamp_min(1e-30)), 0.0) for p in parts)

    n = a + b + c + d
    with_token, without = a + b, c + d
    conditional = (with_token / n) * h(a, b) + (without / n) * h(c, d)
    return torch.where(n > 0, h(a + c, b + d) - conditional, 0.0)


def _bm25_tf(counts: Tensor, total: float, average: float, k1: float, b: float) -> Tensor:
    """BM25-style saturated term frequency ``[V]`` of ``counts`` among ``total`` tokens."""
    frequency = counts / max(total, 1.0)
    return frequency * (k1 + 1) / (frequency + k1 * (1 - b + b * total / max(average, 1e-30)))


def key_token_scores(
    ids: Tensor, valid: Tensor, correct: Tensor, *, alpha: float, beta: float, gamma: float, k1: float, b: float
) -> tuple[Tensor, Tensor]:
    """``(vocabulary [V] long, score [V])``: KTAE's signed association of each token of one group with correctness."""
    vocabulary, inverse = ids[valid].unique(return_inverse=True)  # [V], [n_valid]
    rows = torch.arange(ids.shape[0])[:, None].expand_as(ids)[valid]  # [n_valid]
    contains = torch.zeros(ids.shape[0], vocabulary.numel())
    contains[rows, inverse] = 1.0  # [G, V] response contains the token
    n_correct, n_wrong = float(correct.sum()), float((~correct).sum())
    a, b_ = contains[correct].sum(0), contains[~correct].sum(0)
    c, d = n_correct - a, n_wrong - b_
    p = fisher_exact_p(a, b_, c, d)
    fisher = torch.where(p != 1.0, torch.exp(-2 * p), 0.0)
    effect = torch.asin((a / (a + c + 1e-10)).clamp(0, 1).sqrt()) - torch.asin(
        (b_ / (b_ + d + 1e-10)).clamp(0, 1).sqrt()
    )
    occurrences = torch.zeros(ids.shape[0], vocabulary.numel()).index_put_(
        (rows, inverse), torch.ones(rows.shape), accumulate=True
    )
    total_correct, total_wrong = float(valid[correct].sum()), float(valid[~correct].sum())
    average = (total_correct + total_wrong) / 2
    tf_c = _bm25_tf(occurrences[correct].sum(0), total_correct, average, k1, b)
    tf_w = _bm25_tf(occurrences[~correct].sum(0), total_wrong, average, k1, b)
    x = effect + gamma * (tf_c / (tf_w + 1e-5) - tf_w / (tf_c + 1e-5))
    score = (alpha * fisher + beta * _information_gain(a, b_, c, d)) * x / (alpha + beta)
    return vocabulary, score


@CREDIT_RULES.register(
    "key_tokens",
    needs=("action_ids",),
    formula="per group, token v: 2×2 table (correct/wrong responses containing v); "
    "s_v = ((α·e^{−2p_Fisher} + β·IG)·(h_Cohen + γ·(tf_c/tf_w − tf_w/tf_c)))/(α + β); "
    "A_it = A_it + 2·c·(σ(s_{o_it}) − 1/2)",
    source="[158] KTAE (public implementation)",
    summary="Add a token-level key-token score from the statistical association of each token with correct "
    "responses in its group.",
)
def key_tokens(
    advantages: Tensor,
    batch: StepBatch,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    gamma: float = 1.0,
    scale: float = 1.0,
    bm25_k1: float = 2.0,
    bm25_b: float = 0.5,
) -> Tensor:
    """Key-token Advantage Estimation [158]: within each group, a 2×2 contingency table counts the correct and the
    wrong responses that contain token ``v``; the two-sided Fisher exact test (``e^{−2p}``, 0 when ``p = 1``) and the
    information gain measure the association's strength, Cohen's ``h`` between the two containment rates plus a
    BM25-style term-frequency ratio its direction; ``score = (α·fisher + β·IG)·x / (α + β)`` is squashed to
    ``(−c, c)`` by ``2c·(σ(score) − 1/2)`` and *added* to the advantage of every occurrence of ``v`` in the group
    (correct and wrong responses alike).

    Follows the authors' public implementation (defaults ``α = β = γ = c = 1``, BM25 ``k1 = 2``, ``b = 0.5``); a group
    without both correct and wrong responses adds 0. Differences: "correct" is a positive sample advantage (the
    implementation thresholds a 0/1 reward at 0, the same split for a mixed group); ``γ`` weights the term-frequency
    part (the implementation only switches it on or off); padding is excluded by the mask rather than by a pad id.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``action_ids``, ``sample_advantages`` (sign), ``group_ids``, ``mask``.
        alpha, beta: weights of the Fisher and information-gain parts (``α + β > 0``).
        gamma: weight of the term-frequency part of the direction.
        scale: ``c``, the largest magnitude of the added score.
        bm25_k1, bm25_b: BM25 saturation and length normalisation.
    Returns:
        ``[N, T]`` advantages (unchanged on padding).
    """
    if alpha < 0 or beta < 0 or alpha + beta <= 0:
        raise ValueError(f"need alpha, beta >= 0 with alpha + beta > 0, got {alpha}, {beta}")
    ids, valid, sample = token_inputs(batch, "key_tokens")
    bonus = torch.zeros(ids.shape)  # [N, T]
    for rows in group_members(batch.group_ids):
        correct = sample[rows] > 0
        if rows.numel() < 2 or correct.all() or not correct.any():
            continue
        vocabulary, score = key_token_scores(
            ids[rows], valid[rows], correct, alpha=alpha, beta=beta, gamma=gamma, k1=bm25_k1, b=bm25_b
        )
        weight = (torch.sigmoid(score) - 0.5) * 2 * scale  # [V]
        position = torch.searchsorted(vocabulary, ids[rows].clamp_min(0)).clamp_max(vocabulary.numel() - 1)
        bonus[rows] = torch.where(valid[rows], weight[position], 0.0)
    return advantages + bonus.to(advantages.device, advantages.dtype)


# ---- TW-GRPO [156] ---------------------------------------------------------------------------------------------------


# ---- LESS [195] ------------------------------------------------------------------------------------------------------
def low_entropy_runs(low: Tensor, min_length: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of the maximal runs of True in ``low`` ``[T]`` that have at least ``min_length`` entries."""
    runs, start = [], None
    for t, flag in enumerate([*low.tolist(), False]):
        if flag and start is None:
            start = t
        elif not flag and start is not None:
            if t - start >= min_length:
                runs.append((start, t))
            start = None
    return runs


def token_text(tokens: list[int]) -> str:
    return "," + ",".join(map(str, tokens)) + ","


__all__ = [
    "conflict_masks",
    "conflict_tokens",
    "fisher_exact_p",
    "key_token_scores",
    "key_tokens",
    "low_entropy_runs",
]
