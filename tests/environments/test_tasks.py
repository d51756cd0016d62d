"""The procedural task families: seeded generators with disjoint train/eval splits (the convention of
genalign.data.procedural), rows that name their environment, and verifiers checked on hand-written episodes."""

from __future__ import annotations

import json

import pytest

from genalign.data.procedural import split_of as data_split_of
from genalign.environments import ENVIRONMENTS, TASKS, EnvironmentSet, ModelTurn, episode_reward
from genalign.environments.tasks import final_answer, split_of
from genalign.environments.tasks.guessing import guesses_needed
from genalign.environments.tasks.lookup import world

ALL = EnvironmentSet(TASKS.names())


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def play(row, *turns: str):
    """Run an episode of hand-written turns; return (per-turn results, episode reward)."""
    episode = ALL.start(row)
    results = []
    for index, text in enumerate(turns):
        results.append(episode.environment.step(ModelTurn(text, index=index)))
        if results[-1].done:
            break
    return results, episode_reward(episode.environment)


@pytest.mark.parametrize("task", TASKS.names())
def test_generators_are_seeded_split_disjoint_and_name_their_environment(task):
    generate = TASKS.get(task)
    train = generate(40, seed=1, eval_fraction=0.2)
    assert train == generate(40, seed=1, eval_fraction=0.2) and train != generate(40, seed=2, eval_fraction=0.2)
    evaluation = generate(20, seed=1, split="eval", eval_fraction=0.2)
    problem = (lambda r: f"{r['prompt']}\nsecret={r['secret']}") if task == "guess_number" else (lambda r: r["prompt"])
    assert not {problem(r) for r in train} & {problem(r) for r in generate(40, seed=3, split="eval", eval_fraction=0.2)}
    assert all(split_of(problem(r), eval_fraction=0.2) == "eval" for r in evaluation)
    assert all(r["env"] == task and task in ENVIRONMENTS and isinstance(r["prompt"], str) for r in train)
    assert len({problem(r) for r in train}) == 40
    with pytest.raises(ValueError, match="size"):
        generate(0, seed=1)
    with pytest.raises(ValueError, match="split"):
        generate(1, seed=1, split="test")


def test_the_split_is_the_one_of_genalign_data_procedural():
    for text in ("1+2=", "What is 12 * 34?", "", "ünïcode"):
        for fraction in (0.1, 0.5):
            assert split_of(text, eval_fraction=fraction) == data_split_of(text, eval_fraction=fraction)


def test_final_answer_marker():
    assert final_answer("I think.\nAnswer: 42\nthanks") == "42"
    assert final_answer("answer: 1, ANSWER:  Paris ") == "Paris"
    assert final_answer("no marker") is None


# -- calculator_arithmetic ---------------------------------------------------------------------------------------------


def test_arithmetic_rows_are_exact_by_hand():
    rows = TASKS.get("calculator_arithmetic")(50, seed=0, digits=3, terms=3, operators="+*")
    for row in rows:
        a, op1, b, op2, c = row["expression"].split()
        a, b, c = int(a), int(b), int(c)
        if op1 == "*" and op2 == "+":
            expected = a * b + c
        elif op1 == "+" and op2 == "*":
            expected = a + b * c
        elif op1 == "*":
            expected = a * b * c
        else:
            expected = a + b + c
        assert row["answer"] == str(expected) and 100 <= a <= 999


def test_arithmetic_episode_with_the_calculator_scores_the_final_answer():
    row = {
        "prompt": "What is 4821 * 9377?",
        "answer": "45206517",
        "expression": "4821 * 9377",
        "env": "calculator_arithmetic",
    }
    results, reward = play(
        row, call("calculator", expression="4821 * 9377"), "The product is 45,206,517.\nAnswer: 45,206,517"
    )
    assert results[0].record.results[0].output.text == "45206517" and not results[0].done
    assert results[1].done and reward == 1.0
    assert play(row, "Answer: 45206507")[1] == 0.0  # one digit off
    assert play(row, "It is 45206517.")[1] == 1.0  # no marker: the last number
    assert play(row, "Answer: 45206517 or maybe 1")[1] == 1.0  # the marker's first number
    assert play(row, "I cannot tell.")[1] == 0.0


def test_arithmetic_error_penalty_is_a_per_turn_reward_and_max_turns_ends_the_episode():
    environments = EnvironmentSet({"calculator_arithmetic": {"name": "calculator_arithmetic", "error_penalty": 0.1,
                                                             "max_turns": 2}})  # fmt: skip
    episode = environments.start({"env": "calculator_arithmetic", "prompt": "p", "answer": "6", "expression": "2 * 3"})
    first = episode.environment.step(ModelTurn(call("calculator", expression="2 ** x") + call("calc", expression="1")))
    assert first.reward == pytest.approx(-0.2) and not first.done
    second = episode.environment.step(ModelTurn(call("calculator", expression="2*3") + " Answer: 6", index=1))
    assert second.done and second.reward == 0.0 and episode_reward(episode.environment) == 1.0


# -- lookup ------------------------------------------------------------------------------------------------------------


def test_lookup_world_is_seeded_and_questions_need_the_documents():
    people = world(7, 50)
    assert people == world(7, 50) and len({p.name for p in people}) == 50
    assert all(p.mentor != p.name and p.mentor in {q.name for q in people} for p in people)
    rows = TASKS.get("lookup")(30, seed=0, world_seed=7, world_size=50, hops=[1, 2])
    by_name = {p.name: p for p in people}
    assert {row["hops"] for row in rows} == {1, 2}
    for row in rows:
        assert row["answer"] not in row["prompt"] and row["person"] in row["question"]
        target = by_name[row["person"]]
        if row["hops"] == 2:
            target = by_name[target.mentor]
            assert "the mentor of" in row["question"]
        assert row["answer"] == str(getattr(target, row["attribute"]))


def test_lookup_two_hop_episode_by_hand():
    people = world(7, 50)
    person = people[3]
    mentor = next(p for p in people if p.name == person.mentor)
    row = {"prompt": f"In which city was the mentor of {person.name} born?", "answer": mentor.city, "world_seed": 7,
           "world_size": 50, "env": "lookup"}  # fmt: skip
    results, reward = play(
        row,
        call("search", query=person.name),
        call("read", title=person.name) + call("read", title=person.name.lower()),
        call("read", title=mentor.name),
        f"The mentor was born in {mentor.city}.\nAnswer: the {mentor.city.upper()}.",
    )
    assert results[0].record.results[0].output.text.startswith(f"{person.name}: {person.name} is a")
    found, missing = results[1].record.results
    assert f"a student of {mentor.name}" in found.output.text
    assert missing.error == "tool_error" and f"Did you mean {person.name!r}" in missing.output.text
    assert mentor.city in results[2].record.results[0].output.text
    assert results[3].done and reward == 1.0  # case, punctuation and articles ignored
    assert play(row, f"Answer: {person.city if person.city != mentor.city else 'Nowhere'}")[1] == 0.0


# -- guess_number ------------------------------------------------------------------------------------------------------


def test_guesses_needed_by_hand():
    assert [guesses_needed(1, n) for n in (1, 2, 3, 4, 7, 8, 100)] == [1, 2, 2, 3, 3, 4, 7]


def test_binary_search_always_wins_within_the_allowed_guesses():
    for row in TASKS.get("guess_number")(25, seed=4):
        low, high = row["low"], row["high"]
        episode = ALL.start(row)
        for index in range(row["max_guesses"]):
            middle = (low + high) // 2
            result = episode.environment.step(ModelTurn(call("guess", number=middle), index=index))
            text = result.record.results[0].output.text
            if "correct" in text:
                break
            low, high = (middle + 1, high) if "higher" in text else (low, middle - 1)
        assert result.done and episode_reward(episode.environment) == 1.0


def test_guessing_feedback_limits_and_rewards_by_hand():
    row = {"prompt": "p", "secret": 37, "low": 1, "high": 100, "max_guesses": 3, "env": "guess_number"}
    results, reward = play(
        row, call("guess", number=50) + call("guess", number=150) + call("guess", number=25), call("guess", number=37)
    )
    texts = [r.output.text for r in results[0].record.results]
    assert texts[0] == "50 is wrong: the number is lower. 2 guess(es) left."
    assert texts[1] == "Error (tool_error): ValueError: guess a number from 1 to 100."  # not counted as a guess
    assert texts[2] == "25 is wrong: the number is higher. 1 guess(es) left."
    assert results[1].done and reward == 1.0
    results, reward = play(
        row, call("guess", number=1) + call("guess", number=2) + call("guess", number=3) + call("guess", number=37)
    )
    assert results[0].done and reward == 0.0 and "no guesses left" in results[0].record.results[3].output.text
    assert play(row, "I give up.")[1] == 0.0
    efficient = EnvironmentSet({"guess_number": {"name": "guess_number", "reward_form": "efficiency"}})
    episode = efficient.start(row)
    episode.environment.step(ModelTurn(call("guess", number=50) + call("guess", number=37)))
    assert episode_reward(episode.environment) == pytest.approx(2 / 3)  # (3 - 2 + 1) / 3
    state = episode.environment.state_dict()
    fresh = efficient.create(row)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state and episode_reward(fresh) == pytest.approx(2 / 3)
