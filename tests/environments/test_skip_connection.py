"""SKPO's skip connection [66] (environment ``skip_connection``): the upstream turn is answered with the problem again,
the downstream turn is scored with the answer reward and ends the episode."""

from __future__ import annotations

import pytest

from genalign.environments import ENVIRONMENTS, ModelTurn
from genalign.environments.skip_connection import problem_text


@pytest.mark.parametrize(("downstream", "reward"), [("4", 1.0), ("5", 0.0)])
def test_the_problem_is_shown_again_and_the_downstream_turn_is_scored(downstream, reward):
    environment = ENVIRONMENTS.get("skip_connection")(template="Again: {problem}")
    environment.reset(prompt=[{"role": "user", "content": "2+2="}], answer="4")
    first = environment.step(ModelTurn("two plus two", index=0))
    assert first.observation.text == "Again: 2+2=" and not first.done and first.reward is None
    second = environment.step(ModelTurn(downstream, index=1))
    assert second.done and environment.reward() == reward


def test_bad_templates_and_prompts_are_refused():
    with pytest.raises(ValueError, match=r"must contain '\{problem\}'"):
        ENVIRONMENTS.get("skip_connection")(template="no placeholder")
    with pytest.raises(ValueError, match="holds no text problem"):
        problem_text([{"role": "system", "content": "x"}])
