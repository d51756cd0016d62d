"""What the procedural task families share: the ``TASKS`` registry of row generators, the train/eval split, the
final-answer convention and :class:`AnswerEnvironment` (an episode that ends with an answer the environment checks).

Row generators follow ``genalign.data.procedural``: ``(size, seed, **args) -> list[dict]``, pure functions of their
arguments; each row has ``prompt`` (str), the task's columns, and ``env``, the name of the environment that runs it.
A problem belongs to the train or the eval split by a stable hash of its prompt text
(:func:`genalign.data.procedural.split_of`, re-exported here), independent of the seed, so the splits are disjoint for
every pair of seeds; the generators are also data sources ``procedural:<task>`` (:mod:`.sources`).

The final answer is what follows the last ``Answer:`` (any case) in the model's last turn outside tool-call blocks,
up to the end of that line; without the marker, numeric tasks take the last number of that text.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from typing import Any

from genalign.data.procedural import Split, split_of  # noqa: F401  (re-exported: the task families' split)
from genalign.environments.base import Environment
from genalign.environments.types import ModelTurn, StepResult
from genalign.registry import Registry

#: name -> row generator ``(size: int, seed: int, **args) -> list[dict]``; each row's ``env`` names its environment
TASKS: Registry[Callable[..., list[dict[str, Any]]]] = Registry("environment task")


def check_common(task: str, size: int, split: str, eval_fraction: float) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"task {task}: size={size!r} must be a positive integer; set args.size (e.g. 1000).")
    if split not in ("train", "eval"):
        raise ValueError(f"task {task}: split={split!r} is not valid; use 'train' or 'eval'.")
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"task {task}: eval_fraction={eval_fraction!r} must be strictly between 0 and 1 (e.g. 0.1).")


_MARKER_RE = re.compile(r"answer\s*[:：]", re.IGNORECASE)
_NUMBER_RE = re.compile(r"[-−]?\d[\d,]*(?:\.\d+)?")


def final_answer(text: str) -> str | None:
    """The text after the last ``Answer:`` marker, to the end of its line (stripped), or None without a marker."""
    markers = list(_MARKER_RE.finditer(text))
    if not markers:
        return None
    return text[markers[-1].end() :].strip().split("\n", 1)[0].strip()


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (thousands commas allowed), or None."""
    numbers = _NUMBER_RE.findall(text)
    return numbers[-1] if numbers else None


def parse_number(text: str | None) -> int | float | None:
    """``text``'s first number (commas removed) as an int (or a float when it has decimals), or None."""
    if text is None:
        return None
    found = _NUMBER_RE.search(text.replace("**", ""))
    if found is None:
        return None
    digits = found.group(0).replace(",", "").replace("−", "-")
    try:
        return float(digits) if "." in digits else int(digits)
    except ValueError:
        return None


def normalize(text: str) -> str:
    """Lower case, punctuation and articles removed, spaces collapsed (for comparing short text answers)."""
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    words = [word for word in text.split() if word not in ("a", "an", "the")]
    return " ".join(words)


class AnswerEnvironment(Environment):
    """An episode that ends with the model's answer: each turn's tool calls run; the first turn without a tool call
    (or the last allowed turn) ends the episode, and :meth:`reward` checks that turn's answer with :meth:`verify`.

    Args:
        max_turns: turns the environment allows (the last one ends the episode even if it calls tools).
        error_penalty: per-turn reward ``-error_penalty * (calls with an error)`` on every turn; 0 gives no per-turn
            reward (None).
        tools, tool_limits: as for :class:`~genalign.environments.Environment`.
    """

    def __init__(self, *, max_turns: int = 6, error_penalty: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"{type(self).__name__}: max_turns={max_turns!r} must be a positive integer, e.g. 6.")
        if isinstance(error_penalty, bool) or not isinstance(error_penalty, (int, float)) or error_penalty < 0:
            raise ValueError(f"{type(self).__name__}: error_penalty={error_penalty!r} must be a number >= 0.")
        self.max_turns, self.error_penalty = max_turns, float(error_penalty)
        self.answer_text: str | None = None
        self.finished = False

    def step(self, turn: ModelTurn) -> StepResult:
        if self.finished:
            raise RuntimeError(f"{type(self).__name__}.step() called after the episode ended.")
        result = super().step(turn)
        last = turn.index + 1 >= self.max_turns
        if result.done or last:
            self.answer_text, self.finished = result.record.content, True
        errors = result.record.counts["calls"] - result.record.counts["ok"]
        reward = (-self.error_penalty * errors if errors else 0.0) if self.error_penalty else None
        return result.replace(done=self.finished, reward=reward)

    def reward(self) -> float:
        return float(self.verify(self.answer_text)) if self.answer_text is not None else 0.0

    def verify(self, text: str) -> bool:
        """Whether the final turn's text (tool-call blocks removed) answers the problem."""
        raise NotImplementedError
