"""Difficulty-aware augmentation (DeepVideo-R1 / Reg-GRPO [177]): a prompt whose last group carried no signal is moved
to a solvable difficulty on its next visit: made easier (a prefix of its reference solution as guidance) when every
sample failed, made harder (a hotter sampling temperature, so that the group spreads) when every sample succeeded."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch

from genalign.experimental.sampling.guidance import attach, check_arg, groups_of, reference_of, reference_prefix
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, RuleDefaults


@SAMPLE_SOURCES.register(
    "difficulty_shift",
    formula="after a visit of prompt x with hint fraction f: all samples wrong → f ← min(f + step, max_fraction); "
    "all right → f ← max(f − step, 0), and with f = 0 the next visit is sampled at temperature T_hard; mixed → f "
    "kept; a visit with f > 0 is conditioned on the first ⌈f·L⌉ words of x's reference solution",
    source="[177] DeepVideo-R1 (difficulty-aware data augmentation)",
    summary="Moves prompts whose groups all fail or all succeed (zero advantages) to a solvable difficulty: a growing "
    "reference-solution hint for the failed ones, a hotter sampling temperature for the solved ones.",
)
class DifficultyShift(RuleDefaults):
    """[177] DeepVideo-R1's difficulty-aware augmentation: a group whose samples all agree has zero group-relative
    advantages (the vanishing-advantage problem), so the next visit of its prompt is made easier or harder.

    * every sample failed: the completion is forced to start with a prefix of the reference solution (``prefix``
      guidance, conditioning only, no gradient on its tokens), ``hint_step`` of the solution's words more after each
      further all-wrong visit, up to ``max_fraction``;
    * every sample succeeded: the hint shrinks by ``hint_step``; a prompt left without a hint is sampled at
      ``hard_temperature`` (``temperature`` guidance) on its next visit;
    * mixed outcomes (the prompt is at a solvable difficulty): the hint is kept, the hotter temperature dropped.

    Reading chosen: the abstract says samples are augmented "at solvable difficulty levels" without the
    augmentations; DeepVideo-R1 perturbs the videos of easy samples and gives reasoning cues for hard ones. genalign
    makes a failed prompt easier with a reference-solution prefix (as [77]'s AdaPrefix does, with a step instead of a
    success-rate controller) and an all-solved prompt harder with a hotter sampling temperature (an input
    perturbation would need a family-specific corruption); both are genalign's choices, as are the defaults.

    Args:
        hint_step: the fraction of the solution's words added to the hint after each all-wrong visit, in ``(0, 1]``.
        max_fraction: the largest fraction of the solution given, in ``(0, 1]``.
        hard_temperature: the sampling temperature of a prompt whose last group all succeeded, ``> 0`` (None: easy
            prompts are left as they are).
        unit: the hint's unit, ``"words"`` or ``"chars"``.
        solution_column: the row column with the reference solution. threshold: a sample succeeds at this reward.
    """

    needs_guidance = frozenset({"prefix", "temperature"})

    def __init__(
        self, *, hint_step: float = 0.25, max_fraction: float = 0.75, hard_temperature: float | None = 1.3,
        unit: Literal["words", "chars"] = "words", solution_column: str = "solution", threshold: float = 0.5,
    ) -> None:  # fmt: skip
        check_arg("hint_step", 0.0 < hint_step <= 1.0, hint_step, "must be in (0, 1]")
        check_arg("max_fraction", 0.0 < max_fraction <= 1.0, max_fraction, "must be in (0, 1]")
        check_arg("hard_temperature", hard_temperature is None or hard_temperature > 0, hard_temperature,
                  "must be > 0, or null to leave solved prompts as they are")  # fmt: skip
        check_arg("unit", unit in ("words", "chars"), unit, "must be 'words' or 'chars'")
        self.hint_step, self.max_fraction, self.hard_temperature = hint_step, max_fraction, hard_temperature
        self.unit, self.solution_column, self.threshold = unit, solution_column, threshold
        self.fractions: dict[int, float] = {}  # data-row index -> hint fraction of its next visit
        self.solved: dict[int, bool] = {}  # data-row index -> its last group all succeeded
        self._applied: dict[int, float] = {}  # stream position -> hint fraction applied this step

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        chosen = []
        for candidate in pool:
            fraction = self.fractions.get(candidate.index, 0.0)
            solution = reference_of(candidate.row, self.solution_column, "difficulty_shift") if fraction else None
            prefix = reference_prefix(solution, fraction, self.unit) if solution else ""
            self._applied[candidate.position] = fraction if prefix else 0.0
            if prefix:
                candidate = attach(candidate, prefix=prefix)
            elif self.hard_temperature is not None and self.solved.get(candidate.index, False):
                candidate = attach(candidate, temperature=self.hard_temperature)
            chosen.append(candidate)
        return chosen

    def after_rewards(self, outcome: Outcome) -> Decision:
        groups = groups_of(outcome, self.threshold)
        applied = [self._applied.get(g.position, 0.0) for g in groups]
        for group, fraction in zip(groups, applied, strict=True):
            if not group.valid:
                continue
            solved = group.successes == group.valid
            if group.all_wrong:
                self.fractions[group.index] = min(fraction + self.hint_step, self.max_fraction)
            elif solved:
                self.fractions[group.index] = max(fraction - self.hint_step, 0.0)
            else:
                self.fractions[group.index] = fraction
            self.solved[group.index] = solved
        self._applied = {}
        rates = [g.rate for g in groups if g.valid]
        return Decision(stats={
            "hinted": float(sum(f > 0 for f in applied)),
            "all_wrong": float(sum(g.all_wrong for g in groups)),
            "all_right": float(sum(g.valid > 0 and g.successes == g.valid for g in groups)),
            "success_rate": sum(rates) / len(rates) if rates else math.nan,
        })  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {
            "fractions": {str(k): v for k, v in self.fractions.items()},
            "solved": {str(k): v for k, v in self.solved.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.fractions = {int(k): float(v) for k, v in state["fractions"].items()}
        self.solved = {int(k): bool(v) for k, v in state["solved"].items()}
