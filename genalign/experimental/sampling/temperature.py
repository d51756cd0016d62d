"""Diversity-determined sampling temperature ([125] MicroCoder-GRPO): a closed loop on a ladder of temperatures that
keeps the groups' output diversity inside a band (a rule of the sample-source stage)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

from genalign.experimental.sampling.boundaries import distinct_ngram_ratio
from genalign.policies.base import GUIDANCE_KEY
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, RuleDefaults


@SAMPLE_SOURCES.register(
    "diversity_temperature",
    formula="d_t = mean over the step's groups of the distinct-n ratio of the group's completions; rung k ← k + 1 "
    "when d_t < low, k − 1 when d_t > high (within the ladder); the next step's prompts are sampled at T_k",
    source="[125] MicroCoder-GRPO (diversity-determined temperature selection)",
    summary="Choose the sampling temperature from the diversity of the last step's groups: one rung hotter when the "
    "groups' completions repeat each other, one rung cooler when they scatter.",
)
class DiversityTemperature(RuleDefaults):
    """[125] MicroCoder-GRPO's diversity-determined temperature selection.

    After each step the rule measures the output diversity ``d_t``: the distinct-``n``-gram ratio of each group's
    completions (:func:`~genalign.experimental.sampling.boundaries.distinct_ngram_ratio`: 1 = no repeated ``n``-gram
    within or across the group's completions, ``1/G`` for ``G`` identical ones), averaged over the groups. Below the
    band ``[low, high]`` the temperature moves one rung up the ladder, above it one rung down; every prompt of the
    next step is sampled at the current rung (guidance ``{"temperature": T_k}``, merged into any guidance an earlier
    rule attached). The rung is part of the checkpoint.

    Reading chosen: the abstract names the selection ("to maintain and encourage output diversity") but not its
    rule; genalign reads it as this closed loop over an explicit ladder, with the diversity measure of VAS [110] and
    genalign's default band.

    Args:
        temperatures: the ladder, strictly increasing, every entry > 0.
        start: the first step's temperature, an entry of the ladder (``policy.temperature`` in most runs).
        low, high: the diversity band, ``0 <= low < high <= 1``.
        ngram: ``n`` of the distinct-``n`` ratio (>= 1).
    """

    needs_tokens = True
    needs_guidance = frozenset({"temperature"})

    def __init__(
        self,
        *,
        temperatures: tuple[float, ...] = (0.6, 0.8, 1.0, 1.2, 1.4),
        start: float = 1.0,
        low: float = 0.4,
        high: float = 0.8,
        ngram: int = 2,
    ) -> None:
        ladder = [float(t) for t in temperatures]
        if not ladder or any(t <= 0 for t in ladder) or any(b <= a for a, b in itertools.pairwise(ladder)):
            raise ValueError(f"temperatures = {list(temperatures)!r} must be strictly increasing values > 0")
        if float(start) not in ladder:
            raise ValueError(f"start = {start!r} must be one of temperatures = {ladder}")
        if not 0 <= low < high <= 1:
            raise ValueError(f"need 0 <= low < high <= 1 (the diversity band), got low = {low!r}, high = {high!r}")
        if not (isinstance(ngram, int) and ngram >= 1):
            raise ValueError(f"ngram = {ngram!r} must be an integer >= 1")
        self.ladder, self.low, self.high, self.ngram = ladder, low, high, ngram
        self.rung = ladder.index(float(start))

    @property
    def temperature(self) -> float:
        """The temperature of the next rollout."""
        return self.ladder[self.rung]

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        guided = []
        for candidate in pool:
            row = candidate.row
            guidance = {**row.get(GUIDANCE_KEY, {}), "temperature": self.temperature}
            guided.append(Candidate(candidate.position, candidate.index, {**row, GUIDANCE_KEY: guidance}))
        return guided

    def diversity(self, outcome: Outcome) -> float:
        """``d_t``: the mean distinct-``n`` ratio of the outcome's groups (NaN without samples)."""
        ratios = []
        for position in outcome.positions.unique().tolist():
            members = (outcome.positions == position).nonzero().flatten().tolist()
            ratios.append(distinct_ngram_ratio([outcome.completion(i)[0] for i in members], self.ngram))
        return sum(ratios) / len(ratios) if ratios else math.nan

    def after_rewards(self, outcome: Outcome) -> Decision:
        sampled_at, diversity = self.temperature, self.diversity(outcome)
        if diversity < self.low:
            self.rung = min(self.rung + 1, len(self.ladder) - 1)
        elif diversity > self.high:
            self.rung = max(self.rung - 1, 0)
        return Decision(stats={"diversity": diversity, "sampled_at": sampled_at, "next_temperature": self.temperature})

    def state_dict(self) -> dict[str, Any]:
        return {"rung": self.rung}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rung = int(state["rung"])
