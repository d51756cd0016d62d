"""DaGRPO's sequence-level gradient rectification [286]: the group advantage as a sum over sample pairs, with the
pairs of nearly identical samples masked (experimental tier)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from genalign.algorithms._groups import group_stats, make_groups
from genalign.algorithms._validation import expand_advantages
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.shaping.diversity import sequence_embeddings


def distinct_pair_advantages(
    rewards: Tensor, embeddings: Tensor, group_ids: Tensor, *, min_distinctiveness: float, eps: float = 1e-6
) -> Tensor:
    """``[N]`` GRPO's advantage written over pairs, ``A_i = Σ_{j∈G} (r_i − r_j) / (n_G·(σ_G + eps))``, with the pairs
    whose distinctiveness ``d_ij = 1 − cos(e_i, e_j)`` is below ``min_distinctiveness`` left out of the sum.

    Args:
        rewards: ``[N]`` combined rewards; NaN = missing (excluded from every pair; the sample gets 0).
        embeddings: ``[N, H]`` one vector per sample.
        group_ids: ``[N]`` the group of each sample.
        min_distinctiveness: ``δ >= 0``; 0 keeps every pair (exactly GRPO: ``Σ_j (r_i − r_j)/n = r_i − mean``).
        eps: added to the group std (unbiased, as ``grpo``).
    """
    groups = make_groups(group_ids, rewards.shape[0], min_size=1)
    stats = group_stats(rewards[:, None].double(), groups, unbiased=True)  # [G, 1]
    present = ~torch.isnan(rewards)  # [N]
    values = torch.where(present, rewards, 0.0).double()  # [N]
    unit = F.normalize(embeddings.double(), dim=1)  # [N, H]
    distinct = 1.0 - unit @ unit.T  # [N, N] d_ij
    paired = (groups.index[:, None] == groups.index[None, :]) & present[:, None] & present[None, :]  # [N, N]
    kept = paired & (distinct >= min_distinctiveness)  # [N, N]
    differences = torch.where(kept, values[:, None] - values[None, :], 0.0).sum(1)  # [N]
    count, std = stats.count[groups.index, 0].double(), stats.std[groups.index, 0].double()  # [N]
    usable = present & (count >= 2) & ~stats.constant[groups.index, 0]  # [N]
    return torch.where(usable, differences / (count.clamp_min(1.0) * (std + eps)), 0.0).to(rewards.dtype)


@CREDIT_RULES.register(
    "distinct_pairs",
    needs=("hidden", "combined_reward"),
    replaces=True,
    formula="d_ij = 1 − cos(e_i, e_j), e = mean hidden state of the completion; A_i = Σ_{j∈G, d_ij ≥ δ} (r_i − r_j) "
    "/ (n_G·(std_G + eps)) on every action (δ = 0: GRPO)",
    source="[286] DaGRPO (sequence-level gradient rectification; its off-policy anchors for hard queries are the "
    "gcpo sample source)",
    summary="Writes the group advantage as a sum over sample pairs and masks the pairs of near-identical samples, "
    "whose opposite updates on shared tokens only conflict.",
)
def distinct_pairs(
    advantages: Tensor, batch: StepBatch, *, min_distinctiveness: float = 0.05, eps: float = 1e-6
) -> Tensor:
    """DaGRPO's Sequence-level Gradient Rectification [286]: GRPO's advantage is a sum over the pairs of a group,
    ``r_i − mean_G r = (1/n) Σ_j (r_i − r_j)``; when two samples are nearly the same sequence but one is rewarded and
    the other not (common among the homogeneous samples of routine queries), their pair pushes the shared tokens up
    and down at once: a gradient conflict with no information. Masking the pairs of low distinctiveness removes those
    conflicts at the source, and pairs of genuinely different samples keep their full weight.

    Reading chosen: the abstract names "fine-grained scoring" of distinctiveness without its form; genalign scores a
    pair by ``d_ij = 1 − cos(e_i, e_j)`` of the completions' mean last hidden states (feature ``hidden``, as the
    ``submodular_diversity`` shaper) and masks pairs with ``d_ij < δ``; the normaliser stays GRPO's
    ``n_G·(std_G + eps)``, so masking only removes terms and ``δ = 0`` gives GRPO exactly. The rule replaces the
    estimator's advantages (it must come first in ``algorithm.credit``). DaGRPO's off-policy data augmentation (high-
    quality anchors for hard queries) is the ``gcpo`` sample source (a reference solution joins a group whose samples
    all failed).

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced).
        batch: reads ``combined_reward`` ``[N]``, ``hidden`` ``[N, T, H]``, ``group_ids`` and ``mask``.
        min_distinctiveness: ``δ`` in ``[0, 2]``.
        eps: added to the group std.
    Returns:
        ``[N, T]`` the pair-masked advantage of each sample on its actions.
    """
    if not 0.0 <= min_distinctiveness <= 2.0 or not eps >= 0:
        raise ValueError(
            f"need min_distinctiveness in [0, 2] (1 − cosine similarity) and eps >= 0, got {min_distinctiveness!r}, "
            f"{eps!r}"
        )
    mask = batch.mask
    rewards = batch.require("combined_reward", "credit rule 'distinct_pairs'").to(advantages.device)
    embeddings = sequence_embeddings(batch.require("hidden", "credit rule 'distinct_pairs'"), mask)  # [N, H]
    sample = distinct_pair_advantages(
        rewards.to(advantages.dtype), embeddings.to(advantages.device), batch.group_ids.to(advantages.device),
        min_distinctiveness=min_distinctiveness, eps=eps,
    )  # fmt: skip
    return expand_advantages(sample, tuple(mask.shape)).clone()  # [N, T]
