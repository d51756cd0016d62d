"""A guessing game with feedback (task and environment ``guess_number``): find a secret integer in a range with the
``guess`` tool, which answers "higher", "lower" or "correct". Binary search needs ``ceil(log2(range size))`` guesses;
the episode allows one more by default."""

from __future__ import annotations

import random
from typing import Any, Literal

from genalign.environments.base import Environment, register_environment
from genalign.environments.tasks.common import TASKS, Split, check_common, split_of
from genalign.environments.tools import tool
from genalign.environments.types import ModelTurn, StepResult

ENV_NAME = "guess_number"


def guesses_needed(low: int, high: int) -> int:
    """Guesses binary search needs in the worst case for a secret in ``[low, high]``: ``k`` guesses tell apart
    ``2**k - 1`` numbers, so ``n`` numbers need ``n.bit_length()``."""
    return (high - low + 1).bit_length()


@TASKS.register(ENV_NAME, summary="find a secret number with higher/lower feedback", source="genalign")
def guess_number_task(
    size: int,
    seed: int,
    *,
    min_range: int = 16,
    max_range: int = 128,
    extra_guesses: int = 1,
    split: Split = "train",
    eval_fraction: float = 0.1,
) -> list[dict[str, Any]]:
    """Rows with a range ``[low, high]`` (its size drawn from ``min_range..max_range``, its start from 0..1000) and a
    secret in it.

    Args:
        size: number of rows.
        seed: seed of the problem stream.
        min_range, max_range: bounds of the range size ``high - low + 1``.
        extra_guesses: guesses allowed beyond what binary search needs.
        split, eval_fraction: as in ``genalign.data.procedural``, by hash of the prompt and the secret (the prompt
            alone does not name the problem: it hides the secret).

    Returns:
        rows with ``prompt``, ``secret``, ``low``, ``high``, ``max_guesses`` and ``env``.
    """
    check_common(ENV_NAME, size, split, eval_fraction)
    if isinstance(min_range, bool) or not isinstance(min_range, int) or min_range < 2:
        raise ValueError(f"task {ENV_NAME}: min_range={min_range!r} must be an integer of at least 2.")
    if isinstance(max_range, bool) or not isinstance(max_range, int) or max_range < min_range:
        raise ValueError(f"task {ENV_NAME}: max_range={max_range!r} must be an integer >= min_range ({min_range}).")
    if isinstance(extra_guesses, bool) or not isinstance(extra_guesses, int) or extra_guesses < 0:
        raise ValueError(f"task {ENV_NAME}: extra_guesses={extra_guesses!r} must be an integer >= 0.")
    rng = random.Random(f"{ENV_NAME}/{seed}")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range(size * 100):
        low = rng.randint(0, 1000)
        high = low + rng.randint(min_range, max_range) - 1
        secret = rng.randint(low, high)
        max_guesses = guesses_needed(low, high) + extra_guesses
        prompt = (
            f"I am thinking of an integer from {low} to {high}. Find it with the guess tool: after each guess I say "
            f"whether the number is higher, lower or correct. You have {max_guesses} guesses."
        )
        key = f"{prompt}\nsecret={secret}"
        if key in seen or split_of(key, eval_fraction=eval_fraction) != split:
            continue
        seen.add(key)
        rows.append({"prompt": prompt, "secret": secret, "low": low, "high": high, "max_guesses": max_guesses,
                     "env": ENV_NAME})  # fmt: skip
        if len(rows) == size:
            return rows
    raise ValueError(f"task {ENV_NAME}: only {len(rows)} distinct {split} problems; widen the range sizes.")


@register_environment(ENV_NAME, summary="guess a secret number with higher/lower feedback; reward 1 when found",
                      source="genalign")  # fmt: skip
class GuessNumber(Environment):
    """The ``guess`` tool answers each guess; the episode ends when the number is found, the guesses are used up, or
    a turn makes no guess.

    Args:
        reward_form: ``"binary"`` (1 when found, else 0) or ``"efficiency"`` (when found,
            ``(max_guesses - guesses + 1) / max_guesses``: 1 for a first-guess hit, less for each extra guess).
        tools, tool_limits: as for :class:`~genalign.environments.Environment`.
    """

    def __init__(self, *, reward_form: Literal["binary", "efficiency"] = "binary", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if reward_form not in ("binary", "efficiency"):
            raise ValueError(f"{ENV_NAME}: reward_form={reward_form!r} is not valid; use 'binary' or 'efficiency'.")
        self.reward_form = reward_form
        self.secret = self.low = self.high = self.max_guesses = 0
        self.guesses: list[int] = []
        self.found = False

    def reset(self, *, secret: int, low: int, high: int, max_guesses: int, **row: Any) -> None:
        if not low <= secret <= high or max_guesses < 1:
            raise ValueError(f"{ENV_NAME}: the row needs low <= secret <= high and max_guesses >= 1.")
        self.secret, self.low, self.high, self.max_guesses = secret, low, high, max_guesses
        self.guesses, self.found = [], False
        return None

    @tool
    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: your guess.
        """
        if self.found:
            raise ValueError("the number was already found; the game is over.")
        if len(self.guesses) >= self.max_guesses:
            raise ValueError("no guesses left; the game is over.")
        if not self.low <= number <= self.high:
            raise ValueError(f"guess a number from {self.low} to {self.high}.")
        self.guesses.append(number)
        left = self.max_guesses - len(self.guesses)
        if number == self.secret:
            self.found = True
            return f"{number} is correct!"
        direction = "higher" if self.secret > number else "lower"
        return f"{number} is wrong: the number is {direction}. {left} guess(es) left."

    def step(self, turn: ModelTurn) -> StepResult:
        result = super().step(turn)
        done = result.done or self.found or len(self.guesses) >= self.max_guesses
        return result.replace(done=done)

    def reward(self) -> float:
        if not self.found:
            return 0.0
        if self.reward_form == "binary":
            return 1.0
        return (self.max_guesses - len(self.guesses) + 1) / self.max_guesses

    def state_dict(self) -> dict[str, Any]:
        return {"secret": self.secret, "low": self.low, "high": self.high, "max_guesses": self.max_guesses,
                "guesses": list(self.guesses), "found": self.found}  # fmt: skip

    def load_state_dict(self, state: Any) -> None:
        self.secret, self.low, self.high = state["secret"], state["low"], state["high"]
        self.max_guesses, self.guesses, self.found = state["max_guesses"], list(state["guesses"]), state["found"]
