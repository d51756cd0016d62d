"""Copies and rewinds of a running episode, for rollouts that branch a trajectory (tree rollouts that branch at a turn
boundary, Tree-GRPO [165]) or take a turn back (turns resampled for lack of progress, T²PO [171]).

An environment is created for one trajectory and holds that trajectory's state, so a branch needs an environment of
its own in the same state. Two declared ways give one, chosen by what the class declares:

* **state**: a class that overrides :meth:`~genalign.environments.Environment.load_state_dict` restores a fresh
  instance (reset with the row) from the source's :meth:`~genalign.environments.Environment.state_dict`.
* **replay** (every other class, TRL-style ones included): a fresh instance reset with the row is given the model turns
  the source has seen, in order (their answers are discarded). Exact for an environment whose answers depend only on
  the row and the turns (randomness comes from the row, as :class:`~genalign.environments.Environment` asks); it costs
  the turns' tool calls again.

A failure of either (the environment raises) propagates: the caller counts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from genalign.environments.base import Environment, resolve
from genalign.environments.routing import EnvironmentSet, Episode
from genalign.environments.types import ModelTurn


def copy_mode(environment: Any) -> Literal["state", "replay"]:
    """``"state"`` when the environment's class restores its state (overrides ``load_state_dict``), else
    ``"replay"``."""
    restores = type(environment).load_state_dict is not Environment.load_state_dict
    return "state" if isinstance(environment, Environment) and restores else "replay"


def fork_episode(
    environments: EnvironmentSet, row: Mapping[str, Any], episode: Episode, turns: Sequence[ModelTurn]
) -> Episode:
    """A new episode of ``row`` in the state of ``episode``, which has answered the model turns ``turns`` (module
    docstring: restored from its state, or replayed)."""
    fresh = environments.start(row)
    source = episode.environment
    if copy_mode(source) == "state":
        fresh.environment.load_state_dict(source.state_dict())
    else:
        for turn in turns:
            resolve(fresh.environment.step(turn))
    return Episode(episode.name, fresh.environment, episode.observation, episode.tool_schemas)


def checkpoint(episode: Episode) -> dict[str, Any] | None:
    """What :func:`rewind` needs to take back the episode's next step: its state when the class restores state, else
    None (rewinding replays)."""
    environment = episode.environment
    return environment.state_dict() if copy_mode(environment) == "state" else None


def rewind(
    environments: EnvironmentSet,
    row: Mapping[str, Any],
    episode: Episode,
    saved: dict[str, Any] | None,
    turns: Sequence[ModelTurn],
) -> Episode:
    """``episode`` as it was when :func:`checkpoint` gave ``saved``, before the step it has taken since: restored in
    place from ``saved``, or (``saved`` None) a fresh episode that replays ``turns`` (the turns before that step; the
    old instance is closed)."""
    if saved is not None:
        episode.environment.load_state_dict(saved)
        return episode
    fresh = environments.start(row)
    for turn in turns:
        resolve(fresh.environment.step(turn))
    episode.environment.close()
    return Episode(episode.name, fresh.environment, episode.observation, episode.tool_schemas)


__all__ = ["checkpoint", "copy_mode", "fork_episode", "rewind"]
