"""Rule-based text rewards: ``f(prompts, completions, **columns) -> list[float | None]``.

- ``exact_match``: 1 if the completion equals the ``answer`` column after normalisation, else 0;
- ``math_equivalence`` (:mod:`genalign.rewards.math_answers.equivalence`): the final answer against ``answer``, compared as a
  string, as an exact rational number, then symbolically with sympy, never evaluated;
- ``math_verify_equivalence`` (:mod:`genalign.rewards.math_answers.math_verify_grader`, optional ``genalign[math]``):
  Hugging Face's math-verify, as TRL's ``accuracy_reward`` uses it, run only inside the code sandbox;
- ``format_regex``: 1 if the completion matches a regular expression (default ``<think>...</think><answer>...</answer>``);
- ``length_penalty``: ``-coef * min(L, max_length) / max_length``;
- ``soft_overlong_penalty``: DAPO's soft overlong punishment (0 up to ``L_max - L_cache``, linear to -1 at ``L_max``,
  -1 beyond);
- ``reasoning_gym_score``: the ``reasoning-gym`` package's own checker for rows made by the ``reasoning_gym``
  procedural task.

A completion is a string, or a list of chat messages (the last message's ``content`` is scored). A reference answer is
text, or a number written out (``4`` -> ``"4"``); a row whose answer is null or not an answer (a list, a dict,
true/false) gets ``None`` ("not applicable"), and the registered rewards count it as ``bad_answer`` and name the first
such row once (:class:`genalign.rewards.inputs.AnswerColumn`). Lengths for the length rewards are counted in ``unit``:
``"tokens"`` reads the ``completion_ids`` column (token ids per sample) or the ``completion_length`` column (an int per
sample), which the trainer passes; ``"chars"`` and ``"words"`` (whitespace-separated) need nothing.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

from genalign.rewards.answers import extract_answer, last_boxed
from genalign.rewards.base import register_reward
from genalign.rewards.inputs import AnswerColumn, answer_text, check_column, completion_text

LengthUnit = Literal["tokens", "chars", "words"]

# ----------------------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------------------


def normalize_text(text: str, *, lowercase: bool = False, collapse_whitespace: bool = True, strip: bool = True) -> str:
    """Normalise ``text`` for comparison: strip the ends, collapse runs of whitespace, optionally lowercase."""
    if collapse_whitespace:
        text = re.sub(r"\s+", " ", text)
    if strip:
        text = text.strip()
    if lowercase:
        text = text.lower()
    return text


# ----------------------------------------------------------------------------------------------------------------------
# exact match
# ----------------------------------------------------------------------------------------------------------------------


def _exact_scores(completions: Sequence[Any], references: Sequence[str | None], **options: bool) -> list[float | None]:
    norm = functools.partial(normalize_text, **options)
    return [
        None if reference is None else float(norm(completion_text(completion)) == norm(reference))
        for completion, reference in zip(completions, references, strict=True)
    ]


@register_reward("exact_match", source="rule")
class ExactMatch:
    """1.0 where the normalised completion equals the normalised ``answer``, else 0.0; ``None`` where the answer is
    null or not an answer, counted (:meth:`pop_metrics`: ``bad_answer``) and named once.

    Args:
        lowercase: compare case-insensitively. collapse_whitespace: runs of whitespace count as one space.
        strip: ignore whitespace at both ends.
    """

    def __init__(self, *, lowercase: bool = False, collapse_whitespace: bool = True, strip: bool = True) -> None:
        self.options = {"lowercase": lowercase, "collapse_whitespace": collapse_whitespace, "strip": strip}
        self.answers = AnswerColumn("exact_match")

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[Any], answer: Sequence[Any] | None = None, **columns: Any
    ) -> list[float | None]:
        return _exact_scores(completions, self.answers.read(answer, len(completions), columns), **self.options)

    def pop_metrics(self) -> dict[str, float]:
        """``bad_answer``: rows since the previous call whose answer was not usable."""
        return self.answers.pop_metrics()


def exact_match(
    prompts: Sequence[str],
    completions: Sequence[Any],
    answer: Sequence[Any] | None = None,
    *,
    lowercase: bool = False,
    collapse_whitespace: bool = True,
    strip: bool = True,
    **columns: Any,
) -> list[float | None]:
    """:class:`ExactMatch` as a plain function (no counters, no warning), for direct calls."""
    references = [answer_text(v) for v in check_column("answer", answer, len(completions), "exact_match")]
    return _exact_scores(completions, references, lowercase=lowercase, collapse_whitespace=collapse_whitespace,
                         strip=strip)  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------------
# format
# ----------------------------------------------------------------------------------------------------------------------

THINK_ANSWER_PATTERN = r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$"


@register_reward("format_regex", source="rule")
def format_regex(
    prompts: Sequence[str],
    completions: Sequence[Any],
    *,
    pattern: str = THINK_ANSWER_PATTERN,
    mode: Literal["fullmatch", "search"] = "fullmatch",
    dotall: bool = True,
    **columns: Any,
) -> list[float | None]:
    """1.0 where the completion matches ``pattern`` (whole text for ``"fullmatch"``, anywhere for ``"search"``)."""
    try:
        compiled = re.compile(pattern, flags=re.DOTALL if dotall else 0)
    except re.error as error:
        raise ValueError(
            f"reward 'format_regex': pattern={pattern!r} is not a valid regular expression ({error})."
        ) from None
    if mode not in ("fullmatch", "search"):
        raise ValueError(f"reward 'format_regex': mode={mode!r} is not valid; use 'fullmatch' or 'search'.")
    match = compiled.fullmatch if mode == "fullmatch" else compiled.search
    return [float(match(completion_text(completion)) is not None) for completion in completions]


# ----------------------------------------------------------------------------------------------------------------------
# length
# ----------------------------------------------------------------------------------------------------------------------


def completion_lengths(
    completions: Sequence[Any], *, unit: LengthUnit, columns: dict[str, Any], reward: str
) -> list[int]:
    """Length of every completion in ``unit`` (see the module docstring for where token counts come from)."""
    if unit == "chars":
        return [len(completion_text(c)) for c in completions]
    if unit == "words":
        return [len(completion_text(c).split()) for c in completions]
    if unit != "tokens":
        raise ValueError(f"reward {reward!r}: unit={unit!r} is not valid; use 'tokens', 'chars' or 'words'.")
    if columns.get("completion_length") is not None:
        lengths = check_column("completion_length", columns["completion_length"], len(completions), reward)
        return [int(n) for n in lengths]
    if columns.get("completion_ids") is not None:
        ids = check_column("completion_ids", columns["completion_ids"], len(completions), reward)
        return [len(token_ids) for token_ids in ids]
    raise ValueError(
        f"reward {reward!r}: unit='tokens' needs a 'completion_ids' or 'completion_length' column, and neither was "
        "passed; use a trainer that passes token ids, or set unit='chars' or unit='words'."
    )


@register_reward("length_penalty", source="rule")
def length_penalty(
    prompts: Sequence[str],
    completions: Sequence[Any],
    *,
    max_length: int = 1024,
    coef: float = 1.0,
    unit: LengthUnit = "tokens",
    **columns: Any,
) -> list[float | None]:
    """``-coef * min(L, max_length) / max_length``: 0 for an empty completion, ``-coef`` at ``max_length`` or beyond."""
    if max_length < 1:
        raise ValueError(f"reward 'length_penalty': max_length={max_length!r} must be a positive integer.")
    lengths = completion_lengths(completions, unit=unit, columns=columns, reward="length_penalty")
    return [-coef * min(length, max_length) / max_length for length in lengths]


@register_reward("soft_overlong_penalty", source="DAPO")
def soft_overlong_penalty(
    prompts: Sequence[str],
    completions: Sequence[Any],
    *,
    max_length: int = 4096,
    cache_length: int = 512,
    unit: LengthUnit = "tokens",
    **columns: Any,
) -> list[float | None]:
    """DAPO's soft overlong punishment with ``L_max = max_length`` and ``L_cache = cache_length``.

    ``R(L) = 0`` for ``L <= L_max - L_cache``; ``((L_max - L_cache) - L) / L_cache`` for
    ``L_max - L_cache < L <= L_max``; ``-1`` for ``L > L_max``. Added to the correctness reward.
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(
            f"reward 'soft_overlong_penalty': cache_length={cache_length!r} must be in (0, max_length={max_length}]."
        )
    lengths = completion_lengths(completions, unit=unit, columns=columns, reward="soft_overlong_penalty")
    free = max_length - cache_length
    return [0.0 if n <= free else (free - n) / cache_length if n <= max_length else -1.0 for n in lengths]


# ----------------------------------------------------------------------------------------------------------------------
# reasoning-gym
# ----------------------------------------------------------------------------------------------------------------------


@functools.cache
def _reasoning_gym_scorer(task: str):
    try:
        import reasoning_gym
    except ImportError as error:
        raise ImportError(
            "reward 'reasoning_gym_score' needs the reasoning-gym package: pip install reasoning-gym"
        ) from error
    return reasoning_gym.get_score_answer_fn(task)


@register_reward("reasoning_gym_score", source="reasoning-gym")
def reasoning_gym_score(
    prompts: Sequence[str],
    completions: Sequence[Any],
    reasoning_gym_task: Sequence[str | None] | None = None,
    reasoning_gym_entry: Sequence[dict | None] | None = None,
    *,
    answer_format: Literal["auto", "answer_tags", "boxed", "whole"] = "auto",
    **columns: Any,
) -> list[float | None]:
    """The score of reasoning-gym's own checker (0..1) for rows made by the ``reasoning_gym`` procedural task.

    The answer given to the checker is the ``<answer>`` content, the ``\\boxed{}`` content (``"auto"`` tries these
    two in order) or the whole stripped completion. ``None`` for rows without a reasoning-gym entry.
    """
    count = len(completions)
    tasks = check_column("reasoning_gym_task", reasoning_gym_task, count, "reasoning_gym_score")
    entries = check_column("reasoning_gym_entry", reasoning_gym_entry, count, "reasoning_gym_score")
    rewards: list[float | None] = []
    for completion, task, entry in zip(completions, tasks, entries, strict=True):
        if task is None or entry is None:
            rewards.append(None)
            continue
        text = completion_text(completion)
        extracted: str | None = None
        if answer_format in ("auto", "answer_tags"):
            extracted = extract_answer(text, answer_format="answer_tags")
        if extracted is None and answer_format in ("auto", "boxed"):
            extracted = last_boxed(text)
        if extracted is None and answer_format in ("auto", "whole"):
            extracted = text.strip()
        score = 0.0 if extracted is None else _reasoning_gym_scorer(task)(extracted, entry)
        rewards.append(float(score) if score is not None and not math.isnan(score) else 0.0)
    return rewards
