"""Diversity-aware reward adjustment (DRA [167]): a reward shaper of :data:`REWARD_SHAPERS`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS


def graph_cut_smi(embeddings: Tensor, group_ids: Tensor) -> Tensor:
    """``[N]`` graph-cut submodular mutual information of each sample with the rest of its group,
    ``SMI({i}, G∖{i}) = Σ_{j∈G, j≠i} s_ij`` with ``s_ij = max(0, cos(e_i, e_j))``; ``embeddings`` ``[N, H]``."""
    unit = F.normalize(embeddings.float(), dim=1)  # [N, H]; a zero embedding stays zero
    similarity = (unit @ unit.T).clamp_min(0.0)  # [N, N]
    same = group_ids[:, None] == group_ids[None, :]  # [N, N]
    same.fill_diagonal_(False)
    return torch.where(same, similarity, 0.0).sum(1)  # [N]


def sequence_embeddings(hidden: Tensor, mask: Tensor) -> Tensor:
    """``[N, H]`` float32: the mean of ``hidden`` ``[N, T, H]`` over each sample's valid actions (``mask`` ``[N, T]``)."""
    weights = mask.to(hidden.device)[..., None]  # [N, T, 1]
    return (hidden.float() * weights).sum(1) / weights.sum(1).clamp_min(1.0)  # [N, H]


@REWARD_SHAPERS.register(
    "submodular_diversity",
    needs=("hidden",),
    formula="r̃_i = r_i / (1 + Σ_{j∈G, j≠i} max(0, cos(e_i, e_j))), e = mean hidden state of the completion "
    "(graph-cut SMI of the sample with the rest of its group)",
    source="[167] DRA (DRA-GRPO with advantage grpo, DRA-Dr. GRPO with dr_grpo)",
    summary="Down-weight the rewards of completions that are semantically redundant within their group, "
    "amplify diverse ones.",
)
def submodular_diversity(rewards: Tensor, batch: StepBatch, *, eps: float = 1e-6) -> tuple[Tensor, dict]:
    """Diversity-aware Reward Adjustment [167]: ``r̃_i = r_i / (1 + SMI({o_i}, G∖{o_i}))`` with the graph-cut
    submodular mutual information ``Σ_{j≠i} s_ij`` of the completion with the rest of its group. A completion similar
    to many others gets a smaller reward (positive or negative), a distinct one keeps more of it; the estimator then
    normalises the adjusted rewards (``grpo``: DRA-GRPO, ``dr_grpo``: DRA-Dr. GRPO).

    Reading chosen: DRA embeds completions with a separate small sentence encoder (jina-embeddings-v2-small); here
    ``e_i`` is the policy's own mean last hidden state over the completion (feature ``hidden``, no extra model), and
    negative cosine similarities count as 0 (graph-cut SMI needs a non-negative kernel). DRA's code sums over the
    samples of a device batch; the paper's set, the group, is used here.

    Args:
        rewards: ``[N]`` combined rewards; NaN = missing (stays NaN).
        batch: reads ``group_ids``, ``mask`` and ``hidden`` ``[N, T, H]`` (averaged over each sample's actions).
        eps: added to the denominator (as DRA's code).
    Returns:
        ``(rewards / (1 + SMI + eps) [N], {"reward_shaping/diversity_weight_mean": ...})``.
    """
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    embeddings = sequence_embeddings(batch.require("hidden", "submodular_diversity"), batch.mask)  # [N, H]
    if rewards.ndim != 1 or embeddings.shape[0] != rewards.shape[0]:
        raise ValueError(f"rewards must be [N] and embeddings [N, H], got {list(rewards.shape)}, {embeddings.shape}")
    smi = graph_cut_smi(embeddings.to(rewards.device), batch.group_ids.to(rewards.device))  # [N]
    weight = 1.0 / (1.0 + smi + eps)  # [N] in (0, 1]
    return rewards * weight.to(rewards.dtype), {"reward_shaping/diversity_weight_mean": float(weight.mean())}
