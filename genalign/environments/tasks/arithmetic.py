"""Arithmetic with a calculator: multi-digit products and sums of products that a tiny model gets wrong unless it
calls the ``calculator`` tool right (task ``calculator_arithmetic``, environment ``calculator_arithmetic``)."""

from __future__ import annotations

import random
from typing import Any

from genalign.environments.base import register_environment
from genalign.environments.calculator import evaluate, format_number
from genalign.environments.tasks.common import (
    TASKS,
    AnswerEnvironment,
    Split,
    check_common,
    final_answer,
    last_number,
    parse_number,
    split_of,
)

ENV_NAME = "calculator_arithmetic"
_OPERATORS = "+-*"


@TASKS.register(ENV_NAME, summary="multi-digit arithmetic; the calculator tool makes it easy", source="genalign")
def calculator_arithmetic(
    size: int,
    seed: int,
    *,
    digits: int = 4,
    terms: int = 2,
    operators: str | list[str] = "*",
    split: Split = "train",
    eval_fraction: float = 0.1,
) -> list[dict[str, Any]]:
    """Rows ``"What is 4821 * 9377? ..."`` with the exact answer.

    Args:
        size: number of rows.
        seed: seed of the candidate stream.
        digits: digits of every operand (2..12).
        terms: operands per expression (2..5); the usual precedence applies (``a + b * c``).
        operators: subset of ``"+-*"``; each operator position draws one uniformly.
        split, eval_fraction: as in ``genalign.data.procedural`` (hash of the prompt).

    Returns:
        rows with ``prompt``, ``answer`` (the exact integer, as a string), ``expression`` and ``env``.
    """
    check_common(ENV_NAME, size, split, eval_fraction)
    if isinstance(digits, bool) or not isinstance(digits, int) or not 2 <= digits <= 12:
        raise ValueError(f"task {ENV_NAME}: digits={digits!r} must be an integer from 2 to 12.")
    if isinstance(terms, bool) or not isinstance(terms, int) or not 2 <= terms <= 5:
        raise ValueError(f"task {ENV_NAME}: terms={terms!r} must be an integer from 2 to 5.")
    ops = list(operators)
    if not ops or any(op not in _OPERATORS for op in ops):
        raise ValueError(f"task {ENV_NAME}: operators={operators!r} must be a non-empty subset of {_OPERATORS!r}.")
    rng = random.Random(f"{ENV_NAME}/{seed}")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range(size * 100):
        numbers = [rng.randint(10 ** (digits - 1), 10**digits - 1) for _ in range(terms)]
        expression = str(numbers[0]) + "".join(f" {rng.choice(ops)} {n}" for n in numbers[1:])
        prompt = (
            f"What is {expression}? You can use the calculator tool. "
            "When you know the result, reply with 'Answer: <number>'."
        )
        if prompt in seen or split_of(prompt, eval_fraction=eval_fraction) != split:
            continue
        seen.add(prompt)
        rows.append({"prompt": prompt, "answer": format_number(evaluate(expression)), "expression": expression,
                     "env": ENV_NAME})  # fmt: skip
        if len(rows) == size:
            return rows
    raise ValueError(f"task {ENV_NAME}: only {len(rows)} distinct {split} problems found; use more digits or terms.")


@register_environment(ENV_NAME, summary="arithmetic with the calculator tool; reward 1 for the exact final answer",
                      source="genalign")  # fmt: skip
class CalculatorArithmetic(AnswerEnvironment):
    """The model may call ``calculator``; the episode ends with its answer, which must equal the row's ``answer``.

    Args:
        max_turns, error_penalty, tools, tool_limits: as for :class:`AnswerEnvironment` (``calculator`` is always
            there; ``tools`` adds more).
    """

    def __init__(self, **kwargs: Any) -> None:
        tools = ["calculator", *kwargs.pop("tools", ())]
        super().__init__(tools=tools, **kwargs)
        self.expected: int | None = None

    def reset(self, *, answer: str | int, **row: Any) -> None:
        self.expected = parse_number(str(answer))
        if not isinstance(self.expected, int):
            raise ValueError(f"{ENV_NAME}: the row's answer {answer!r} is not an integer.")
        return None

    def verify(self, text: str) -> bool:
        marked = final_answer(text)
        given = parse_number(marked if marked is not None else last_number(text))
        return given is not None and given == self.expected
