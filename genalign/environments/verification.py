"""A separately sampled self-verification (environment ``verify_solution``, GRPO-Verif [288]): after the model's
solution turn the environment asks it to check that solution, and the episode ends after the verification turn. The
verification is therefore a second generation conditioned on the problem and the model's own solution, not a block
written in the same breath.

The environment scores each turn on the model's own text (:class:`~genalign.rewards.verification.SelfVerification`'s
solution reward and verdict patterns): turn 0 earns the solution's reward, turn 1 earns 1 when the verdict agrees with
it (0 when it disagrees or gives none); the episode reward is the solution's. The credit rule ``turn_phase_tracks``
with ``track_source: turn_rewards`` gives each turn its own group advantage, the verification track weighted by
``track_weights`` (the paper's verification weight). Nothing the model writes is executed.
"""

from __future__ import annotations

from typing import Any

from genalign.environments.base import Environment, register_environment
from genalign.environments.types import ModelTurn, Observation, StepResult

DEFAULT_QUESTION = "Check the solution above. Is it correct or incorrect?"


@register_environment(
    "verify_solution",
    summary="two turns: the solution, then the model's verification of it after a fixed question; per-turn rewards "
    "(solution correct, verdict agrees)",
    source="[288] GRPO-Verif",
)
class VerifySolution(Environment):
    """Turn 0: the model solves the row's prompt; the environment scores it and answers with ``question``. Turn 1:
    the model verifies its solution; its verdict is scored and the episode ends.

    Args:
        question: the message that asks for the verification.
        solution_reward: a registered reward name or import path scoring the solution turn (with the row's columns,
            e.g. ``answer``), and its ``solution_args``.
        correct_above: a solution counts as correct when its reward is at least this.
        correct_pattern, incorrect_pattern: regular expressions of the two verdicts (the earliest match counts).
    """

    def __init__(
        self,
        *,
        question: str = DEFAULT_QUESTION,
        solution_reward: str = "exact_match",
        solution_args: dict[str, Any] | None = None,
        correct_above: float = 0.5,
        correct_pattern: str = r"\b(correct|yes|true)\b",
        incorrect_pattern: str = r"\b(incorrect|wrong|no|false)\b",
        **kwargs: Any,
    ) -> None:
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"environment 'verify_solution': question={question!r} must be a non-empty text.")
        from genalign.rewards.verification import SelfVerification  # imported on use: it loads genalign.rewards

        super().__init__(**kwargs)
        self.question = question
        self.judge = SelfVerification(part="verdict", solution_reward=solution_reward, solution_args=solution_args,
                                      correct_above=correct_above, correct_pattern=correct_pattern,
                                      incorrect_pattern=incorrect_pattern)  # fmt: skip
        self.row: dict[str, Any] = {}
        self.solution_score: float | None = None

    def reset(self, **row: Any) -> None:
        self.row, self.solution_score = row, None
        return None

    def step(self, turn: ModelTurn) -> StepResult:
        if turn.index == 0:
            columns = {key: [value] for key, value in self.row.items() if key != "prompt"}
            score = self.judge.solution([str(self.row.get("prompt", ""))], [turn.text], **columns)[0]
            self.solution_score = None if score is None else float(score)
            return StepResult(observation=Observation(self.question), reward=self.solution_score)
        says = self.judge.verdict(turn.text)
        agrees = None
        if self.solution_score is not None:
            agrees = float(says is not None and says == (self.solution_score >= self.judge.correct_above))
        return StepResult(done=True, reward=agrees)

    def reward(self) -> float | None:
        return self.solution_score
