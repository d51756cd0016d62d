"""Self-verification rewards (GRPO-Verif [288]): a completion holds a solution, then a verification of it after a marker
(``"Verification:"``) ending in a verdict. ``self_verification`` scores either part:

- ``part: solution``: a configured reward (``exact_match`` by default) of the text before the marker;
- ``part: verdict``: 1 where the verdict agrees with that reward (correct / incorrect), 0 where it disagrees or no
  verdict (or no marker) is found.

Both parts are the reward columns of the ``verification_weighted`` credit rule, which gives each its own group
advantage on its own text block (``policy.probes.block_markers: [<the marker>]``). Verdicts are read with regular
expressions, case-insensitively; the first match after the marker wins. Nothing is executed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from genalign.rewards.base import register_reward, reward_factory
from genalign.rewards.inputs import completion_text


@register_reward(
    "self_verification",
    source="[288] GRPO-Verif",
    inner_rewards=({"name": "solution_reward", "args": "solution_args"},),
)
class SelfVerification:
    """The solution part or the verdict part of a self-verifying completion (module docstring).

    Args:
        part: ``solution`` or ``verdict``.
        marker: the text that opens the verification.
        solution_reward: a registered reward name or import path scoring the solution text (its ``solution_args``).
        correct_above: a solution counts as correct when its reward is at least this.
        correct_pattern, incorrect_pattern: regular expressions of the two verdicts (the earliest match counts).
    """

    def __init__(
        self,
        *,
        part: Literal["solution", "verdict"] = "solution",
        marker: str = "Verification:",
        solution_reward: str = "exact_match",
        solution_args: dict[str, Any] | None = None,
        correct_above: float = 0.5,
        correct_pattern: str = r"\b(correct|yes|true)\b",
        incorrect_pattern: str = r"\b(incorrect|wrong|no|false)\b",
    ) -> None:
        if part not in ("solution", "verdict"):
            raise ValueError(f"reward 'self_verification': part={part!r} must be 'solution' or 'verdict'.")
        if not marker:
            raise ValueError("reward 'self_verification': marker is empty; give the text that opens the verification.")
        try:
            self.correct, self.incorrect = (re.compile(p, re.IGNORECASE) for p in (correct_pattern, incorrect_pattern))
        except re.error as error:
            raise ValueError(
                f"reward 'self_verification': a verdict pattern is not a regular expression ({error})."
            ) from None
        self.part, self.marker, self.correct_above = part, marker, correct_above
        self.solution = reward_factory(solution_reward)(**(solution_args or {}))

    def split(self, completion: Any) -> tuple[str, str | None]:
        """``(solution text, verification text or None when the marker is absent)``."""
        solution, found, verification = completion_text(completion).partition(self.marker)
        return solution, verification if found else None

    def verdict(self, verification: str | None) -> bool | None:
        """True (says correct), False (says incorrect) or None (no verdict), from the earliest match."""
        if verification is None:
            return None
        matches = [(m.start(), says) for says, pattern in ((True, self.correct), (False, self.incorrect))
                   if (m := pattern.search(verification))]  # fmt: skip
        return min(matches)[1] if matches else None

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        parts = [self.split(completion) for completion in completions]
        scores = self.solution(prompts, [solution for solution, _ in parts], **columns)
        if self.part == "solution":
            return [None if s is None else float(s) for s in scores]
        verdicts = []
        for score, (_, verification) in zip(scores, parts, strict=True):
            says = self.verdict(verification)
            verdicts.append(
                None if score is None else float(says is not None and says == (score >= self.correct_above))
            )
        return verdicts

    def pop_metrics(self) -> dict[str, float]:
        """The solution reward's own counters (e.g. ``bad_answer``), when it keeps any."""
        pop = getattr(self.solution, "pop_metrics", None)
        return pop() if pop is not None else {}
