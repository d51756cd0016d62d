"""Procedural task generators: determinism, answers, disjoint train/eval splits, argument errors."""

from __future__ import annotations

import pytest

from genalign.data.procedural import PROCEDURAL_TASKS, arithmetic, no_carry_sum, split_of


def test_registry_holds_the_tasks():
    assert {"arithmetic", "reasoning_gym"} <= set(PROCEDURAL_TASKS.names())


def test_arithmetic_is_deterministic_and_correct():
    first = arithmetic(50, seed=3, digits=2, operators="+-*")
    assert first == arithmetic(50, seed=3, digits=2, operators="+-*")
    assert first != arithmetic(50, seed=4, digits=2, operators="+-*")
    for row in first:
        a, op, b = row["a"], row["operator"], row["b"]
        assert row["prompt"] == f"{a}{op}{b}="
        assert 10 <= a <= 99 and 10 <= b <= 99
        assert row["answer"] == str({"+": a + b, "-": a - b, "*": a * b}[op])
    assert len({row["prompt"] for row in first}) == 50  # no duplicates


def test_arithmetic_spaces_format():
    row = arithmetic(1, seed=0, digits=1, operators="+", spaces=True, eval_fraction=0.5)[0]
    assert row["prompt"] == f"{row['a']} + {row['b']} ="


def test_train_and_eval_splits_are_disjoint_for_any_seeds():
    train = {r["prompt"] for seed in (0, 1) for r in arithmetic(2000, seed=seed, digits=2, split="train")}
    held_out = {r["prompt"] for seed in (0, 7) for r in arithmetic(200, seed=seed, digits=2, split="eval")}
    assert not train & held_out
    assert all(split_of(p, eval_fraction=0.1) == "eval" for p in held_out)


def test_split_fraction_is_roughly_respected():
    prompts = [f"{a}+{b}=" for a in range(100) for b in range(100)]
    share = sum(split_of(p, eval_fraction=0.2) == "eval" for p in prompts) / len(prompts)
    assert 0.18 < share < 0.22


def test_no_carry_sum_hand_computed():
    assert no_carry_sum(58, 67) == 115  # units 15 -> 5, tens 5 + 6 = 11
    assert no_carry_sum(123, 456) == 579  # no carry: the right answer
    assert no_carry_sum(999, 1) == 990
    with pytest.raises(ValueError, match="non-negative"):
        no_carry_sum(-1, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"digits": 0}, "digits=0"),
        ({"operators": "/"}, "operators='/'"),
        ({"split": "test"}, "split='test'"),
        ({"eval_fraction": 1.0}, "eval_fraction=1.0"),
    ],
)
def test_arithmetic_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        arithmetic(10, seed=0, **kwargs)


def test_arithmetic_rejects_a_size_the_problem_space_cannot_fill():
    with pytest.raises(ValueError, match="too large"):
        arithmetic(60, seed=0, digits=1, operators="+")  # 100 problems in all


def test_reasoning_gym_rows_carry_their_checker_inputs():
    pytest.importorskip("reasoning_gym")
    rows = PROCEDURAL_TASKS.get("reasoning_gym")(20, 0, task="basic_arithmetic")
    assert rows == PROCEDURAL_TASKS.get("reasoning_gym")(20, 0, task="basic_arithmetic")
    held_out = PROCEDURAL_TASKS.get("reasoning_gym")(20, 0, task="basic_arithmetic", split="eval")
    assert not {r["prompt"] for r in rows} & {r["prompt"] for r in held_out}
    row = rows[0]
    assert row["reasoning_gym_task"] == "basic_arithmetic"
    assert row["reasoning_gym_entry"]["answer"] == row["answer"]


def test_reasoning_gym_unknown_task_suggests_a_name():
    pytest.importorskip("reasoning_gym")
    with pytest.raises(ValueError, match="basic_arithmetic"):
        PROCEDURAL_TASKS.get("reasoning_gym")(5, 0, task="basic_arithmetc")
