"""Offline procedural task generators: ``(size, seed, **args) -> list[dict]``.

Every generator returns ``size`` rows, each with a ``"prompt"`` string and the columns its rewards need (``"answer"``
at least). Generators are pure functions of their arguments: the same ``(size, seed, args)`` gives the same rows.

Train / held-out split (``split="train"`` or ``"eval"``): every candidate problem is assigned to one split by a stable
hash of its prompt text (:func:`split_of`: SHA-256 of the prompt, first 8 bytes as an integer, modulo 10,000, compared
with ``eval_fraction``). The assignment does not depend on the seed or the size, so the two splits are disjoint for
every pair of seeds, and a problem's split never changes between runs or machines. Generators draw candidates from a
seeded random stream and keep those that fall in the requested split (and are not duplicates).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any, Literal

from genalign.registry import Registry

Split = Literal["train", "eval"]

#: name -> generator ``(size: int, seed: int, **args) -> list[dict]``
PROCEDURAL_TASKS: Registry[Callable[..., list[dict[str, Any]]]] = Registry("procedural task")

_HASH_BUCKETS = 10_000


def split_of(prompt: str, *, eval_fraction: float) -> Split:
    """The split a problem belongs to, from a stable hash of its prompt text (independent of any seed)."""
    bucket = int.from_bytes(hashlib.sha256(prompt.encode("utf-8")).digest()[:8], "big") % _HASH_BUCKETS
    return "eval" if bucket < round(eval_fraction * _HASH_BUCKETS) else "train"


def _check_common(size: int, split: str, eval_fraction: float) -> None:
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"procedural task: size={size!r} must be a positive integer; set args.size (e.g. 1000).")
    if split not in ("train", "eval"):
        raise ValueError(f"procedural task: split={split!r} is not valid; use 'train' or 'eval'.")
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(
            f"procedural task: eval_fraction={eval_fraction!r} must be strictly between 0 and 1 (e.g. 0.1)."
        )


# ----------------------------------------------------------------------------------------------------------------------
# arithmetic (ours; used by the demo model)
# ----------------------------------------------------------------------------------------------------------------------

_OPERATORS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def arithmetic_answer(a: int, op: str, b: int) -> int:
    """The exact result of ``a op b`` for one of the supported operators (``+``, ``-``, ``*``)."""
    return _OPERATORS[op](a, b)


def no_carry_sum(a: int, b: int) -> int:
    """The "forgot to carry" answer to ``a + b``: every column written as its digit sum mod 10, the leading column whole.

    ``58 + 67`` -> units ``(8 + 7) % 10 = 5``, tens ``5 + 6 = 11`` -> ``115`` (the right answer is ``125``). Used by
    ``scripts/pretrain_demo_lm.py`` to give the demo model a realistic, systematic mistake that RL can fix.
    """
    if a < 0 or b < 0:
        raise ValueError(f"no_carry_sum needs non-negative operands, got a={a}, b={b}")
    da, db = str(a)[::-1], str(b)[::-1]  # least significant digit first
    width = max(len(da), len(db))
    da, db = da.ljust(width, "0"), db.ljust(width, "0")
    columns = [int(x) + int(y) for x, y in zip(da, db, strict=True)]
    digits = [str(c % 10) for c in columns[:-1]] + [str(columns[-1])]
    return int("".join(reversed(digits)))


@PROCEDURAL_TASKS.register("arithmetic", source="genalign")
def arithmetic(
    size: int,
    seed: int,
    *,
    digits: int = 3,
    operators: list[str] | str = "+",
    split: Split = "train",
    eval_fraction: float = 0.1,
    spaces: bool = False,
) -> list[dict[str, Any]]:
    """Integer arithmetic problems ``"123+456="`` with answer ``"579"``.

    Args:
        size: number of rows.
        seed: seed of the candidate stream.
        digits: every operand has exactly this many digits (1..9).
        operators: subset of ``"+-*"`` (string or list); each row draws one uniformly.
        split: ``"train"`` or ``"eval"``; the two are disjoint (see the module docstring).
        eval_fraction: share of all problems that belongs to the eval split.
        spaces: write ``"123 + 456 ="`` instead of ``"123+456="``.

    Returns:
        rows with ``prompt`` (str), ``answer`` (str, the exact integer result), ``a``, ``b`` (int) and ``operator``.
    """
    _check_common(size, split, eval_fraction)
    if not isinstance(digits, int) or not 1 <= digits <= 9:
        raise ValueError(f"arithmetic: digits={digits!r} must be an integer from 1 to 9.")
    ops = list(operators)
    if not ops or any(op not in _OPERATORS for op in ops):
        raise ValueError(f"arithmetic: operators={operators!r} must be a non-empty subset of {''.join(_OPERATORS)!r}.")
    low, high = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    num_problems = (high - low + 1) ** 2 * len(set(ops))
    expected_in_split = num_problems * (eval_fraction if split == "eval" else 1 - eval_fraction)
    if size > 0.5 * expected_in_split:
        raise ValueError(
            f"arithmetic: size={size} is too large for digits={digits} and operators={operators!r} "
            f"(about {int(expected_in_split)} distinct {split} problems exist); use more digits or a smaller size."
        )
    rng = random.Random(f"arithmetic/{seed}")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(rows) < size:
        a, b, op = rng.randint(low, high), rng.randint(low, high), rng.choice(ops)
        prompt = f"{a} {op} {b} =" if spaces else f"{a}{op}{b}="
        if prompt in seen or split_of(prompt, eval_fraction=eval_fraction) != split:
            continue
        seen.add(prompt)
        rows.append({"prompt": prompt, "answer": str(arithmetic_answer(a, op, b)), "a": a, "b": b, "operator": op})
    return rows


# ----------------------------------------------------------------------------------------------------------------------
# reasoning-gym (https://pypi.org/project/reasoning-gym/)
# ----------------------------------------------------------------------------------------------------------------------


@PROCEDURAL_TASKS.register("reasoning_gym", source="reasoning-gym")
def reasoning_gym_task(
    size: int,
    seed: int,
    *,
    task: str = "basic_arithmetic",
    split: Split = "train",
    eval_fraction: float = 0.1,
    task_args: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Rows from a ``reasoning-gym`` dataset (e.g. ``basic_arithmetic``, ``gsm_symbolic``, ``countdown``, ``mini_sudoku``).

    Each row holds ``prompt`` (the question), ``answer`` (the reference answer string), ``reasoning_gym_task`` (the
    task name) and ``reasoning_gym_entry`` (the full entry, metadata included). The ``reasoning_gym_score`` reward
    passes the last two to the package's own checker, so tasks with many valid answers (countdown, sudoku) are scored
    correctly.

    Args:
        task: a reasoning-gym dataset name.
        task_args: extra keyword arguments for that dataset's config (difficulty ranges ...).
        split, eval_fraction: as for ``arithmetic``; assignment by hash of the question text.
    """
    _check_common(size, split, eval_fraction)
    try:
        import reasoning_gym
        from reasoning_gym.factory import DATASETS
    except ImportError as error:
        raise ImportError(
            "procedural task 'reasoning_gym' needs the reasoning-gym package: pip install reasoning-gym"
        ) from error
    if task not in DATASETS:
        from genalign.registry import did_you_mean

        raise ValueError(
            f"reasoning_gym: unknown task={task!r}.{did_you_mean(task, sorted(DATASETS))} "
            f"Valid tasks include: {', '.join(sorted(DATASETS)[:40])}, ..."
        )
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    chunk = max(64, int(size / (eval_fraction if split == "eval" else 1 - eval_fraction) * 1.2))
    for attempt in range(100):
        # Distinct seeds per chunk so the candidate stream never repeats; the split test keeps it disjoint.
        dataset = reasoning_gym.create_dataset(task, size=chunk, seed=seed * 1000 + attempt, **(task_args or {}))
        for entry in dataset:
            question = entry["question"]
            if question in seen or split_of(question, eval_fraction=eval_fraction) != split:
                continue
            seen.add(question)
            rows.append(
                {
                    "prompt": question,
                    "answer": str(entry["answer"]),
                    "reasoning_gym_task": task,
                    "reasoning_gym_entry": entry,
                }
            )
            if len(rows) == size:
                return rows
    raise ValueError(
        f"reasoning_gym: task={task!r} produced only {len(rows)} distinct {split} questions, fewer than size={size}; "
        "lower the size or widen the task's difficulty through task_args."
    )


# ----------------------------------------------------------------------------------------------------------------------
# shapes_t2i (text-to-image prompts of the shapes world; used by the Flow-GRPO demo model builtin:shapes-t2i)
# ----------------------------------------------------------------------------------------------------------------------


@PROCEDURAL_TASKS.register("shapes_t2i", source="genalign")
def shapes_t2i(
    size: int,
    seed: int,
    *,
    split: Split = "train",
    holdout_fraction: float = 0.2,
    templates: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Text-to-image prompts of the shapes world (:func:`genalign.data.shapes.shapes_t2i_rows`).

    Rows hold ``prompt``, ``target`` (read by the ``geneval_shapes`` reward), ``template`` and ``split``. The split
    is the shapes world's own (:func:`genalign.data.shapes.prompt_split`, a hash of the prompt text with
    ``holdout_fraction``), not :func:`split_of`: ``split="train"`` keeps its ``train`` prompts and ``split="eval"`` its
    ``test`` prompts, the ones the demo model ``builtin:shapes-t2i`` never saw in pre-training (keep
    ``holdout_fraction=0.2`` for that model). Rows are drawn with replacement, so a prompt can occur more than once.

    Args:
        templates: prompt templates to draw from (``count``, ``pair``, ``relation``; None = all).
    """
    from genalign.data.shapes import TEMPLATES, shapes_t2i_rows

    if not isinstance(size, int) or size < 1:
        raise ValueError(f"procedural task shapes_t2i: size={size!r} must be a positive integer; set args.size.")
    if split not in ("train", "eval"):
        raise ValueError(f"procedural task shapes_t2i: split={split!r} is not valid; use 'train' or 'eval'.")
    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError(
            f"procedural task shapes_t2i: holdout_fraction={holdout_fraction!r} must be strictly between 0 and 1 "
            "(0.2 for builtin:shapes-t2i)."
        )
    return shapes_t2i_rows(
        size,
        seed,
        split="test" if split == "eval" else "train",
        holdout_fraction=holdout_fraction,
        templates=tuple(templates) if templates is not None else TEMPLATES,
    )
