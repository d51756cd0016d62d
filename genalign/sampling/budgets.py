"""Rollout budgets: how many samples each prompt gets, and which of them the update trains on (GFPO [109], D³S's
sample-level down-sampling [27]; the adaptive extra rounds are in :mod:`genalign.experimental.sampling.allocation`)."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch

from genalign.sampling.base import SAMPLE_SOURCES, Decision, Outcome, RuleDefaults


@SAMPLE_SOURCES.register(
    "gfpo",
    formula="draw G' = samples per prompt; keep S = the k samples of each group with the smallest |o_i| (metric "
    "length) or the largest r_i/|o_i| (metric token_efficiency); k = group_size, or with adaptive_k = [k_1..k_4] "
    "the k of the prompt's difficulty quartile (mean reward r̄_x against the quartiles of recent prompts' r̄, hardest "
    "first); advantages over S only, the rest dropped",
    source="[109] GFPO; differs: the adaptive-difficulty quartiles come from a bounded window of recent prompts, not a t-digest",
    summary="Sample a larger group per prompt and train only on the filtered subset (the shortest, or the most "
    "reward per token), which curbs length inflation; Adaptive-Difficulty GFPO keeps more samples of harder prompts.",
)
class GFPO(RuleDefaults):
    """[109] GFPO: sample ``G' = samples`` completions per prompt, train on the ``k`` of each group that score best on
    the metric, and compute the advantages over that subset only (the others are dropped before the advantages, so
    ``Â_i = (r_i − mean_S)/std_S`` for ``i ∈ S``).

    Metrics: ``length`` keeps the ``k`` shortest ``|o_i|``; ``token_efficiency`` keeps the ``k`` largest
    ``r_i / |o_i|`` (``r_i`` the weighted reward sum; a sample without reward ranks last). Ties keep sampling order.

    ``k`` is ``algorithm.group_size``, or, with ``adaptive_k``, the paper's Adaptive-Difficulty GFPO: each prompt's
    difficulty is the mean reward ``r̄_x`` of its ``G'`` samples; the prompts of recent steps (the last ``history``
    values, this step's included) give the quartiles ``q₁ ≤ q₂ ≤ q₃``, and a prompt in quartile ``j`` (``j = #{q :
    r̄_x > q}``, 0 = hardest) keeps ``adaptive_k[j]`` samples, so harder prompts get more of the training budget.
    The paper keeps 8 / 8 / 6 / 4 of 16 (very hard → easy). Where genalign differs: exact quantiles of a bounded window of
    recent difficulties stand in for the paper's streaming t-digest (same buckets once the window holds the run's
    recent prompts; the window is part of the checkpoint); a prompt without any reward counts as hardest.

    Args:
        samples: ``G'``, completions drawn per prompt; must exceed ``algorithm.group_size`` and every ``adaptive_k``.
        metric: ``"length"`` or ``"token_efficiency"``.
        adaptive_k: four retained counts (hardest quartile first), each in ``[2, samples)``; None = ``group_size``.
        history: recent prompt difficulties the quartiles are computed from (>= 4).
    """

    def __init__(
        self,
        *,
        samples: int = 16,
        metric: Literal["length", "token_efficiency"] = "length",
        adaptive_k: list[int] | None = None,
        history: int = 1024,
    ) -> None:
        if metric not in ("length", "token_efficiency"):
            raise ValueError(f"metric = {metric!r} must be 'length' or 'token_efficiency'")
        if not (isinstance(samples, int) and samples >= 2):
            raise ValueError(f"samples = {samples!r} must be an integer >= 2 (completions drawn per prompt)")
        if adaptive_k is not None and not (
            len(adaptive_k) == 4 and all(isinstance(k, int) and 2 <= k < samples for k in adaptive_k)
        ):
            raise ValueError(
                f"adaptive_k = {adaptive_k!r} must be four integers in [2, samples = {samples}) (samples kept per "
                "difficulty quartile, hardest first), e.g. [8, 8, 6, 4] with samples = 16"
            )
        if not (isinstance(history, int) and history >= 4):
            raise ValueError(f"history = {history!r} must be an integer >= 4 (recent prompt difficulties kept)")
        self.samples, self.metric, self.retained = samples, metric, samples
        self.adaptive_k, self.history = adaptive_k, history
        self.difficulties: list[float] = []  # recent prompts' mean rewards, oldest first (adaptive_k only)

    def samples_per_prompt(self, group_size: int) -> int:
        if self.samples <= group_size:
            raise ValueError(
                f"gfpo samples = {self.samples} must exceed algorithm.group_size = {group_size}, the samples of each "
                f"group it keeps; raise samples (the paper draws 16 or 24 and keeps 8) or lower group_size."
            )
        self.retained = group_size
        return self.samples

    def retained_counts(self, mean_rewards: list[float]) -> list[int]:
        """Samples to keep of each prompt, given the prompts' mean rewards (NaN: no reward); updates the window."""
        if self.adaptive_k is None:
            return [self.retained] * len(mean_rewards)
        difficulty = [-math.inf if math.isnan(m) else m for m in mean_rewards]
        self.difficulties = (self.difficulties + [d for d in difficulty if d != -math.inf])[-self.history :]
        if not self.difficulties:
            return [self.adaptive_k[0]] * len(mean_rewards)
        quartiles = torch.tensor(self.difficulties, dtype=torch.float64).quantile(
            torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)
        )  # [3]
        return [self.adaptive_k[int((d > quartiles).sum())] for d in difficulty]

    def after_rewards(self, outcome: Outcome) -> Decision:
        lengths = outcome.lengths.clamp_min(1.0)  # [N]
        if self.metric == "length":
            score = lengths  # smaller is better
        else:
            score = torch.where(outcome.rewards.isnan(), float("inf"), -outcome.rewards / lengths)  # [N]
        keep = torch.zeros(len(outcome), dtype=torch.bool)
        groups = [(outcome.positions == p).nonzero().flatten() for p in outcome.positions.unique().tolist()]
        means = [float(outcome.rewards[g].nanmean()) for g in groups]
        counts = self.retained_counts(means)
        for members, k in zip(groups, counts):  # members: [G'] in sampling order
            order = torch.sort(score[members], stable=True).indices  # [G']
            keep[members[order[:k]]] = True
        stats = {
            "length_mean_kept": float(outcome.lengths[keep].mean()) if keep.any() else float("nan"),
            "length_mean_all": float(outcome.lengths.mean()) if len(outcome) else float("nan"),
        }
        if self.adaptive_k is not None:
            stats["kept_per_prompt"] = sum(counts) / max(len(counts), 1)
        return Decision(keep=keep, stats=stats)

    def state_dict(self) -> dict[str, Any]:
        return {"difficulties": list(self.difficulties)} if self.adaptive_k is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.adaptive_k is not None:
            self.difficulties = [float(d) for d in state.get("difficulties", [])]


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
