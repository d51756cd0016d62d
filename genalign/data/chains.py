"""Arithmetic chains solved step by step: a verifiable multi-step task whose intermediate steps can be segmented.

A problem is a left-to-right chain of ``k`` additions and subtractions of 2-digit operands; the prompt ends with a
newline::

    37+45-18+26+55

The expected completion writes one step per line (so that every newline token closes a segment of
:class:`genalign.policies.lm.segments.SegmentBoundaries`) and the answer on a last line after ``A:``::

    37+45=82
    82-18=64
    64+26=90
    90+55=145
    A:145

A step may also be written in *long form*, adding the tens of the operand first and the units second:
``64+26=84+6=90``. The task's checker (:func:`grade_chain`) reads both forms. Rewards on top of it live in
:mod:`genalign.rewards.chains` (``chain_answer``: the final answer; ``chain_progress``: the share of leading steps that
are right). Splits are assigned by a hash of the prompt text, as for every procedural task
(:func:`genalign.data.procedural.split_of`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from genalign.data.procedural import PROCEDURAL_TASKS, Split, _check_common, split_of

ANSWER_PREFIX = "A:"
_OPERATION = re.compile(r"([+-])(\d+)")
_STEP = re.compile(r"^(\d+)([+-])(\d+)=(?:\d+[+-]\d+=)?(\d+)$")
_ANSWER = re.compile(r"^A:(-?\d+)$")


def apply(x: int, op: str, b: int) -> int:
    """``x op b`` for ``op`` in ``+``, ``-``."""
    return x + b if op == "+" else x - b


def units_carry(x: int, op: str, b: int) -> bool:
    """Whether ``x op b`` carries (``+``) or borrows (``-``) out of the units column (``64+26``, ``64-27``)."""
    return (x % 10 + b % 10 >= 10) if op == "+" else (x % 10 < b % 10)


def forgot_carry(x: int, op: str, b: int) -> int:
    """The result with the units carry or borrow forgotten (off by ten): ``64+26`` -> ``80``, ``64-27`` -> ``47``.

    Only meaningful where :func:`units_carry` is true; used by ``scripts/pretrain_demo_chain_lm.py`` to give the demo
    model ``builtin:chain-lm`` a realistic, systematic mistake.
    """
    return apply(x, op, b) + (-10 if op == "+" else 10)


def format_step(x: int, op: str, b: int, y: int, *, long_form: bool = False, middle: int | None = None) -> str:
    """One step line without its newline: ``"64+26=90"``, or ``"64+26=84+6=90"`` in long form.

    Args:
        middle: the value after the tens in long form (default: ``x op tens(b)``, exact).
    """
    if not long_form:
        return f"{x}{op}{b}={y}"
    middle = apply(x, op, b - b % 10) if middle is None else middle
    return f"{x}{op}{b}={middle}{op}{b % 10}={y}"


def parse_problem(prompt: str) -> tuple[int, list[tuple[str, int]]]:
    """The first operand and the ``(operator, operand)`` pairs of a prompt ``"37+45-18\\n"``.

    Raises:
        ValueError: the prompt is not a chain of this task.
    """
    text = prompt.strip()
    head = re.match(r"\d+", text)
    operations = _OPERATION.findall(text[head.end() :]) if head else []
    if head is None or not operations or "".join(f"{op}{b}" for op, b in operations) != text[head.end() :]:
        raise ValueError(f"not an arithmetic_chain prompt: {prompt!r} (expected e.g. '37+45-18\\n')")
    return int(head.group()), [(op, int(b)) for op, b in operations]


def chain_values(first: int, operations: list[tuple[str, int]]) -> list[int]:
    """The running values after each operation (the last one is the answer)."""
    values, x = [], first
    for op, b in operations:
        x = apply(x, op, b)
        values.append(x)
    return values


def solution_text(prompt: str) -> str:
    """The correct completion of ``prompt`` in short form (steps, then ``A:<answer>``), without an end token."""
    first, operations = parse_problem(prompt)
    lines, x = [], first
    for (op, b), y in zip(operations, chain_values(first, operations), strict=True):
        lines.append(format_step(x, op, b, y))
        x = y
    return "\n".join([*lines, f"{ANSWER_PREFIX}{x}"])


@dataclass(frozen=True)
class ChainGrade:
    """What :func:`grade_chain` found in one completion.

    Attributes:
        correct: the ``A:`` line (the last non-empty line) holds the right answer.
        answered: there is such a line with an integer.
        steps_right: leading step lines that perform the problem's next operation on the right running value and
            write the right result (either form); counting stops at the first line that does not.
        num_steps: operations in the problem.
    """

    correct: bool
    answered: bool
    steps_right: int
    num_steps: int

    @property
    def progress(self) -> float:
        """``steps_right / num_steps``."""
        return self.steps_right / self.num_steps


def grade_chain(prompt: str, completion: str) -> ChainGrade:
    """Grade a completion against the exact chain of ``prompt`` (nothing is evaluated but integers)."""
    first, operations = parse_problem(prompt)
    values = chain_values(first, operations)
    lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
    answer = _ANSWER.match(lines[-1]) if lines else None
    steps_right, x = 0, first
    for line, (op, b), y in zip(lines, operations, values, strict=False):
        step = _STEP.match(line)
        if step is None or (int(step[1]), step[2], int(step[3]), int(step[4])) != (x, op, b, y):
            break
        if step[0].count("=") == 2 and line != format_step(x, op, b, y, long_form=True):
            break  # a long-form line must get its middle value right too
        steps_right, x = steps_right + 1, y
    return ChainGrade(
        correct=answer is not None and int(answer[1]) == values[-1],
        answered=answer is not None,
        steps_right=steps_right,
        num_steps=len(operations),
    )


def _num_steps(steps: int | list[int] | tuple[int, int]) -> tuple[int, int]:
    low, high = (steps, steps) if isinstance(steps, int) else tuple(steps)
    if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high <= 12):
        raise ValueError(
            f"arithmetic_chain: steps={steps!r} must be an integer or [min, max] with 1 <= min <= max <= 12."
        )
    return low, high


@PROCEDURAL_TASKS.register("arithmetic_chain", source="genalign")
def arithmetic_chain(
    size: int,
    seed: int,
    *,
    steps: int | list[int] = (4, 5),
    operators: str | list[str] = "+-",
    max_value: int = 999,
    split: Split = "train",
    eval_fraction: float = 0.1,
) -> list[dict[str, Any]]:
    """Chains ``"37+45-18+26+55\\n"`` of 2-digit operands, to be solved one step per line (module docstring).

    Args:
        size: number of rows.
        seed: seed of the candidate stream.
        steps: operations per chain, an integer or ``[min, max]`` (uniform); default 4 or 5.
        operators: subset of ``"+-"``; each operation draws one uniformly, except that ``-`` never goes below zero
            and ``+`` never above ``max_value`` (the other operator is used then).
        max_value: the largest running value.
        split: ``"train"`` or ``"eval"``; the two are disjoint (hash of the prompt text).
        eval_fraction: share of all problems that belongs to the eval split.

    Returns:
        rows with ``prompt``, ``answer`` (str, the final value), ``solution`` (the short-form completion) and
        ``num_steps``.
    """
    _check_common(size, split, eval_fraction)
    low, high = _num_steps(steps)
    ops = list(operators)
    if not ops or any(op not in "+-" for op in ops):
        raise ValueError(f"arithmetic_chain: operators={operators!r} must be a non-empty subset of '+-'.")
    if not isinstance(max_value, int) or max_value < 198:
        raise ValueError(f"arithmetic_chain: max_value={max_value!r} must be an integer >= 198 (two operands).")
    rng = random.Random(f"arithmetic_chain/{seed}")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range(50 * size + 1000):
        x = rng.randint(10, 99)
        text = str(x)
        for _ in range(rng.randint(low, high)):
            op, b = rng.choice(ops), rng.randint(10, 99)
            if (op == "-" and b > x) or (op == "+" and x + b > max_value):
                op = "+" if op == "-" else "-"
            x = apply(x, op, b)
            text += f"{op}{b}"
        prompt = text + "\n"
        if prompt in seen or split_of(prompt, eval_fraction=eval_fraction) != split:
            continue
        seen.add(prompt)
        solution = solution_text(prompt)
        rows.append({"prompt": prompt, "answer": str(x), "solution": solution, "num_steps": solution.count("\n")})
        if len(rows) == size:
            return rows
    raise ValueError(f"arithmetic_chain: found only {len(rows)} distinct {split} problems; lower size={size}.")


__all__ = [
    "ANSWER_PREFIX",
    "ChainGrade",
    "apply",
    "arithmetic_chain",
    "chain_values",
    "forgot_carry",
    "format_step",
    "grade_chain",
    "parse_problem",
    "solution_text",
    "units_carry",
]
