"""Environments written for TRL's ``GRPOTrainer(environment_factory=...)``, run unchanged (:class:`TRLEnvironment`).

TRL's contract (``trl`` 1.16, ``GRPOTrainer`` and its docs, read from the package source):

- ``environment_factory`` is a class or any callable taking **no argument** that returns an instance (or a dict
  ``{name: factory}``; each row then picks one by its ``environment`` column, which is not passed to ``reset``).
- ``reset(self, **kwargs)`` (required) receives every dataset column of the row and returns ``None``, a string, or a
  list of content blocks (``{"type": "text", ...}`` / ``{"type": "image", ...}``); what it returns is appended to the
  prompt's last user message.
- **Tools** are the public functions of the class (``inspect.getmembers(type(env), inspect.isfunction)``, names not
  starting with ``_``), except ``reset`` and ``get_reward``; each needs type hints and a Google-style docstring (its
  schema is ``transformers.utils.get_json_schema``'s). A tool may be ``async def``. A tool's result is shown as
  ``str(result)``, or as content blocks when it returns a list; a tool that raises is shown
  ``{'error': '<message>'}`` (TRL's text, kept here).
- ``get_reward(self)`` (optional, may be ``async def``) takes no argument and returns a float: the environment owns
  the reward, read once per finished rollout. Without it, TRL's reward functions read the instances' state through
  their ``environments`` argument; here :attr:`TRLEnvironment.inner` is that instance.
- The episode ends when the model's turn calls no tool (or at the trainer's turn limit).

Differences, on purpose: one instance per trajectory (TRL pools instances and calls ``reset`` again; an environment
that is correct under TRL's reuse is correct here); the turn's results come in call order (TRL lists synchronous
calls before asynchronous ones); unknown tools, malformed calls and bad arguments get genalign's error observations
and counts (TRL sends ``{'error': ...}`` for some and stops for others); the calls of one turn run one after the other
(as TRL runs its synchronous tools), each with the environment's timeout and output cap.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from genalign.environments.base import Environment, resolve
from genalign.environments.tools import Tool
from genalign.environments.types import Observation, ToolLimits, as_observation

#: methods of a TRL environment that are not tools
NOT_TOOLS = ("reset", "get_reward")


def is_trl_style(obj: Any) -> bool:
    """True for an object (or class) that has TRL's ``reset`` and is not a genalign :class:`Environment`."""
    cls = obj if isinstance(obj, type) else type(obj)
    return not issubclass(cls, Environment) and callable(getattr(cls, "reset", None))


def trl_render(value: Any) -> Observation | None:
    """A TRL tool's result as TRL shows it: a list as content blocks, anything else as ``str(value)``."""
    if isinstance(value, list):
        return as_observation(value)
    return Observation(text=str(value))


def trl_render_error(error: BaseException) -> str:
    """A TRL tool's exception as TRL shows it: ``str({"error": str(error)})``."""
    return str({"error": str(error)})


class TRLEnvironment(Environment):
    """A TRL-style environment instance behind the genalign interface.

    Args:
        inner: the instance (made by the TRL factory, with no argument).
        tool_limits: limits of each turn's calls.
    """

    def __init__(self, inner: Any, *, tool_limits: ToolLimits | Mapping[str, Any] | None = None) -> None:
        if not is_trl_style(inner):
            raise TypeError(
                f"{type(inner).__name__} is not a TRL-style environment: it needs a callable reset(self, **kwargs)."
            )
        super().__init__(tool_limits=tool_limits)
        self.inner = inner

    @classmethod
    def factory(
        cls, trl_factory: Callable[[], Any], *, tool_limits: ToolLimits | Mapping[str, Any] | None = None
    ) -> Callable[[], TRLEnvironment]:
        """A no-argument factory of adapted environments from TRL's ``environment_factory`` (a class or callable)."""

        def make() -> TRLEnvironment:
            return cls(trl_factory(), tool_limits=tool_limits)

        make.__name__ = f"trl_{getattr(trl_factory, '__name__', 'environment')}"
        return make

    def reset(self, **row: Any) -> Observation | None:
        return as_observation(resolve(self.inner.reset(**row)))

    def tools(self) -> list[Tool]:
        cached = self.__dict__.get("_genalign_tools")
        if cached is None:
            cached = self.__dict__["_genalign_tools"] = [
                Tool.from_function(
                    getattr(self.inner, name), parallel=False, render=trl_render, render_error=trl_render_error
                )
                for name, _ in inspect.getmembers(type(self.inner), predicate=inspect.isfunction)
                if name not in NOT_TOOLS and not name.startswith("_")
            ]
        return cached

    def reward(self) -> Any:
        get_reward = getattr(self.inner, "get_reward", None)
        return get_reward() if callable(get_reward) else None
