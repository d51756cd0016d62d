"""GRPO-Verif's separately sampled verification [288] (environment ``verify_solution``): the solution turn is scored
and answered with the verification question; the verification turn earns 1 when its verdict agrees with the
solution's score and ends the episode; the episode reward is the solution's."""

from __future__ import annotations

import pytest

from genalign.environments import ENVIRONMENTS, ModelTurn


@pytest.mark.parametrize(
    ("solution", "verification", "rewards"),
    [
        ("4", "It is correct.", (1.0, 1.0)),
        ("4", "It is incorrect.", (1.0, 0.0)),
        ("5", "That is wrong.", (0.0, 1.0)),
        ("5", "Correct!", (0.0, 0.0)),
        ("5", "no verdict here", (0.0, 1.0)),  # "no" reads as the incorrect verdict (the first match counts)
        ("4", "hmm", (1.0, 0.0)),  # no verdict: no credit
    ],
)
def test_each_turn_is_scored_and_the_verification_ends_the_episode(solution, verification, rewards):
    environment = ENVIRONMENTS.get("verify_solution")(question="Check it.")
    assert environment.reset(prompt="2+2=", answer="4") is None
    first = environment.step(ModelTurn(solution, index=0))
    assert first.observation.text == "Check it." and not first.done
    second = environment.step(ModelTurn(verification, index=1))
    assert second.done and (first.reward, second.reward) == rewards
    assert environment.reward() == rewards[0]


def test_a_blank_question_is_refused():
    with pytest.raises(ValueError, match="question=' ' must be a non-empty text"):
        ENVIRONMENTS.get("verify_solution")(question=" ")
