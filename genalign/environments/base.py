"""The environment interface (:class:`Environment`) and the ``ENVIRONMENTS`` registry.

An environment is created for one trajectory and lives as long as it: ``reset(**row)`` starts it from a dataset row
(and may return the first observation, appended to the prompt's last user message), ``tools()`` lists what the model
may call, ``step(turn)`` answers each model turn, ``reward()`` scores the episode at its end. Any of ``reset``,
``step`` and ``reward`` may be ``async def``; callers pass their results through :func:`resolve` (or ``await``).

The default :meth:`Environment.step` reads the turn's tool calls, runs them (:mod:`genalign.environments.execution`)
and ends the episode when the turn called no tool, the rule TRL's ``environment_factory`` follows. A subclass that
needs more (feedback as a user message, an end condition, a per-turn reward) calls ``super().step(turn)`` and
changes the result with :meth:`StepResult.replace`.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from genalign.environments.execution import run_tool_calls
from genalign.environments.parsing import parse_tool_calls
from genalign.environments.tools import Tool, ToolSpec, is_marked_tool, resolve_tools
from genalign.environments.types import ModelTurn, Observation, StepResult, ToolLimits, TurnRecord, as_observation
from genalign.registry import Registry

#: name -> environment class (or a TRL-style class, wrapped when created); ``(**args)`` builds one instance
ENVIRONMENTS: Registry[Callable[..., Any]] = Registry("environment")


def register_environment(name: str, **meta: Any) -> Callable[[type], type]:
    """Register an environment class under ``name``; ``meta`` (``summary`` at least, ``source``) feeds the docs."""
    if not meta.get("summary"):
        raise ValueError(f"environment {name!r}: register it with a summary='...' (one sentence for the docs).")
    return ENVIRONMENTS.register(name, **meta)


class Environment:
    """Base class of genalign environments (see the module docstring).

    Tools are the methods marked with :func:`~genalign.environments.tools.tool` plus the ``tools`` given to
    ``__init__`` (registered names, import paths, functions). Methods see the environment's state; by default the
    turn's calls to them run one after the other, in call order.

    Args:
        tools: extra tools (:func:`~genalign.environments.tools.resolve_tool` specs).
        tool_limits: :class:`ToolLimits` or a mapping of its fields (default: the class attribute ``tool_limits``).
    """

    tool_limits: ToolLimits = ToolLimits()

    def __init__(self, *, tools: Sequence[ToolSpec] = (), tool_limits: ToolLimits | Mapping[str, Any] | None = None):
        self.extra_tools: list[Tool] = resolve_tools(tools)
        if tool_limits is not None:
            self.tool_limits = ToolLimits.of(tool_limits)

    # -- the episode ---------------------------------------------------------------------------------------------

    def reset(self, **row: Any) -> Observation | str | None:
        """Start the episode from a dataset row (every column, the routing column excepted); return the first
        observation (text and/or images), or None."""
        return None

    def tools(self) -> list[Tool]:
        """The tools the model may call in this episode (built once per instance)."""
        cached = self.__dict__.get("_genalign_tools")
        if cached is None:
            marked = [
                Tool.from_function(getattr(self, name))
                for name, member in inspect.getmembers(type(self), predicate=inspect.isfunction)
                if is_marked_tool(member)
            ]
            cached = self.__dict__["_genalign_tools"] = marked + list(getattr(self, "extra_tools", ()))
            names = [t.name for t in cached]
            if len(set(names)) != len(names):
                raise ValueError(f"{type(self).__name__}: two tools share a name in {names}.")
        return cached

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The JSON schemas of :meth:`tools`, for the chat template's ``tools=`` argument."""
        return [dict(t.schema) for t in self.tools()]

    def step(self, turn: ModelTurn) -> StepResult:
        """Answer one model turn: run its tool calls; the episode ends when it called none."""
        record = self.call_tools(turn)
        return StepResult(record=record, done=not record.calls)

    def call_tools(self, turn: ModelTurn | str) -> TurnRecord:
        """Read the turn's tool calls and run them with this environment's tools and limits."""
        text = turn.text if isinstance(turn, ModelTurn) else turn
        content, calls = parse_tool_calls(text, self.tool_limits)
        if not calls:
            return TurnRecord(content=content)
        results = run_tool_calls(calls, {t.name: t for t in self.tools()}, self.tool_limits)
        return TurnRecord(content, tuple(calls), tuple(results), TurnRecord.count(results))

    def reward(self) -> float | None:
        """The episode's reward, read once after its last step; None: the environment does not own the reward
        (reward functions score the trajectory)."""
        return None

    def close(self) -> None:
        """Release what the episode held (connections, files). Called once, after :meth:`reward`."""

    # -- snapshots ------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The episode's state as plain data, for snapshots inside a rollout (replay, branching). An environment
        lives within one rollout, so a training checkpoint never holds one; randomness must come from the row."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            raise NotImplementedError(f"{type(self).__name__} does not restore state; implement load_state_dict.")


# ----------------------------------------------------------------------------------------------------------------------
# sync and async
# ----------------------------------------------------------------------------------------------------------------------


def resolve(value: Any) -> Any:
    """``value``, or its result when it is awaitable (an ``async def`` method was called). Runs the coroutine on a
    fresh event loop; inside a running loop (this thread's), on a helper thread. Async callers ``await`` instead."""
    if not inspect.isawaitable(value):
        return value
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(value))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(_awaited(value))
        except BaseException as err:
            box["error"] = err

    thread = threading.Thread(target=target, name="environment-await", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _awaited(value: Any) -> Any:
    return await value


def first_observation(environment: Environment, row: Mapping[str, Any]) -> Observation | None:
    """``environment.reset(**row)`` as an :class:`Observation` (None when it returned nothing)."""
    return as_observation(resolve(environment.reset(**row)))


def episode_reward(environment: Any) -> float | None:
    """``environment.reward()`` checked: a finite number or None.

    Raises:
        TypeError: the reward is not a number; ValueError: it is NaN or infinite.
    """
    value = resolve(environment.reward())
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{type(environment).__name__}.reward() returned {value!r}; return a float or None.")
    if not math.isfinite(value):
        raise ValueError(f"{type(environment).__name__}.reward() returned {value!r}; return a finite float or None.")
    return float(value)


register_environment(
    "tools",
    summary="only the listed tools: each turn's calls run, a turn without a call ends the episode; no reward owned",
    source="genalign",
)(Environment)
