"""Rule-based text rewards: ``f(prompts, completions, **columns) -> list[float | None]``.

- ``exact_match``: 1 if the completion equals the ``answer`` column after normalisation, else 0;
- ``math_equivalence``: extracts the final answer (``\\boxed{}``, ``<answer>`` tags, GSM8K ``####`` or the last number)
  and compares it with ``answer`` as a string, as an exact rational number, then symbolically with sympy (in a worker
  process with a timeout, so a pathological expression cannot hang training);
- ``format_regex``: 1 if the completion matches a regular expression (default ``<think>...</think><answer>...</answer>``);
- ``length_penalty``: ``-coef * min(L, max_length) / max_length``;
- ``soft_overlong_penalty``: DAPO's soft overlong punishment (0 up to ``L_max - L_cache``, linear to -1 at ``L_max``,
  -1 beyond);
- ``reasoning_gym_score``: the ``reasoning-gym`` package's own checker for rows made by the ``reasoning_gym``
  procedural task.

A completion is a string, or a list of chat messages (the last message's ``content`` is scored). A row whose reference
column is ``None`` gets ``None`` ("not applicable"). Lengths for the length rewards are counted in ``unit``:
``"tokens"`` reads the ``completion_ids`` column (token ids per sample) or the ``completion_length`` column (an int per
sample), which the trainer passes; ``"chars"`` and ``"words"`` (whitespace-separated) need nothing.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from fractions import Fraction
from typing import Any, Literal

from genalign.rewards.base import register_reward

LengthUnit = Literal["tokens", "chars", "words"]
AnswerFormat = Literal["auto", "boxed", "answer_tags", "last_number"]

# ----------------------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------------------


def completion_text(completion: Any) -> str:
    """The text of a completion: the string itself, or the ``content`` of the last chat message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content")
        if isinstance(content, str):
            return content
    raise TypeError(
        f"a text reward needs a string completion or a list of chat messages ending in one with string 'content'; "
        f"got {type(completion).__name__} {completion!r:.80}"
    )


def normalize_text(text: str, *, lowercase: bool = False, collapse_whitespace: bool = True, strip: bool = True) -> str:
    """Normalise ``text`` for comparison: strip the ends, collapse runs of whitespace, optionally lowercase."""
    if collapse_whitespace:
        text = re.sub(r"\s+", " ", text)
    if strip:
        text = text.strip()
    if lowercase:
        text = text.lower()
    return text


def _check_column(name: str, values: Sequence[Any] | None, count: int, reward: str) -> Sequence[Any]:
    if values is None:
        raise ValueError(
            f"reward {reward!r} needs the dataset column {name!r}; add it to the data or map it with "
            f"data.columns.{name}=<your column>."
        )
    if len(values) != count:
        raise ValueError(f"reward {reward!r}: column {name!r} has {len(values)} values for {count} completions.")
    return values


# ----------------------------------------------------------------------------------------------------------------------
# exact match
# ----------------------------------------------------------------------------------------------------------------------


@register_reward("exact_match", source="rule")
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
    """1.0 where the normalised completion equals the normalised ``answer``, else 0.0; ``None`` where answer is None."""
    answer = _check_column("answer", answer, len(completions), "exact_match")
    norm = functools.partial(normalize_text, lowercase=lowercase, collapse_whitespace=collapse_whitespace, strip=strip)
    return [
        None if reference is None else float(norm(completion_text(completion)) == norm(str(reference)))
        for completion, reference in zip(completions, answer, strict=True)
    ]


# ----------------------------------------------------------------------------------------------------------------------
# math answer equivalence
# ----------------------------------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, or None."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    index = text.index("{", start) + 1
    depth = 1
    for position in range(index, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return text[index:position]
    return None  # unbalanced: the model did not close the box


def extract_answer(text: str, *, answer_format: AnswerFormat = "auto") -> str | None:
    """The final answer in ``text``, or None if there is none.

    ``"boxed"``: last ``\\boxed{}``; ``"answer_tags"``: last ``<answer>...</answer>``; ``"last_number"``: the last
    number; ``"auto"``: the first of boxed, answer tags, GSM8K's ``#### x`` and the last number that is present
    (a ``\\boxed{`` that is never closed, as in a truncated completion, gives None).
    """
    if answer_format in ("boxed", "auto"):
        boxed = last_boxed(text)
        if boxed is not None or answer_format == "boxed" or "\\boxed{" in text or "\\fbox{" in text:
            return boxed  # an unclosed box (a truncated answer) counts as no answer
    if answer_format in ("answer_tags", "auto"):
        tags = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL)
        if tags or answer_format == "answer_tags":
            return tags[-1].strip() if tags else None
    if answer_format == "auto" and "####" in text:
        return text.rsplit("####", 1)[1].strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def _clean_math(text: str) -> str:
    """Drop LaTeX decoration that does not change a value: ``$``, ``\\left``, ``\\text{}``, spaces, a final period."""
    text = text.strip().strip("$").strip()
    text = re.sub(r"\\text\{([^}]*)\}", r"\1", text)
    text = re.sub(r"\\(left|right|displaystyle|!|,|;)", "", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = re.sub(r"\^\{?\\circ\}?", "", text).replace("\\%", "").replace("%", "")
    text = re.sub(r"\s+", "", text)
    return text.rstrip(".")


def _as_fraction(text: str) -> Fraction | None:
    """``text`` as an exact rational (``"1,234"``, ``"-0.5"``, ``"3/4"``, ``"\\frac{3}{4}"``), or None."""
    frac = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", text)
    if frac:
        text = f"{frac.group(1)}{frac.group(2)}/{frac.group(3)}"
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _latex_to_sympy(text: str) -> str:
    text = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", text)
    text = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", text)
    text = text.replace("\\cdot", "*").replace("\\times", "*").replace("\\pi", "pi").replace("{", "(").replace("}", ")")
    return text.replace("\\", "")


def _symbolic_equal_worker(first: str, second: str) -> bool:
    """``simplify(first - second) == 0`` (runs in the worker process)."""
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    transformations = (*standard_transformations, implicit_multiplication_application, convert_xor)
    try:
        a = parse_expr(_latex_to_sympy(first), transformations=transformations, evaluate=True)
        b = parse_expr(_latex_to_sympy(second), transformations=transformations, evaluate=True)
        return bool(sympy.simplify(a - b) == 0)
    except Exception:
        return False


_SYMPY_POOL: ProcessPoolExecutor | None = None


def symbolic_equal(first: str, second: str, *, timeout_s: float = 5.0) -> bool:
    """Whether two expressions are symbolically equal, decided by sympy in a worker process within ``timeout_s``.

    A comparison that runs out of time counts as "not equal"; the stuck worker is terminated and a fresh one is
    started for the next call, so a pathological expression costs at most ``timeout_s``.
    """
    global _SYMPY_POOL
    if len(first) > 300 or len(second) > 300:
        return False
    if _SYMPY_POOL is None:
        import multiprocessing

        _SYMPY_POOL = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    future = _SYMPY_POOL.submit(_symbolic_equal_worker, first, second)
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        pool, _SYMPY_POOL = _SYMPY_POOL, None
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        return False


def math_answers_equal(predicted: str, reference: str, *, tolerance: float = 1e-6, timeout_s: float = 5.0) -> bool:
    """Compare two final answers: as cleaned strings, as exact rationals (relative ``tolerance``), then symbolically."""
    predicted, reference = _clean_math(predicted), _clean_math(reference)
    if not predicted or not reference:
        return False
    if predicted == reference:
        return True
    a, b = _as_fraction(predicted), _as_fraction(reference)
    if a is not None and b is not None:
        return abs(a - b) <= tolerance * max(1, abs(b))
    if (a is not None or b is not None) and _NUMBER.fullmatch(predicted) and _NUMBER.fullmatch(reference):
        return False
    return symbolic_equal(predicted, reference, timeout_s=timeout_s)


@register_reward("math_equivalence", source="rule")
def math_equivalence(
    prompts: Sequence[str],
    completions: Sequence[Any],
    answer: Sequence[Any] | None = None,
    *,
    answer_format: AnswerFormat = "auto",
    tolerance: float = 1e-6,
    timeout_s: float = 5.0,
    **columns: Any,
) -> list[float | None]:
    """1.0 where the completion's final answer equals ``answer`` mathematically, else 0.0 (also with no answer).

    The reference is used as is unless it contains a ``\\boxed{}`` or GSM8K ``####`` marker, in which case that part
    is extracted. ``None`` where the reference is None.
    """
    answer = _check_column("answer", answer, len(completions), "math_equivalence")
    rewards: list[float | None] = []
    for completion, reference in zip(completions, answer, strict=True):
        if reference is None:
            rewards.append(None)
            continue
        reference = str(reference)
        if "\\boxed" in reference or "####" in reference:
            reference = extract_answer(reference) or reference
        predicted = extract_answer(completion_text(completion), answer_format=answer_format)
        equal = predicted is not None and math_answers_equal(
            predicted, reference, tolerance=tolerance, timeout_s=timeout_s
        )
        rewards.append(float(equal))
    return rewards


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
        lengths = _check_column("completion_length", columns["completion_length"], len(completions), reward)
        return [int(n) for n in lengths]
    if columns.get("completion_ids") is not None:
        ids = _check_column("completion_ids", columns["completion_ids"], len(completions), reward)
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
    tasks = _check_column("reasoning_gym_task", reasoning_gym_task, count, "reasoning_gym_score")
    entries = _check_column("reasoning_gym_entry", reasoning_gym_entry, count, "reasoning_gym_score")
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
