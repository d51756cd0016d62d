"""The ``arithmetic_chain`` procedural task: deterministic disjoint splits, exact checker, rewards, step segments."""

from __future__ import annotations

import pytest

from genalign.data import load_rows
from genalign.data.chains import (
    arithmetic_chain,
    forgot_carry,
    format_step,
    grade_chain,
    parse_problem,
    solution_text,
    units_carry,
)
from genalign.data.procedural import PROCEDURAL_TASKS
from genalign.data.sources import DataSourceConfig
from genalign.rewards import REWARDS

PROMPT = "37+45-18+26+55\n"  # 82, 64, 90, 145


def test_rows_are_deterministic_and_the_splits_disjoint():
    train = arithmetic_chain(300, seed=0, split="train")
    assert train == arithmetic_chain(300, seed=0, split="train")
    assert train != arithmetic_chain(300, seed=1, split="train")
    held_out = {r["prompt"] for s in (0, 1) for r in arithmetic_chain(100, seed=s, split="eval")}
    assert not held_out & {r["prompt"] for r in train}
    assert len({r["prompt"] for r in train}) == 300
    for row in train[:50]:
        _, operations = parse_problem(row["prompt"])
        assert row["prompt"].endswith("\n") and 4 <= len(operations) == row["num_steps"] <= 5
        assert grade_chain(row["prompt"], row["solution"]).correct
        assert row["solution"].endswith(f"A:{row['answer']}")


def test_values_stay_in_range_and_the_task_is_registered():
    rows = load_rows(DataSourceConfig(source="procedural:arithmetic_chain", args={"size": 200, "seed": 3}))
    assert PROCEDURAL_TASKS.get("arithmetic_chain") is arithmetic_chain
    for row in rows:
        lines = row["solution"].splitlines()[:-1]
        assert all(0 <= int(line.split("=")[-1]) <= 999 for line in lines)
    assert len(arithmetic_chain(20, seed=0, steps=2)[0]["solution"].splitlines()) == 3


def test_solution_and_both_step_forms():
    assert solution_text(PROMPT) == "37+45=82\n82-18=64\n64+26=90\n90+55=145\nA:145"
    assert format_step(64, "+", 26, 90, long_form=True) == "64+26=84+6=90"
    assert format_step(64, "-", 27, 37, long_form=True) == "64-27=44-7=37"
    assert units_carry(64, "+", 26) and units_carry(64, "-", 27) and not units_carry(64, "+", 25)
    assert forgot_carry(64, "+", 26) == 80 and forgot_carry(64, "-", 27) == 47


@pytest.mark.parametrize(
    ("completion", "correct", "steps_right"),
    [
        ("37+45=82\n82-18=64\n64+26=90\n90+55=145\nA:145", True, 4),
        ("37+45=82\n82-18=64\n64+26=84+6=90\n90+55=145\nA:145", True, 4),  # long form
        ("37+45=82\n82-18=64\n64+26=80\n80+55=135\nA:135", False, 2),  # forgot the carry at step 3
        ("37+45=82\n82-18=64\n64+26=85+6=90\n90+55=145\nA:145", True, 2),  # wrong middle value: step 3 not right
        ("37+45=82\n82-18=64\n64+26=90\n90+55=145", False, 4),  # no answer line
        ("A:145", True, 0),  # the answer alone is right; no step is
        ("37+45=82\n82-18=64\nA:145\n", True, 2),
        ("", False, 0),
    ],
)
def test_checker(completion, correct, steps_right):
    grade = grade_chain(PROMPT, completion)
    assert (grade.correct, grade.steps_right, grade.num_steps) == (correct, steps_right, 4)
    assert grade.progress == steps_right / 4


def test_rewards():
    answer, progress = REWARDS.get("chain_answer")(), REWARDS.get("chain_progress")()
    completions = ["37+45=82\n82-18=64\n64+26=80\n80+55=135\nA:135", solution_text(PROMPT)]
    assert answer([PROMPT, PROMPT], completions) == [0.0, 1.0]
    assert progress([PROMPT, PROMPT], completions) == [0.5, 1.0]
    assert answer(["hello"], ["A:1"]) == [None]  # not a chain prompt: not applicable


@pytest.mark.parametrize("bad", [{"steps": 0}, {"steps": [5, 4]}, {"operators": "*"}, {"max_value": 100}])
def test_bad_arguments_name_the_field(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        arithmetic_chain(10, seed=0, **bad)
