"""The Environment base: default step (tool calls, done when none), sync or async reset/step/reward, checked
episode rewards, chat messages of a step, and snapshots."""

from __future__ import annotations

import asyncio

import pytest

from genalign.environments import (
    Environment,
    ModelTurn,
    Observation,
    StepResult,
    episode_reward,
    first_observation,
    resolve,
    tool,
)


class Feedback(Environment):
    """Owns its reward, answers with a user message, ends after two turns, async reward."""

    def reset(self, *, target: str, **row):
        self.target, self.said = target, []
        return Observation(text="Say the word.")

    @tool(parallel=True, timeout_s=1.0)
    def hint(self) -> str:
        """Get a hint."""
        return self.target[0]

    def step(self, turn: ModelTurn) -> StepResult:
        result = super().step(turn)
        self.said.append(result.record.content)
        return result.replace(
            observation=Observation(text="again" if turn.index == 0 else "bye"),
            done=turn.index >= 1,
            reward=0.1 if self.target in result.record.content else 0.0,
        )

    async def reward(self) -> float:
        await asyncio.sleep(0)
        return float(self.target in self.said[-1])


def test_default_environment_runs_tool_calls_and_ends_on_a_turn_without_one():
    env = Environment()
    assert env.reset(prompt="p") is None and env.tools() == []
    result = env.step(ModelTurn("plain answer"))
    assert result.done and result.record.content == "plain answer" and result.messages() == []
    assert episode_reward(env) is None and env.state_dict() == {}


def test_a_subclass_adds_feedback_done_per_turn_reward_and_an_async_reward():
    env = Feedback()
    assert first_observation(env, {"target": "kiwi"}) == Observation("Say the word.")
    (hint,) = env.tools()
    assert hint.parallel and hint.timeout_s == 1.0
    first = env.step(ModelTurn('<tool_call>{"name": "hint", "arguments": {}}</tool_call> kiwi?'))
    assert first.messages() == [{"role": "tool", "name": "hint", "content": "k"}, {"role": "user", "content": "again"}]
    assert (first.done, first.reward) == (False, 0.1)
    second = env.step(ModelTurn("kiwi", index=1))
    assert second.done and episode_reward(env) == 1.0


def test_resolve_runs_coroutines_inside_and_outside_a_running_loop():
    async def seven():
        return 7

    assert resolve(3) == 3 and resolve(seven()) == 7

    async def inside():
        return resolve(seven())

    assert asyncio.run(inside()) == 7


@pytest.mark.parametrize(("value", "error"), [("1", TypeError), (True, TypeError), (float("nan"), ValueError)])
def test_episode_rewards_must_be_finite_numbers(value, error):
    class Bad(Environment):
        def reward(self):
            return value

    with pytest.raises(error, match=r"Bad\.reward"):
        episode_reward(Bad())


def test_restoring_state_is_refused_unless_implemented():
    Environment().load_state_dict({})
    with pytest.raises(NotImplementedError, match="load_state_dict"):
        Environment().load_state_dict({"x": 1})
