"""Environments are named like rewards (registered name, module path, file path, class), created one per trajectory
and chosen per row by a column; mistakes are reported when the set is built, with did-you-mean hints."""

from __future__ import annotations

import textwrap

import pytest

from genalign.environments import (
    ENVIRONMENTS,
    Environment,
    EnvironmentSet,
    ModelTurn,
    Observation,
    TRLEnvironment,
    environment_factory,
    resolve_tool,
)
from genalign.environments.tasks import GuessNumber
from genalign.registry import UnknownOptionError

USER_FILE = '''
from genalign.environments import Environment, tool


class Counter(Environment):
    def __init__(self, *, start: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.start = start

    def reset(self, **row):
        self.count = self.start
        return f"count starts at {self.count}"

    @tool
    def bump(self, by: int = 1) -> int:
        """Add to the count.

        Args:
            by: how much
        """
        self.count += by
        return self.count


def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: the text
    """
    return text.upper()


class TrlStyle:
    def reset(self, **kwargs):
        return None

    def ping(self) -> str:
        """Answer pong."""
        return "pong"
'''


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_envs.py"
    path.write_text(textwrap.dedent(USER_FILE))
    return str(path)


def test_every_way_of_naming_an_environment(user_file):
    made = [
        environment_factory("guess_number")(),
        environment_factory("genalign.environments.tasks.guessing:GuessNumber")(),
        environment_factory("genalign.environments.tasks.guessing.GuessNumber")(),
        environment_factory({"name": "guess_number", "reward_form": "efficiency"})(),
        environment_factory(GuessNumber)(),
    ]
    assert all(type(env) is GuessNumber for env in made) and made[3].reward_form == "efficiency"
    assert made[0] is not environment_factory("guess_number")()  # one fresh instance per trajectory
    counter = environment_factory({"name": f"{user_file}:Counter", "start": 5})()
    assert counter.reset() == "count starts at 5"
    trl = environment_factory(f"{user_file}:TrlStyle")()
    assert isinstance(trl, TRLEnvironment) and [t.name for t in trl.tools()] == ["ping"]


def test_mistakes_are_reported_when_the_set_is_built(user_file):
    with pytest.raises(UnknownOptionError, match="Did you mean 'guess_number'"):
        EnvironmentSet(["guess_numbr"])
    with pytest.raises(ValueError, match=r"unknown argument 'reward_fom'\. Did you mean 'reward_form'"):
        EnvironmentSet([{"name": "guess_number", "reward_fom": "binary"}])
    with pytest.raises(ValueError, match="reward_form='best'"):
        EnvironmentSet([{"name": "guess_number", "reward_form": "best"}])
    with pytest.raises(ValueError, match="TRL-style"):
        EnvironmentSet([{"name": f"{user_file}:TrlStyle", "url": "http://x"}])
    with pytest.raises(ValueError, match=r"unknown argument 'strat'\. Did you mean 'start'"):
        EnvironmentSet([{"name": f"{user_file}:Counter", "strat": 1}])
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        EnvironmentSet([f"{user_file}:Nope"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        EnvironmentSet(["missing/file.py:Env"])
    with pytest.raises(TypeError, match="neither a genalign Environment"):
        EnvironmentSet([dict])
    with pytest.raises(ValueError, match="unknown key 'timeout'"):
        EnvironmentSet([{"name": "guess_number", "tool_limits": {"timeout": 1}}])


def test_rows_choose_their_environment_by_column():
    environments = EnvironmentSet(["guess_number", "calculator_arithmetic"])
    assert environments.names == ["calculator_arithmetic", "guess_number"]
    row = {"prompt": "p", "secret": 3, "low": 1, "high": 4, "max_guesses": 3, "env": "guess_number"}
    assert type(environments.create(row)) is GuessNumber
    with pytest.raises(UnknownOptionError, match="Did you mean 'guess_number'"):
        environments.start({**row, "env": "guess_numbers"})
    with pytest.raises(KeyError, match="no 'env' column"):
        environments.start({"prompt": "p"})
    single = EnvironmentSet({"name": "guess_number"})
    assert single.names == ["guess_number"] and single.name_for({"prompt": "p"}) == "guess_number"


def test_a_set_of_mixed_kinds_starts_each_row_with_its_own_first_observation(user_file):
    environments = EnvironmentSet({"count": f"{user_file}:Counter", "trl": f"{user_file}:TrlStyle"}, column="kind")
    episode = environments.start({"kind": "count", "prompt": "p"})
    assert episode.name == "count" and episode.observation == Observation("count starts at 0")
    assert [s["function"]["name"] for s in episode.tool_schemas] == ["bump"]
    result = episode.environment.step(ModelTurn('<tool_call>{"name": "bump", "arguments": {"by": 2}}</tool_call>'))
    assert result.record.results[0].output.text == "2"
    assert environments.start({"kind": "trl", "prompt": "p"}).observation is None


def test_tools_are_named_like_environments(user_file):
    assert resolve_tool("calculator").name == "calculator"
    assert resolve_tool(f"{user_file}:shout").fn(text="hi") == "HI"
    assert resolve_tool({"name": "python", "timeout_s": 2}).timeout_s == 12
    with pytest.raises(UnknownOptionError, match="Did you mean 'calculator'"):
        resolve_tool("calculater")
    env = Environment(tools=["calculator", f"{user_file}:shout"])
    assert [t.name for t in env.tools()] == ["calculator", "shout"]
    with pytest.raises(ValueError, match="two tools are named 'calculator'"):
        Environment(tools=["calculator", "calculator"])


def test_registered_environments_have_a_summary_for_the_docs():
    for name in ENVIRONMENTS.names():
        assert ENVIRONMENTS.meta(name).get("summary"), name
