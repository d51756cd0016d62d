"""An environment class written for TRL's GRPOTrainer(environment_factory=...) runs unchanged: reset(**kwargs) gets
the row, public methods are tools with schemas from their docstrings, exceptions are shown as TRL shows them,
get_reward (sync or async) is the episode's reward, and a dict of factories routes rows by their column."""

from __future__ import annotations

import asyncio
import json

from genalign.environments import EnvironmentSet, ModelTurn, TRLEnvironment, episode_reward


class EchoToolEnv:
    """The shape of TRL's quick-start environment (its network client replaced by a local echo)."""

    def __init__(self):
        self.reward = 0.0

    def reset(self, **kwargs) -> str | None:
        self.reward = 0.0
        return None

    def echo(self, message: str) -> str:
        """
        Echo the message back from the environment.

        Args:
            message: The message to echo

        Returns:
            The echoed message.
        """
        self.reward = float(len(message))
        return message


class WordleEnv:
    """The shape of TRL's Wordle example: reset returns the first observation, guess() raises once the game is over,
    get_reward owns the reward."""

    def __init__(self):
        self.target = ""

    def reset(self, **kwargs) -> str | None:
        self.target = kwargs["target"]
        self.reward = 0.0
        self.done = False
        self._guesses = 0
        return f"Guess the {len(self.target)}-letter word."

    def guess(self, guess: str) -> str:
        """
        Make a guess in the Wordle environment.

        Args:
            guess: The guessed word, formatted as '[abcde]'

        Returns:
            The feedback message from the environment.
        """
        if self.done:
            raise ValueError("Game over.")
        word = guess.strip("[]")
        self._guesses += 1
        feedback = "".join("G" if a == b else ("Y" if a in self.target else "X") for a, b in zip(word, self.target))
        self.done = word == self.target
        self.reward = 1.0 if self.done else 0.0
        return feedback

    def get_reward(self) -> float:
        return self.reward

    def _helper(self) -> None:
        raise AssertionError("private methods are not tools")


class AsyncRewardEnv:
    def reset(self, **kwargs) -> list:
        return [{"type": "text", "text": "Say hi."}]

    async def get_reward(self) -> float:
        await asyncio.sleep(0)
        return 0.5


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_the_quick_start_environment_runs_unchanged():
    environments = EnvironmentSet(EchoToolEnv)
    episode = environments.start({"prompt": "Try to echo 'Hello World!'."})
    assert isinstance(episode.environment, TRLEnvironment) and episode.observation is None
    (schema,) = episode.tool_schemas
    assert schema["function"]["name"] == "echo" and schema["function"]["description"] == (
        "Echo the message back from the environment."
    )
    result = episode.environment.step(ModelTurn(call("echo", message="Hello World!")))
    assert result.record.results[0].output.text == "Hello World!" and not result.done
    assert episode.environment.step(ModelTurn("Done.", index=1)).done
    assert episode.environment.inner.reward == 12.0  # TRL's reward functions read env state: inner is that instance
    assert episode_reward(episode.environment) is None  # no get_reward: the environment does not own the reward


def test_wordle_style_reset_tools_errors_and_reward():
    environments = EnvironmentSet({"wordle": WordleEnv, "echo": EchoToolEnv}, column="environment")
    episode = environments.start({"environment": "wordle", "prompt": "Play.", "target": "crane"})
    assert episode.observation.text == "Guess the 5-letter word."
    assert [s["function"]["name"] for s in episode.tool_schemas] == ["guess"]
    env = episode.environment
    first = env.step(ModelTurn(call("guess", guess="[crate]")))
    assert first.record.results[0].output.text == "GGGXG" and episode_reward(env) == 0.0
    second = env.step(ModelTurn(call("guess", guess="[crane]") + call("guess", guess="[again]"), index=1))
    texts = [r.output.text for r in second.record.results]
    assert texts == ["GGGGG", "{'error': 'Game over.'}"]  # TRL's text for a tool that raised
    assert [r.error for r in second.record.results] == [None, "tool_error"]
    assert episode_reward(env) == 1.0


def test_the_row_reaches_reset_without_the_routing_column():
    seen = {}

    class Spy(EchoToolEnv):
        def reset(self, **kwargs):
            seen.update(kwargs)

    EnvironmentSet({"spy": Spy}).start({"env": "spy", "prompt": "p", "answer": "a"})
    assert seen == {"prompt": "p", "answer": "a"}


def test_async_get_reward_is_awaited_and_content_blocks_become_the_observation():
    episode = EnvironmentSet(AsyncRewardEnv).start({"prompt": "p"})
    assert episode.observation.text == "Say hi." and episode.tool_schemas == []
    assert episode.environment.step(ModelTurn("hi")).done
    assert episode_reward(episode.environment) == 0.5
