"""GRSP [112]: a group-relative penalty on the reasoning segments of each completion, weighted by the length cluster
of each segment (a reward shaper of :data:`REWARD_SHAPERS`).

The segments are the rollout's ``segment_ids`` (sentences / reasoning steps, :mod:`genalign.policies.lm.segments`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import Tensor

from genalign.algorithms._groups import group_stats, make_groups
from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS
from genalign.experimental.shaping.length_gate import correct_samples


def segment_lengths(segment_ids: Tensor, mask: Tensor) -> Tensor:
    """``[N, S]`` float: the valid actions of each segment of each sample (0 for a segment without one; ``S`` = the
    largest segment id + 1), from ``segment_ids`` ``[N, T]`` and ``mask`` ``[N, T]``."""
    valid = mask > 0
    ids = torch.where(valid, segment_ids.long(), 0)  # [N, T]
    width = int(ids.max()) + 1 if ids.numel() else 1
    return torch.zeros(ids.shape[0], width, dtype=torch.float64, device=ids.device).scatter_add_(1, ids, valid.double())


def length_clusters(lengths: Tensor, edges: Tensor) -> Tensor:
    """``[N, S]`` long: the cluster of each segment, the number of ``edges`` ``[C − 1]`` its length exceeds (cluster 0
    holds the shortest segments)."""
    return (lengths[..., None] > edges).sum(-1)


def batch_edges(lengths: Tensor, clusters: int) -> Tensor:
    """``[C − 1]``: the quantiles ``k/C`` (``k = 1 .. C−1``) of the lengths of every non-empty segment of the batch."""
    present = lengths[lengths > 0]
    if present.numel() == 0:
        return lengths.new_zeros(clusters - 1)
    levels = torch.arange(1, clusters, dtype=torch.float64, device=lengths.device) / clusters
    return torch.quantile(present.double(), levels)


@REWARD_SHAPERS.register(
    "segment_penalty",
    needs=("segment_ids", "rewards"),
    formula="ℓ_is = valid actions of segment s; c(s) = length cluster (batch quantile bins, or fixed edges); "
    "P_i = Σ_s w_{c(s)} (w descending: short segments weigh most); z_i = (P_i − mean_G P)/(std_G P + eps) over the "
    "group's correct samples; r̃_i = r_i − α·z_i for correct samples",
    source="[112] GRSP",
    summary="Penalise, relative to the group, correct completions that use more reasoning segments than their "
    "siblings; short segments (meandering restarts) weigh more than long ones.",
)
def segment_penalty(
    rewards: Tensor,
    batch: StepBatch,
    *,
    coef: float = 0.2,
    cluster_weights: Sequence[float] = (1.0, 0.5, 0.25),
    length_edges: Sequence[float] | None = None,
    success_column: int = 0,
    success_threshold: float = 0.5,
    eps: float = 1e-6,
) -> tuple[Tensor, dict[str, float]]:
    """Group Relative Segment Penalization [112]: overthinking shows as many reasoning segments (restarts,
    re-checks), and the count of segments tracks both token use and accuracy, so the penalty is placed on segments
    rather than on tokens. Segments are clustered by length and weighted per cluster, descending from short to long
    (the published finding: descending weights beat ascending ones), so a completion made of many short restarts is
    penalised more than one with the same tokens in fewer, fuller steps. The weighted count is compared within the
    group, so only completions longer-winded than their siblings lose reward.

    Reading chosen: the abstract gives neither the clusters nor the combination. Clusters are the quantile bins of
    the lengths of every segment of the batch (``C = len(cluster_weights)`` bins; ``length_edges`` fixes them in
    actions instead); the penalty is the group z-score of ``P_i = Σ_s w_{c(s)}`` over the group's correct samples,
    subtracted with weight ``α`` from their reward (incorrect samples keep theirs, so accuracy keeps the direction).
    A group with fewer than 2 correct samples, or equal counts, is not penalised.

    Args:
        rewards: ``[N]`` combined rewards.
        batch: reads ``segment_ids`` ``[N, T]``, ``mask``, ``rewards`` ``[N, K]`` (correctness) and ``group_ids``.
        coef: ``α >= 0``.
        cluster_weights: ``w_c`` of each cluster, shortest first (``C >= 1`` entries, each ``>= 0``).
        length_edges: ``C − 1`` increasing cluster edges in actions, or None (the batch's quantiles).
        success_column: the raw reward column of the verifier; success_threshold: correct above it.
        eps: added to the group std.
    Returns:
        ``(r̃ [N], {"reward_shaping/segment_penalty_abs_mean", "reward_shaping/segments_mean"})``.
    """
    weights = torch.tensor([float(w) for w in cluster_weights], dtype=torch.float64)
    if coef < 0 or weights.numel() == 0 or bool((weights < 0).any()):
        raise ValueError(f"segment_penalty: need coef >= 0 and at least one cluster weight, each >= 0; got coef={coef!r}, "
                         f"cluster_weights={list(cluster_weights)!r}.")  # fmt: skip
    if length_edges is not None and (
        len(length_edges) != weights.numel() - 1 or any(b <= a for a, b in itertools.pairwise(length_edges))
    ):
        raise ValueError(f"segment_penalty: length_edges={list(length_edges)!r} must hold {weights.numel() - 1} "
                         "increasing edges (one fewer than cluster_weights), or be null for the batch quantiles.")  # fmt: skip
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    lengths = segment_lengths(batch.require("segment_ids", "reward shaper 'segment_penalty'"), batch.mask).cpu()
    edges = batch_edges(lengths, weights.numel()) if length_edges is None else torch.tensor(length_edges).double()
    weighted = torch.where(lengths > 0, weights[length_clusters(lengths, edges)], 0.0).sum(1)  # [N] P_i
    correct = correct_samples(batch, "segment_penalty", column=success_column, threshold=success_threshold).cpu()
    counted = correct & ~torch.isnan(rewards.cpu())  # [N]
    groups = make_groups(batch.group_ids.cpu(), rewards.shape[0], min_size=1)
    spread = group_stats(torch.where(counted, weighted, torch.nan)[:, None], groups, unbiased=False)  # [G, 1] each
    mean, std = spread.mean[groups.index, 0], spread.std[groups.index, 0]  # [N]
    usable = counted & (spread.count[groups.index, 0] >= 2) & (std > 0)  # [N]
    z = torch.where(usable, (weighted - mean) / (std + eps), 0.0)  # [N]
    shaped = rewards - coef * z.to(rewards.device, rewards.dtype)
    segments = (lengths > 0).sum(1).double()  # [N]
    stats = {"reward_shaping/segment_penalty_abs_mean": float((coef * z).abs().mean()),
             "reward_shaping/segments_mean": float(segments.mean())}  # fmt: skip
    return shaped, stats
