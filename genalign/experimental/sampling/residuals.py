"""Exploration of residual prompts: ERPO's per-prompt history tracker that raises the sampling temperature of prompts
whose earlier groups were all correct [203]."""

from __future__ import annotations

import math
from typing import Any

import torch

from genalign.policies.base import GUIDANCE_KEY
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, RuleDefaults


@SAMPLE_SOURCES.register(
    "erpo",
    formula="after a visit of prompt x: ℓ_x ← min(ℓ_x + 1, L) if every valid r_i ≥ correct else 0; before the "
    "rollout: row temperature t_x = min(t₀ + Δ·ℓ_x, t_max) when ℓ_x > 0 (else the policy's temperature)",
    source="[203] ERPO (Explore Residual Prompts in Policy Optimization)",
    summary="A history tracker per prompt raises the sampling temperature of residual prompts (their previous groups "
    "were all correct, so zero reward variance) step by step, so that more diverse traces revive their signal.",
)
class ERPOTemperature(RuleDefaults):
    """[203] ERPO: residual prompts (all responses correct last time) are sampled at a higher temperature.

    The tracker holds, per prompt (data-row index), the number ``ℓ_x`` of consecutive visits whose group was all
    correct (every valid reward ``≥ correct``), capped at ``max_level``; a visit with an incorrect response resets it
    to 0 (the prompt carries signal again at the normal temperature). Before the rollout a residual prompt's row gets
    the guidance ``{"temperature": min(t₀ + Δ·ℓ_x, t_max)}`` (merged into any guidance an earlier rule attached);
    other prompts are sampled at the policy's temperature. The rule selects nothing: every candidate is admitted.

    Reading chosen: the abstract says the temperature is "adaptively increased" for prompts that "previously produced
    all correct responses" without the schedule; genalign raises it linearly per consecutive all-correct visit and
    resets it on the first incorrect response. ``base_temperature`` should equal ``policy.temperature``. Defaults
    (Δ = 0.1, at most 3 levels, t_max = 1.5) are genalign's choices.

    Args:
        base_temperature: ``t₀ > 0``, the policy's sampling temperature.
        temperature_step: ``Δ > 0`` per level.
        max_temperature: ``t_max >= t₀``.
        max_level: ``L >= 1``, the most levels.
        correct: a sample is correct when its weighted reward sum is at least this.
    """

    needs_guidance = frozenset({"temperature"})

    def __init__(
        self, *, base_temperature: float = 1.0, temperature_step: float = 0.1, max_temperature: float = 1.5,
        max_level: int = 3, correct: float = 1.0,
    ) -> None:  # fmt: skip
        if not (base_temperature > 0 and temperature_step > 0):
            raise ValueError(
                f"base_temperature = {base_temperature!r} and temperature_step = {temperature_step!r} must be > 0"
            )
        if not max_temperature >= base_temperature:
            raise ValueError(
                f"max_temperature = {max_temperature!r} must be >= base_temperature = {base_temperature!r}"
            )
        if not (isinstance(max_level, int) and max_level >= 1):
            raise ValueError(f"max_level = {max_level!r} must be an integer >= 1")
        if not math.isfinite(correct):
            raise ValueError(f"correct = {correct!r} must be a finite reward threshold")
        self.base, self.step, self.max_temperature = base_temperature, temperature_step, max_temperature
        self.max_level, self.correct = max_level, correct
        self.levels: dict[int, int] = {}  # data-row index -> consecutive all-correct visits (absent = 0)

    def temperature(self, index: int) -> float | None:
        """The raised temperature of prompt ``index``, or None when it is not residual."""
        level = self.levels.get(index, 0)
        return min(self.base + self.step * level, self.max_temperature) if level > 0 else None

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        guided = []
        for candidate in pool:
            temperature = self.temperature(candidate.index)
            if temperature is not None:
                row = candidate.row
                guidance = {**row.get(GUIDANCE_KEY, {}), "temperature": temperature}
                candidate = Candidate(candidate.position, candidate.index, {**row, GUIDANCE_KEY: guidance})
            guided.append(candidate)
        return guided

    def after_rewards(self, outcome: Outcome) -> Decision:
        valid = ~outcome.rewards.isnan()  # [N]
        raised = 0
        for position in outcome.positions.unique().tolist():
            members = (outcome.positions == position) & valid  # [N]
            if not members.any():
                continue
            index = int(outcome.indices[members.nonzero()[0, 0]])
            raised += index in self.levels
            if bool((outcome.rewards[members] >= self.correct).all()):
                self.levels[index] = min(self.levels.get(index, 0) + 1, self.max_level)
            else:
                self.levels.pop(index, None)
        return Decision(stats={"residual_tracked": float(len(self.levels)), "sampled_hot": float(raised)})

    def state_dict(self) -> dict[str, Any]:
        return {"levels": dict(self.levels)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.levels = {int(k): int(v) for k, v in state["levels"].items()}
