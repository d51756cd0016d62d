"""D3S sample-level budgets [27], whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import math

import torch

from genalign.experimental.credit.sampling import annealed_fraction, check_schedule
from genalign.sampling.base import SAMPLE_SOURCES, Decision, Outcome, RuleDefaults
from genalign.sampling.budgets import informative_subset


@SAMPLE_SOURCES.register(
    "d3s_samples",
    formula="ρ = ρ₀ + (1−ρ₀)·min(progress/p_relax, 1); per group of m samples keep S, |S| = max(min_keep, "
    "⌈ρ·m⌉), maximising Var_{i∈S}(r_i) (= Var of the group's advantages, an affine map of r within a group); the "
    "rest dropped before the advantages",
    source="[27] D³S (sample-level down-sampling with the dynamic schedule)",
    summary="Keep, in each group, the subset of rollouts with the largest advantage variance (the extremes), "
    "aggressively early in training and relaxing to every rollout as training progresses.",
)
class D3SSamples(RuleDefaults):
    """[27] D³S, sample level: keep the subset of each group's rollouts that maximises the advantage variance.

    Within a group the advantages are an increasing affine map of the rewards (GRPO's ``(r − μ)/σ``), so the subset
    of ``k`` rollouts that maximises ``Var(A)`` is the one that maximises the variance of their rewards
    (:func:`max_variance_subset`: the lowest and highest rewards). The dropped rollouts leave before the advantages,
    which are then computed over the kept subset (as GFPO's). The dynamic schedule keeps ``ρ`` of each group,
    ``ρ₀`` at the start and rising linearly to all rollouts at progress ``p_relax``
    (:func:`~genalign.experimental.credit.sampling.annealed_fraction`, shared with the token level ``d3s_tokens``):
    the abstract's schedule "starts with aggressive down-sampling ... gradually relaxes". A sample without reward is
    kept only when too few have one (:func:`informative_subset`).

    Reading chosen: selection within each group (``k`` of its ``G`` rollouts); the linear schedule and its defaults
    (``ρ₀ = 0.5``, ``p_relax = 0.75``) are genalign's choices.

    Args:
        start_fraction: ``ρ₀`` in ``(0, 1]``, the fraction of each group kept at the start.
        relax_until: ``p_relax`` in ``[0, 1]``, the progress from which every rollout is kept (0 = never drop).
        min_keep: the fewest rollouts kept per group (>= 2, so a group keeps a baseline).
    """

    def __init__(self, *, start_fraction: float = 0.5, relax_until: float = 0.75, min_keep: int = 2) -> None:
        check_schedule(start_fraction, relax_until)
        if not (isinstance(min_keep, int) and min_keep >= 2):
            raise ValueError(f"min_keep = {min_keep!r} must be an integer >= 2 (a group needs a baseline)")
        self.start, self.relax_until, self.min_keep = start_fraction, relax_until, min_keep

    def after_rewards(self, outcome: Outcome) -> Decision:
        fraction = annealed_fraction(outcome.progress, self.start, self.relax_until)
        keep = torch.zeros(len(outcome), dtype=torch.bool)
        for position in outcome.positions.unique().tolist():
            members = (outcome.positions == position).nonzero().flatten()  # [m] in sampling order
            k = max(self.min_keep, math.ceil(fraction * members.shape[0] - 1e-9))
            keep[members[informative_subset(outcome.rewards[members].double(), k)]] = True
        return Decision(keep=keep, stats={"keep_fraction": fraction})
