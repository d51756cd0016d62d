"""SKPO's skip-connected two-stage rollout (environment ``skip_connection``, [66]): the model's first turn is the
upstream reasoning segment; the environment answers with the problem again, so the downstream turn is generated from
a new prompt made of the problem and that segment, and may use the segment or bypass it with direct access to the
problem. The downstream turn is scored with ``answer_reward`` (the episode reward) and ends the episode.

Sample several downstream turns per upstream segment with a turn tree (``policy.multi_turn.tree: {enabled: true,
split_turns: [1], branching: [M], trees_per_prompt: K}``) and credit them with ``skip_connected``: each upstream
segment's dense reward is the mean reward of its downstream completions. Nothing the model writes is executed.
"""

from __future__ import annotations

from typing import Any

from genalign.environments.base import Environment, register_environment
from genalign.environments.types import ModelTurn, Observation, StepResult

DEFAULT_TEMPLATE = "Problem: {problem}\nUse the reasoning above if it helps, or solve the problem afresh."


def problem_text(prompt: Any) -> str:
    """The problem of a row's ``prompt``: the text, or the last user message's text of a chat prompt."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for message in reversed(prompt):
            if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
                return message["content"]
    raise ValueError(f"environment 'skip_connection': the row's prompt {prompt!r} holds no text problem.")


@register_environment(
    "skip_connection",
    summary="two turns (SKPO): an upstream reasoning segment, then a downstream answer after the problem is shown "
    "again (the skip connection); the downstream answer's reward is the episode reward",
    source="[66] SKPO",
)
class SkipConnection(Environment):
    """Turn 0: the upstream segment; the environment shows ``template`` (``{problem}`` = the row's prompt text).
    Turn 1: the downstream completion, scored with ``answer_reward``; the episode ends.

    Args:
        template: the skip-connection message; must contain ``{problem}``.
        answer_reward: a registered reward name or import path scoring the downstream turn (with the row's columns,
            e.g. ``answer``), and its ``answer_args``.
    """

    def __init__(
        self,
        *,
        template: str = DEFAULT_TEMPLATE,
        answer_reward: str = "exact_match",
        answer_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(template, str) or "{problem}" not in template:
            raise ValueError(f"environment 'skip_connection': template={template!r} must contain '{{problem}}'.")
        from genalign.rewards.base import reward_factory  # imported on use: it loads genalign.rewards

        super().__init__(**kwargs)
        self.template = template
        self.answer = reward_factory(answer_reward)(**(answer_args or {}))
        self.row: dict[str, Any] = {}
        self.score: float | None = None

    def reset(self, **row: Any) -> None:
        self.row, self.score = row, None
        return None

    def step(self, turn: ModelTurn) -> StepResult:
        if turn.index == 0:
            problem = problem_text(self.row.get("prompt", ""))
            return StepResult(observation=Observation(self.template.replace("{problem}", problem)))
        columns = {key: [value] for key, value in self.row.items() if key != "prompt"}
        score = self.answer([problem_text(self.row.get("prompt", ""))], [turn.text], **columns)[0]
        self.score = None if score is None else float(score)
        return StepResult(done=True)

    def reward(self) -> float | None:
        return self.score
