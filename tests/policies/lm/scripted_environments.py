"""Deterministic environments for the multi-turn rollout tests (importable by path from configs:
``tests.policies.lm.scripted_environments:Scripted``).

The tiny test models write random words, so the environments that test tool calls read their tool-call text from a
script (one text per turn) instead of the model's turn: the parsing and running are the ones the rollout uses
(``Environment.call_tools``), only the text is chosen by the test.
"""

from __future__ import annotations

import time
from typing import Any

from genalign.environments import Environment, ModelTurn, Observation, StepResult


class Scripted(Environment):
    """``turns`` model turns: each answered with a fixed observation, a per-turn reward of ``0.1 × turn``; the episode
    reward is ``reward`` (None: the reward functions score the transcript)."""

    def __init__(self, *, turns: int = 3, observation: str = "+1=", reward: float | None = 0.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.turns, self.observation, self.episode_reward = turns, observation, reward

    def reset(self, **row: Any) -> str | None:
        self.seen = 0
        return None

    def step(self, turn: ModelTurn) -> StepResult:
        self.seen += 1
        done = self.seen >= self.turns
        return StepResult(observation=None if done else Observation(self.observation), done=done,
                          reward=0.1 * turn.index)  # fmt: skip

    def reward(self) -> float | None:
        return self.episode_reward


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def explode(reason: str) -> str:
    """Raise an error.

    Args:
        reason: the message
    """
    raise RuntimeError(reason)


def hang(seconds: float) -> str:
    """Sleep (past the timeout).

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "woke up"


def huge() -> str:
    """Return 10 MB of text."""
    return "x" * 10_000_000


FAILING_SCRIPT = [
    '<tool_call>{"name": "add", "arguments": {"a": 1, "b": </tool_call>',  # bad_json
    '<tool_call>{"name": "ad", "arguments": {"a": 1, "b": 2}}</tool_call>',  # unknown_tool
    '<tool_call>{"name": "explode", "arguments": {"reason": "boom"}}</tool_call>',  # tool_error
    '<tool_call>{"name": "hang", "arguments": {"seconds": 3}}</tool_call>'  # timeout
    '<tool_call>{"name": "huge", "arguments": {}}</tool_call>',  # truncated (ok)
    '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',  # ok
]


class ScriptedTools(Environment):
    """Runs the tool calls of ``script[turn]`` (not the model's text) with the tools above; done after the script."""

    def __init__(self, *, script: list[str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("tools", [add, explode, hang, huge])
        kwargs.setdefault("tool_limits", {"timeout_s": 0.3, "max_output_chars": 64})
        super().__init__(**kwargs)
        self.script = list(script if script is not None else FAILING_SCRIPT)

    def step(self, turn: ModelTurn) -> StepResult:
        record = self.call_tools(self.script[turn.index])
        return StepResult(record=record, done=turn.index + 1 >= len(self.script))


class RaisesInReset(Scripted):
    def reset(self, **row: Any) -> str:
        raise RuntimeError("reset failed")


class RaisesInStep(Scripted):
    def step(self, turn: ModelTurn) -> StepResult:
        if turn.index == 1:
            raise RuntimeError("step failed")
        return super().step(turn)


class RaisesInReward(Scripted):
    def reward(self) -> float:
        raise RuntimeError("reward failed")


class CountdownTRL:
    """A TRL-style environment (no genalign base class): ``reset(**row)``, public methods are tools, ``get_reward``."""

    def __init__(self):
        self.reward = 0.0

    def reset(self, **kwargs) -> str | None:
        self.target = 12
        self.reward = 0.0
        return "Reach 12."

    def submit(self, expression: str) -> str:
        """
        Submit an arithmetic expression.

        Args:
            expression: The expression, e.g. '3 * 4'

        Returns:
            Whether it reaches the target.
        """
        from genalign.environments import evaluate

        self.reward = 1.0 if evaluate(expression) == self.target else 0.0
        return "Correct!" if self.reward else "Not yet."

    def get_reward(self) -> float:
        return self.reward


class RowEcho(Scripted):
    """:class:`Scripted` that keeps the row columns ``reset`` received (``seen_rows``, class-wide, for the test)."""

    seen_rows: list[dict[str, Any]] = []

    def reset(self, **row: Any) -> str | None:
        RowEcho.seen_rows.append(dict(row))
        return super().reset(**row)


class CannotRestore(Scripted):
    """:class:`Scripted` that declares state (so branches and rewinds restore it) but cannot restore it."""

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def load_state_dict(self, state: Any) -> None:
        raise RuntimeError("cannot restore")
