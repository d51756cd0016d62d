"""Calling one reward function safely: checked outputs, ``None`` -> NaN, errors named by reward and sample.

The trainer calls :func:`call_reward` once per reward function per batch. A reward is called on the whole batch; only
when that raises is it called again sample by sample, to find which samples fail (so the fast path costs nothing).
A value that is not a finite number of sane size (NaN, inf, or beyond :data:`MAX_REWARD_MAGNITUDE`, whose squares
would overflow the float32 group statistics) is an error of that sample: it raises, or with ``on_error="zero"`` scores
0 and is counted; it is never re-scored in the hope of a better value.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

OnError = Literal["raise", "zero"]
#: Largest accepted |reward|: beyond it the squares in group statistics overflow float32 for large batches.
MAX_REWARD_MAGNITUDE = 1e15


class RewardOutputError(ValueError):
    """A reward function returned something that is not one number-or-None per completion."""


def _as_list(name: str, output: Any, count: int) -> list[Any]:
    """The reward's output as a list of length ``count`` (lists, tuples, 1-D numpy arrays and tensors are accepted)."""
    if hasattr(output, "tolist") and not isinstance(output, (list, tuple)):
        output = output.tolist()
    if not isinstance(output, (list, tuple)):
        raise RewardOutputError(
            f"reward {name!r} returned {type(output).__name__}; it must return a list with one float or None per "
            f"completion ({count} here)."
        )
    if len(output) != count:
        raise RewardOutputError(f"reward {name!r} returned {len(output)} values for {count} completions.")
    return list(output)


def _check_value(name: str, value: Any, index: int) -> float:
    """One reward value as a float (``None`` -> NaN); raises RewardOutputError for anything else or a non-finite float."""
    if value is None:
        return math.nan
    if isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value):
            raise RewardOutputError(
                f"reward {name!r} returned {value} for sample {index}; return a finite float, or None for "
                "'not applicable'."
            )
        if abs(value) > MAX_REWARD_MAGNITUDE:
            raise RewardOutputError(
                f"reward {name!r} returned {value:.3g} for sample {index}; rewards beyond ±{MAX_REWARD_MAGNITUDE:.0e} "
                "overflow the float32 group statistics: rescale the reward (advantages are scale-free anyway)."
            )
        return value
    raise RewardOutputError(
        f"reward {name!r} returned {type(value).__name__} {value!r:.60} for sample {index}; return a float or None."
    )


def _slice_columns(columns: Mapping[str, Sequence[Any]], index: int) -> dict[str, list[Any]]:
    return {key: [values[index]] for key, values in columns.items()}


def call_reward(
    name: str,
    fn: Callable[..., Any],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    columns: Mapping[str, Sequence[Any]],
    *,
    on_error: OnError = "raise",
) -> tuple[list[float], int]:
    """Call ``fn(prompts, completions, **columns)`` and check what it returns.

    Args:
        name: the reward's name, used in every message.
        fn: the reward callable.
        prompts: ``[N]`` prompts.
        completions: ``[N]`` completions.
        columns: dataset columns, each a sequence of length ``N``.
        on_error: ``"raise"``: a sample on which the reward raises, or returns NaN/inf or a non-number, raises
            RuntimeError ``"reward 'x' failed on sample i: ..."``; ``"zero"``: that sample gets 0.0 and is counted.

    Returns:
        ``(rewards, num_errors)``: ``[N]`` floats, NaN where the reward returned ``None`` (not applicable), and how many
        samples were set to 0.0 because of an error (always 0 with ``on_error="raise"``).

    Raises:
        RuntimeError: a sample failed and ``on_error="raise"`` (the original exception is chained), or the batch call
            fails while every sample alone succeeds.
        RewardOutputError: the output is not a sequence of length ``N`` (a bug in the reward, whatever ``on_error``).
        ValueError: bad arguments (``on_error``, column lengths).
    """
    if on_error not in ("raise", "zero"):
        raise ValueError(f"call_reward: on_error={on_error!r} is not valid; use 'raise' or 'zero'.")
    count = len(completions)
    if len(prompts) != count:
        raise ValueError(f"reward {name!r}: {len(prompts)} prompts for {count} completions.")
    for key, values in columns.items():
        if len(values) != count:
            raise ValueError(f"reward {name!r}: column {key!r} has {len(values)} values for {count} completions.")

    try:
        output = _as_list(name, fn(prompts, completions, **columns), count)
    except RewardOutputError:
        raise
    except Exception:
        output = None
    if output is not None:
        return _checked_batch(name, output, on_error)

    rewards: list[float] = []
    num_errors = 0
    for i in range(count):
        try:
            single = _as_list(name, fn(prompts[i : i + 1], completions[i : i + 1], **_slice_columns(columns, i)), 1)
            rewards.append(_check_value(name, single[0], i))
        except Exception as error:
            if on_error == "raise":
                raise RuntimeError(f"reward {name!r} failed on sample {i}: {type(error).__name__}: {error}") from error
            rewards.append(0.0)
            num_errors += 1
    if num_errors == 0 and output is None:
        raise RuntimeError(
            f"reward {name!r} failed on the batch of {count} samples although every sample alone succeeds; the "
            "reward must score samples independently."
        )
    return rewards, num_errors


def _checked_batch(name: str, output: list[Any], on_error: OnError) -> tuple[list[float], int]:
    """The batch's values; bad ones (NaN, inf, too large, not a number) raise or, with ``on_error="zero"``, score 0 and
    are counted."""
    rewards: list[float] = []
    num_errors = 0
    for i, value in enumerate(output):
        try:
            rewards.append(_check_value(name, value, i))
        except RewardOutputError as error:
            if on_error == "raise":
                raise RuntimeError(
                    f"reward {name!r} failed on sample {i}: {error} (on_error: zero scores such samples 0 and counts "
                    "them instead)"
                ) from error
            rewards.append(0.0)
            num_errors += 1
    return rewards, num_errors
