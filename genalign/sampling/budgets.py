"""Rollout budgets: how many samples each prompt gets, and which of them the update trains on (GFPO [109], D³S's
sample-level down-sampling [27]; the adaptive extra rounds are in :mod:`genalign.experimental.sampling.allocation`)."""

from __future__ import annotations

import math
from typing import Literal

import torch

from genalign.sampling.base import SAMPLE_SOURCES, Decision, Outcome, RuleDefaults


@SAMPLE_SOURCES.register(
    "gfpo",
    formula="draw G' = samples per prompt; keep S = the k = group_size samples of each group with the smallest "
    "|o_i| (metric length) or the largest r_i/|o_i| (metric token_efficiency); advantages over S only, the rest "
    "dropped",
    source="[109] GFPO",
    summary="Sample a larger group per prompt and train only on the filtered subset (the shortest, or the most "
    "reward per token), which curbs length inflation.",
)
class GFPO(RuleDefaults):
    """[109] GFPO: sample ``G' = samples`` completions per prompt, train on the ``k = algorithm.group_size`` of each
    group that score best on the metric, and compute the advantages over that subset only (the others are dropped
    before the advantages, so ``Â_i = (r_i − mean_S)/std_S`` for ``i ∈ S``).

    Metrics: ``length`` keeps the ``k`` shortest ``|o_i|``; ``token_efficiency`` keeps the ``k`` largest
    ``r_i / |o_i|`` (``r_i`` the weighted reward sum; a sample without reward ranks last). Ties keep sampling order.
    The paper's Adaptive-Difficulty GFPO (``k`` per prompt from a difficulty estimate) is not part of this rule.

    Args:
        samples: ``G'``, completions drawn per prompt; must exceed ``algorithm.group_size`` (the retained ``k``).
        metric: ``"length"`` or ``"token_efficiency"``.
    """

    def __init__(self, *, samples: int = 16, metric: Literal["length", "token_efficiency"] = "length") -> None:
        if metric not in ("length", "token_efficiency"):
            raise ValueError(f"metric = {metric!r} must be 'length' or 'token_efficiency'")
        if not (isinstance(samples, int) and samples >= 2):
            raise ValueError(f"samples = {samples!r} must be an integer >= 2 (completions drawn per prompt)")
        self.samples, self.metric, self.retained = samples, metric, samples

    def samples_per_prompt(self, group_size: int) -> int:
        if self.samples <= group_size:
            raise ValueError(
                f"gfpo samples = {self.samples} must exceed algorithm.group_size = {group_size}, the samples of each "
                f"group it keeps; raise samples (the paper draws 16 or 24 and keeps 8) or lower group_size."
            )
        self.retained = group_size
        return self.samples

    def after_rewards(self, outcome: Outcome) -> Decision:
        lengths = outcome.lengths.clamp_min(1.0)  # [N]
        if self.metric == "length":
            score = lengths  # smaller is better
        else:
            score = torch.where(outcome.rewards.isnan(), float("inf"), -outcome.rewards / lengths)  # [N]
        keep = torch.zeros(len(outcome), dtype=torch.bool)
        for position in outcome.positions.unique().tolist():
            members = (outcome.positions == position).nonzero().flatten()  # [G'] in sampling order
            order = torch.sort(score[members], stable=True).indices  # [G']
            keep[members[order[: self.retained]]] = True
        stats = {
            "length_mean_kept": float(outcome.lengths[keep].mean()) if keep.any() else float("nan"),
            "length_mean_all": float(outcome.lengths.mean()) if len(outcome) else float("nan"),
        }
        return Decision(keep=keep, stats=stats)


def max_variance_subset(values: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (ascending) of the ``k`` entries of ``values`` ``[m]`` whose population variance is largest.

    A variance-maximising subset of reals is always made of the ``j`` smallest and the ``k − j`` largest values
    for some ``j`` (moving an inner value outward never lowers the spread), so the ``k + 1`` such splits are
    compared; ties between splits keep the smallest ``j``, ties between equal values keep the earlier samples (an
    all-equal group keeps its first ``k``)."""
    m = values.shape[0]
    if k >= m:
        return torch.arange(m)
    values = values.double()
    ascending = torch.sort(values, stable=True).indices  # [m]
    descending = torch.sort(-values, stable=True).indices  # [m]
    best, best_var = descending[:k], -math.inf
    for low in range(k + 1):
        subset = torch.cat([ascending[:low], descending[: k - low]])  # [k]
        if subset.unique().numel() < k:
            continue  # equal values on both sides: the split is covered by another j
        var = float(values[subset].var(unbiased=False))
        if var > best_var + 1e-12:
            best, best_var = subset, var
    return best.sort().values


def informative_subset(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (ascending) of ``k`` samples of a group with rewards ``[m]`` (NaN = no reward): the max-variance
    subset of the rewarded samples (:func:`max_variance_subset`), topped up with the earliest unrewarded samples
    when fewer than ``k`` have a reward."""
    given = (~rewards.isnan()).nonzero().flatten()  # [m_valid]
    if given.numel() >= k:
        return given[max_variance_subset(rewards[given], k)]
    missing = rewards.isnan().nonzero().flatten()[: k - given.numel()]
    return torch.cat([given, missing]).sort().values
