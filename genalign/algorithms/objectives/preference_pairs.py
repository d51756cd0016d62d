"""Preference pairs formed inside each group from the group's own samples, shared by every preference objective
(DPO-family terms against the reference, TRPA, pairwise PPO, ...).

A group's samples are ranked by their combined reward (the step signal ``combined_reward``: the weighted sum of the
reward functions after shaping; NaN = missing, never paired). Two selections:

* ``"all"``: every ordered pair ``(w, l)`` of the group with ``r_w − r_l > min_gap`` (pairs across all preference
  levels, TRPA [178]; a group of ``G`` samples with distinct rewards gives ``G(G−1)/2`` pairs);
* ``"best_worst"``: one pair per group, the best sample against the worst (ties to the lower index), when their gap
  exceeds ``min_gap`` (the on-policy pair construction of iterative DPO; rDPO [285] keeps a pair only when its scores
  differ enough: ``min_gap``).

Placement rule (pairs -> per-action loss). Each pair's loss ``ℓ_p`` is weighted by ``G_q / P_q`` (its group's size over
its pair count) and split in halves onto the chosen and the rejected sample, then written on every valid action of the
sample (:func:`~genalign.algorithms.objectives.group_terms.on_actions`). With ``aggregation: seq_mean_token_mean`` the
aggregated loss is ``(1/N) Σ_q G_q · mean_{p∈q} ℓ_p``, i.e. the mean over groups of each group's mean pair loss (groups
of equal size), whatever the micro-batch split; a group without a pair contributes 0. Where the value is written does
not change the gradient: every pair's loss reaches both of its samples' log-probs. The objectives that use this rule
declare ``aggregation="seq_mean_token_mean"`` and ``whole_groups=True``. ``n`` samples, ``P`` pairs, ``T`` actions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from genalign.algorithms._groups import Groups
from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.objectives.group_terms import batch_inputs, on_actions
from genalign.algorithms.scores import ScoreOutput

PairSelection = Literal["all", "best_worst"]
PAIR_SELECTIONS: tuple[str, ...] = ("all", "best_worst")


@dataclass(frozen=True)
class PreferencePairs:
    """Ordered pairs ``(chosen, rejected)`` of samples of one group, the chosen one with the higher reward.

    Attributes:
        chosen, rejected: ``[P]`` long, sample indices.
        group: ``[P]`` long, the pair's group in ``0 .. G-1`` (``groups.index`` numbering).
        gap: ``[P]`` ``r_chosen − r_rejected`` (> ``min_gap``).
        chosen_reward: ``[P]`` ``r_chosen``.
        groups: the micro-batch's groups.
    """

    chosen: Tensor
    rejected: Tensor
    group: Tensor
    gap: Tensor
    chosen_reward: Tensor
    groups: Groups

    @property
    def num_pairs(self) -> int:
        return int(self.chosen.numel())

    def per_group(self) -> Tensor:
        """Pairs in each group ``[G]`` (float)."""
        counts = torch.zeros(self.groups.num_groups, dtype=torch.float32, device=self.chosen.device)
        return counts.index_add(0, self.group, torch.ones_like(self.group, dtype=torch.float32))


def check_pair_options(selection: str, min_gap: float) -> None:
    """Raise a ``ValueError`` naming the bad pair option and the accepted values."""
    if selection not in PAIR_SELECTIONS:
        raise ValueError(f"pairs={selection!r} is not a pair selection; use one of {', '.join(PAIR_SELECTIONS)}.")
    if not min_gap >= 0:
        raise ValueError(f"min_gap={min_gap!r} must be >= 0 (the reward gap a pair needs, e.g. 0.0).")


def group_pairs(
    rewards: Tensor, groups: Groups, *, selection: PairSelection = "all", min_gap: float = 0.0
) -> PreferencePairs:
    """The preference pairs of each group (module docstring).

    Args:
        rewards: ``[n]`` combined rewards (NaN: missing, never paired).
        groups: the samples' groups.
        selection: ``"all"`` or ``"best_worst"``.
        min_gap: a pair needs ``r_chosen − r_rejected > min_gap``.
    """
    check_pair_options(selection, min_gap)
    rewards = rewards.detach().double()  # gaps exact for any reward dtype
    index = groups.index.to(rewards.device)
    if selection == "all":
        same_group = index[:, None] == index[None, :]  # [n, n]
        better = (rewards[:, None] - rewards[None, :]) > min_gap  # [n, n] (False with a NaN)
        chosen, rejected = torch.nonzero(same_group & better, as_tuple=True)  # [P], [P]
    else:
        chosen, rejected = _best_and_worst(rewards, index, groups.num_groups, min_gap)
    return PreferencePairs(
        chosen=chosen,
        rejected=rejected,
        group=index[chosen],
        gap=rewards[chosen] - rewards[rejected],
        chosen_reward=rewards[chosen],
        groups=groups,
    )


def _best_and_worst(rewards: Tensor, index: Tensor, num_groups: int, min_gap: float) -> tuple[Tensor, Tensor]:
    """``(best, worst)`` ``[P]`` sample indices of the groups whose best-worst gap exceeds ``min_gap``."""
    n = rewards.shape[0]
    valid = ~torch.isnan(rewards)  # [n]
    positions = torch.arange(n, device=rewards.device)  # [n]
    high = rewards.new_full((num_groups,), -torch.inf).scatter_reduce(
        0, index, torch.where(valid, rewards, -torch.inf), "amax"
    )  # [G]
    low = rewards.new_full((num_groups,), torch.inf).scatter_reduce(
        0, index, torch.where(valid, rewards, torch.inf), "amin"
    )  # [G]
    first = positions.new_full((num_groups,), n)  # [G]
    best = first.scatter_reduce(0, index, torch.where(valid & (rewards == high[index]), positions, n), "amin")
    worst = first.scatter_reduce(0, index, torch.where(valid & (rewards == low[index]), positions, n), "amin")
    keep = torch.isfinite(high) & ((high - low) > min_gap)  # [G]
    return best[keep], worst[keep]


@dataclass(frozen=True)
class PreferenceInputs:
    """What a preference objective reads from one micro-batch.

    Attributes:
        logp: ``[n, T]`` float32 log-probs with grad; ref_logp: ``[n, T]`` the reference's (None when not asked).
        mask: ``[n, T]`` float; pairs: the micro-batch's preference pairs.
    """

    logp: Tensor
    ref_logp: Tensor | None
    mask: Tensor
    pairs: PreferencePairs


def preference_inputs(
    score: ScoreOutput,
    batch: StepBatch,
    option: str,
    *,
    selection: PairSelection,
    min_gap: float,
    reference: bool = True,
) -> PreferenceInputs:
    """Log-probs, mask, pairs (from ``combined_reward``) and, with ``reference``, the reference's log-probs
    ``ref_logp`` of a micro-batch; a ``ValueError`` naming ``option`` for a missing signal."""
    check_pair_options(selection, min_gap)
    logp, mask, groups = batch_inputs(score, batch, option)
    rewards = require(batch, "combined_reward", f"objective {option!r}")
    pairs = group_pairs(rewards.to(logp.device), groups, selection=selection, min_gap=min_gap)
    ref_logp = require(batch, "ref_logp", f"objective {option!r}").to(logp) if reference else None
    return PreferenceInputs(logp=logp, ref_logp=ref_logp, mask=mask, pairs=pairs)


def summed_log_ratio(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """``h_i = Σ_t m_it (logπθ − logπ_ref)`` ``[n]`` (the DPO implicit reward over β); padding may hold anything."""
    return torch.where(mask > 0, logp - ref_logp.to(logp.dtype), 0.0).sum(1)  # [n]


def bradley_terry_loss(logits: Tensor) -> Tensor:
    """``−log σ(z)`` ``[P]`` of the pairs' preference logits ``z`` (numerically stable)."""
    return F.softplus(-logits)  # [P]


def pairs_on_actions(pair_losses: Tensor, pairs: PreferencePairs, mask: Tensor) -> Tensor:
    """Place each pair's loss ``[P]`` on its two samples' actions ``[n, T]`` (module docstring, placement rule)."""
    sizes = pairs.groups.sizes.to(device=pair_losses.device, dtype=pair_losses.dtype)  # [G]
    counts = pairs.per_group().to(pair_losses.dtype).clamp_min(1.0)  # [G]
    half = 0.5 * pair_losses * (sizes / counts)[pairs.group]  # [P]
    per_sample = pair_losses.new_zeros(mask.shape[0])  # [n]
    per_sample = per_sample.index_add(0, pairs.chosen, half).index_add(0, pairs.rejected, half)
    return on_actions(per_sample, mask)  # [n, T]


def pair_metrics(prefix: str, logits: Tensor, pairs: PreferencePairs) -> dict[str, Tensor]:
    """``{prefix}/pairs`` (pairs per group), ``{prefix}/ordered_pairs`` (pairs per group whose logit is already > 0:
    the policy ranks them as the rewards do) and ``{prefix}/margin`` (mean logit over the pairs; 0 without pairs)."""
    with torch.no_grad():
        groups = max(pairs.groups.num_groups, 1)
        ordered = float((logits > 0).sum()) / groups
        margin = logits.detach().float().mean() if pairs.num_pairs else torch.tensor(0.0)
        return {
            f"{prefix}/pairs": torch.tensor(pairs.num_pairs / groups),
            f"{prefix}/ordered_pairs": torch.tensor(ordered),
            f"{prefix}/margin": margin,
        }


__all__ = [
    "PAIR_SELECTIONS",
    "PairSelection",
    "PreferenceInputs",
    "PreferencePairs",
    "bradley_terry_loss",
    "check_pair_options",
    "group_pairs",
    "pair_metrics",
    "pairs_on_actions",
    "preference_inputs",
    "summed_log_ratio",
]
