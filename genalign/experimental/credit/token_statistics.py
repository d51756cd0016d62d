"""Token-statistics credit whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.token_statistics import group_members, low_entropy_runs, token_inputs, token_text


@CREDIT_RULES.register(
    "intra_group_variance",
    needs=("behaviour_logp",),
    formula="v_t = Var_group(log π(o_{g,t})) over the group's responses valid at position t; "
    "w_t = 1 + (α − 1)·(v_t − min_t v)/(max_t v − min_t v); A_it = A_it·w_t",
    source="[156] TW-GRPO (token weighting; variance of sampled-token log-probs, not of full distributions)",
    summary="Weight each position by how much the group's responses disagree there (intra-group variance), "
    "damping generic shared prefixes.",
)
def intra_group_variance(advantages: Tensor, batch: StepBatch, *, max_weight: float = 1.4) -> Tensor:
    """TW-GRPO token weighting [156]: positions where the group's responses carry more information (larger intra-group
    variance) weigh more, redundant ones (generic reasoning prefixes every response shares) less. Weights run from 1
    (least varied position of the group) to ``max_weight`` (most varied), min-max normalised within each group.

    Reading chosen (a reduction): the authors' implementation measures, at each position, the divergence of every response's full
    next-token distribution from the group's mean log-distribution, which needs ``[G, T, V]`` log-probs; genalign's
    chunked head never materialises them, so the variance is taken over the log-probability of each response's
    sampled token at that position (positions where fewer than two responses are valid get the lowest weight). The
    default ``α = 1.4`` is the implementation's.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``behaviour_logp``, ``group_ids``, ``mask``.
        max_weight: ``α >= 1``.
    Returns:
        ``[N, T]`` ``advantages · w`` (unchanged on padding).
    """
    if max_weight < 1:
        raise ValueError(f"max_weight must be >= 1, got {max_weight!r}")
    logp = batch.require("behaviour_logp", "intra_group_variance").detach().float().cpu()
    valid = batch.mask.cpu() > 0
    weights = torch.ones(logp.shape)
    for rows in group_members(batch.group_ids):
        present = valid[rows].float()  # [G, T]
        count = present.sum(0)  # [T]
        mean = (logp[rows] * present).sum(0) / count.clamp_min(1)
        variance = (((logp[rows] - mean) ** 2) * present).sum(0) / count.clamp_min(1)  # [T] population variance
        variance = torch.where(count >= 2, variance, 0.0)
        used = count > 0
        if not used.any():
            continue
        low, high = variance[used].min(), variance[used].max()
        normalised = (variance - low) / (high - low) if high > low else torch.zeros_like(variance)
        weights[rows] = (1.0 + (max_weight - 1.0) * normalised)[None, :].expand(rows.numel(), -1)
    return advantages * torch.where(valid, weights, 1.0).to(advantages.device, advantages.dtype)


@CREDIT_RULES.register(
    "low_entropy_segments",
    needs=("action_ids", "entropy"),
    formula="low-entropy segment: maximal run (≥ L tokens) with H < τ = quantile_q(H over the batch) or a fixed τ; w = 1 + a if the "
    "segment's token sequence occurs only in responses of the sample's own polarity, w = w_shared if it also occurs "
    "in a response of the opposite polarity; other tokens w = 1; A_it = A_it·w",
    source="[195] LESS",
    summary="Amplify low-entropy segments unique to correct (or to incorrect) responses and neutralise those shared "
    "by both; high-entropy tokens keep their update.",
)
def low_entropy_segments(
    advantages: Tensor,
    batch: StepBatch,
    *,
    entropy_quantile: float = 0.8,
    entropy_threshold: float | None = None,
    min_length: int = 3,
    amplify: float = 0.5,
    shared_weight: float = 0.0,
) -> Tensor:
    """LESS [195]: correctness-aware modulation of low-entropy segments. Within each group, a low-entropy segment of a
    correct response (positive advantage) that appears (as a contiguous token sequence) in no incorrect response is
    amplified (``1 + a``); one of an incorrect response that appears in no correct response is amplified in blame
    (``1 + a`` on its negative advantage); a segment found in both kinds of response is neutralised
    (``shared_weight``, 0). Tokens outside low-entropy segments keep their advantage (the high-entropy exploration of
    the underlying algorithm).

    Reading chosen: "low entropy" is below the ``entropy_quantile`` quantile of the batch's token entropies (0.8: the
    roughly 80 % of tokens that are not forking tokens), a segment is a maximal run of at least ``min_length`` such
    tokens, and overlap is exact containment of the segment's token ids in another response; ``a = 0.5``.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``action_ids``, ``entropy``, ``sample_advantages`` (sign), ``group_ids``, ``mask``.
        entropy_quantile: in ``(0, 1]``, used when ``entropy_threshold`` is None.
        entropy_threshold: a fixed low-entropy threshold (nats).
        min_length: shortest segment, ``>= 1``.
        amplify: ``a >= 0``.
        shared_weight: weight of shared segments, ``>= 0``.
    Returns:
        ``[N, T]`` ``advantages · w``.
    """
    if not 0 < entropy_quantile <= 1 or min_length < 1 or amplify < 0 or shared_weight < 0:
        raise ValueError("need 0 < entropy_quantile <= 1, min_length >= 1, amplify >= 0, shared_weight >= 0")
    ids, valid, sample = token_inputs(batch, "low_entropy_segments")
    entropy = batch.require("entropy", "low_entropy_segments").detach().float().cpu()
    if not valid.any():
        return advantages
    threshold = torch.quantile(entropy[valid], entropy_quantile) if entropy_threshold is None else entropy_threshold
    low = valid & (entropy < threshold)
    weights = torch.ones(ids.shape)
    for rows in group_members(batch.group_ids):
        texts = {int(i): token_text(ids[i][valid[i]].tolist()) for i in rows}
        for i in rows.tolist():
            if sample[i] == 0:
                continue
            opposite = [texts[j] for j in rows.tolist() if sample[j] * sample[i] < 0]
            for start, stop in low_entropy_runs(low[i], min_length):
                segment = token_text(ids[i, start:stop].tolist())
                shared = any(segment in text for text in opposite)
                weights[i, start:stop] = shared_weight if shared else 1.0 + amplify
    return advantages * weights.to(advantages.device, advantages.dtype)
