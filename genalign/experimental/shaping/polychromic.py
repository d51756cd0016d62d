"""The polychromic set objective [242]: a completion is worth the mean score of the sets of its group's completions
it belongs to, where a set scores its mean reward times its diversity (a reward shaper of :data:`REWARD_SHAPERS`; the
credit rule ``polychromic_vine`` of :mod:`genalign.experimental.credit.vine_sets` draws the sets among the
continuations of one vine state instead)."""

from __future__ import annotations

import math
from itertools import combinations

import torch
import torch.nn.functional as F
from torch import Tensor

from genalign.algorithms._groups import make_groups
from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS
from genalign.experimental.shaping.diversity import sequence_embeddings


def member_sets(size: int, set_size: int, *, max_sets: int, generator: torch.Generator) -> Tensor:
    """``[S, n]`` long: sets of ``n = set_size`` of the positions ``0 .. size−1``. Every set when there are at most
    ``max_sets``; otherwise rounds of one random permutation each, cut into consecutive sets (a permutation that does
    not divide evenly is continued from its start), as many rounds as give about ``max_sets`` sets, so that every
    position is in (almost) the same number of sets."""
    if math.comb(size, set_size) <= max_sets:
        return torch.tensor(list(combinations(range(size), set_size)), dtype=torch.long).view(-1, set_size)
    per_round = math.ceil(size / set_size)
    rounds = max(1, max_sets // per_round)
    sets = []
    for _ in range(rounds):
        order = torch.randperm(size, generator=generator)
        order = torch.cat([order, order[: per_round * set_size - size]])  # wrap to a multiple of n
        sets.append(order.view(per_round, set_size))
    return torch.cat(sets)


def set_diversity(similarity: Tensor, sets: Tensor, threshold: float) -> Tensor:
    """``[S]``: the share of each set's members that are not a near-copy (cosine ``>= threshold``) of an earlier
    member of the set (the number of distinct members over ``n``); ``similarity`` ``[m, m]``, ``sets`` ``[S, n]``."""
    pairwise = similarity[sets[:, :, None], sets[:, None, :]]  # [S, n, n]
    earlier = torch.ones(sets.shape[1], sets.shape[1], dtype=torch.bool, device=sets.device).tril(-1)  # j < k
    repeated = ((pairwise >= threshold) & earlier).any(-1)  # [S, n] member k repeats an earlier member
    return (~repeated).double().mean(1)


def pool_set_scores(
    values: Tensor, unit: Tensor, set_size: int, threshold: float, *, max_sets: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """The polychromic scores of the sets drawn from one pool of ``m`` completions.

    Args:
        values: ``[m]`` float64 rewards. unit: ``[m, H]`` float64 unit-norm embeddings.
        set_size, threshold, max_sets, generator: see :func:`polychromic_sets`.
    Returns:
        ``(mean_{S ∋ i} f(S) [m], mean_S f(S) [], mean set diversity [])``.
    """
    sets = member_sets(values.shape[0], set_size, max_sets=max_sets, generator=generator)  # [S, n]
    diversity = set_diversity(unit @ unit.T, sets, threshold)  # [S]
    score = values[sets].mean(1) * diversity  # [S] f(S)
    total = torch.zeros(values.shape[0], dtype=torch.float64).index_add_(
        0, sets.flatten(), score.repeat_interleave(set_size)
    )
    count = torch.bincount(sets.flatten(), minlength=values.shape[0]).double()  # [m]
    return total / count.clamp_min(1.0), score.mean(), diversity.mean()


@REWARD_SHAPERS.register(
    "polychromic_sets",
    needs=("hidden",),
    formula="f(S) = (mean_{i∈S} r_i)·d(S), d(S) = share of S's members that are not a near-copy (cos(e_i, e_j) ≥ τ) "
    "of an earlier member, e = mean hidden state; sets S of n of the group's samples; r̃_i = mean_{S ∋ i} f(S) "
    "(with dr_grpo: A_i = mean_{S∋i} f(S) − mean_S f(S), the set-level marginal advantage)",
    source="[242] polychromic objective (set RL; sets drawn from the group; polychromic_vine: from vine states)",
    summary="Set-level objective: a completion is credited with the score of the sets it belongs to, where a set "
    "scores its mean reward times its diversity, so a failed but different completion can still gain mass.",
)
def polychromic_sets(
    rewards: Tensor,
    batch: StepBatch,
    *,
    set_size: int = 4,
    similarity_threshold: float = 0.95,
    max_sets: int = 4096,
    seed: int = 0,
) -> tuple[Tensor, dict[str, float]]:
    """The polychromic objective of set RL [242]: instead of one trajectory's reward, the policy optimises the score of
    a *set* of ``n`` trajectories, ``f(S) = (mean reward of S) · (diversity of S)``, which is high only for sets that
    are both successful and diverse. The advantage of a trajectory under a set objective is its marginal one: the mean
    score of the sets that contain it minus the mean score of all sets. This shaper returns the first term; the
    estimator subtracts the second (``advantage: dr_grpo`` gives exactly the marginal advantage, since every sample
    is in equally many sets; ``grpo`` also divides by the group's spread).

    Reading chosen: the paper draws sets with vine sampling (several continuations from intermediate states); here the
    sets are subsets of the group's samples (``polychromic_vine`` draws them among continuations of a shared state). Diversity is the share of
    distinct members, two completions being "the same" when the cosine similarity of their mean last hidden states
    (the policy's own, feature ``hidden``) is at least ``τ`` (exact copies have similarity 1). ``n = 1`` gives
    ``f = r``: plain RL. A missing reward leaves its sample out of the sets (it stays missing); a group with fewer
    valid samples than ``n`` keeps its rewards.

    Args:
        rewards: ``[N]`` combined rewards.
        batch: reads ``hidden`` ``[N, T, H]``, ``mask`` and ``group_ids``.
        set_size: ``n >= 1`` samples per set.
        similarity_threshold: ``τ`` in ``(0, 1]``: near-copies count once.
        max_sets: enumerate every set of a group when there are at most this many, else draw about this many.
        seed: the generator of the drawn sets (the same batch always gets the same sets).
    Returns:
        ``(r̃ [N], {"reward_shaping/set_diversity_mean"})``.
    """
    if set_size < 1 or not 0 < similarity_threshold <= 1 or max_sets < 1:
        raise ValueError(f"polychromic_sets: need set_size >= 1, similarity_threshold in (0, 1] and max_sets >= 1; got "
                         f"{set_size!r}, {similarity_threshold!r}, {max_sets!r}.")  # fmt: skip
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    embeddings = F.normalize(sequence_embeddings(batch.require("hidden", "polychromic_sets"), batch.mask), dim=1)
    groups = make_groups(batch.group_ids.cpu(), rewards.shape[0], min_size=1)
    values, present = rewards.detach().double().cpu(), ~torch.isnan(rewards.detach().cpu())
    shaped, diversities = values.clone(), []
    generator = torch.Generator().manual_seed(seed)
    for group in range(groups.num_groups):
        members = torch.nonzero((groups.index == group) & present).flatten()  # [m]
        if members.numel() < set_size:
            continue
        unit = embeddings[members].double().cpu()  # [m, H]
        member_score, _, diversity = pool_set_scores(
            values[members], unit, set_size, similarity_threshold, max_sets=max_sets, generator=generator
        )
        shaped[members] = member_score
        diversities.append(diversity)
    mean_diversity = float(torch.stack(diversities).mean()) if diversities else 1.0
    return shaped.to(rewards.device, rewards.dtype), {"reward_shaping/set_diversity_mean": mean_diversity}
