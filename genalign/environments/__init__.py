"""Multi-turn environments and tools, shared by every model family that can take turns.

The interface (what the multi-turn rollout builds on):

- :class:`Environment` — one instance per trajectory: ``reset(**row) -> Observation | str | None``,
  ``tools() -> list[Tool]``, ``step(ModelTurn) -> StepResult``, ``reward() -> float | None`` (any may be
  ``async def``: pass results through :func:`resolve`), ``state_dict()`` / ``load_state_dict()``, ``close()``.
- :class:`Tool` — a typed, documented function and its JSON schema (:func:`function_schema`, the ``transformers``
  chat-template convention); :func:`tool` marks environment methods as tools.
- :func:`parse_tool_calls` — Hermes/Qwen ``<tool_call>`` blocks → :class:`ToolCall` (JSON, size- and depth-limited,
  never evaluated); :func:`run_tool_calls` — a turn's calls in parallel threads with timeouts and output caps, every
  failure an error observation of a counted kind (:data:`ERROR_KINDS`).
- :class:`Observation`, :class:`ModelTurn`, :class:`ToolResult`, :class:`TurnRecord`, :class:`StepResult`,
  :class:`ToolLimits` — the plain-data values that cross the interface.
- :class:`EnvironmentSet` — the run's environments, one created per trajectory from the row's ``env`` column;
  :func:`environment_factory` — an environment from a registered name, an import path or a class;
  :class:`TRLEnvironment` — a class written for TRL's ``environment_factory``, unchanged.
- :mod:`genalign.environments.branching` — copies and rewinds of a running episode (restored from its state, or the
  turns replayed), for tree rollouts that branch at a turn boundary and turns taken back;
  :mod:`genalign.environments.judges` — segment judges that type each model turn's role (TRIAGE), from what the
  environment recorded.
- Registries: ``ENVIRONMENTS`` (environment classes), ``TOOLS`` (tool factories), ``TASKS`` (row generators of the
  procedural task families), ``SEGMENT_JUDGES`` (:mod:`genalign.environments.judges`).

Built-ins: tools ``calculator`` and ``python`` (the code sandbox), the ``crop_image`` tool of ``image_zoom``; task
families ``calculator_arithmetic``, ``lookup``, ``guess_number``. See docs/environments.md.

Safety: nothing the model writes is evaluated or imported; tool-call arguments are parsed as JSON; model-written code
runs only in the sandbox (the ``python`` tool).
"""

from genalign.environments.base import (
    ENVIRONMENTS,
    Environment,
    episode_reward,
    first_observation,
    register_environment,
    resolve,
)
from genalign.environments.calculator import CalculatorError, calculator, evaluate
from genalign.environments.evidence import EvidenceZoom, box_coverage
from genalign.environments.execution import abandoned_calls, run_tool_calls
from genalign.environments.images import ImageZoom, crop_box, crop_image_tool
from genalign.environments.llm_judge import llm_roles
from genalign.environments.parsing import parse_tool_calls
from genalign.environments.python_tool import python_tool
from genalign.environments.routing import EnvironmentSet, Episode, environment_factory
from genalign.environments.schema import ArgumentError, SchemaError, function_schema
from genalign.environments.skip_connection import SkipConnection
from genalign.environments.tasks import TASKS
from genalign.environments.tools import TOOLS, Tool, register_tool, resolve_tool, resolve_tools, tool
from genalign.environments.trl import TRLEnvironment
from genalign.environments.types import (
    COUNT_KEYS,
    ERROR_KINDS,
    ErrorKind,
    ModelTurn,
    Observation,
    StepResult,
    ToolCall,
    ToolLimits,
    ToolResult,
    TurnRecord,
    as_observation,
)
from genalign.environments.verification import VerifySolution

__all__ = [
    "COUNT_KEYS",
    "ENVIRONMENTS",
    "ERROR_KINDS",
    "TASKS",
    "TOOLS",
    "ArgumentError",
    "CalculatorError",
    "Environment",
    "EnvironmentSet",
    "Episode",
    "ErrorKind",
    "EvidenceZoom",
    "ImageZoom",
    "ModelTurn",
    "Observation",
    "SchemaError",
    "SkipConnection",
    "StepResult",
    "TRLEnvironment",
    "Tool",
    "ToolCall",
    "ToolLimits",
    "ToolResult",
    "TurnRecord",
    "VerifySolution",
    "abandoned_calls",
    "as_observation",
    "box_coverage",
    "calculator",
    "crop_box",
    "crop_image_tool",
    "environment_factory",
    "episode_reward",
    "evaluate",
    "first_observation",
    "function_schema",
    "llm_roles",
    "parse_tool_calls",
    "python_tool",
    "register_environment",
    "register_tool",
    "resolve",
    "resolve_tool",
    "resolve_tools",
    "run_tool_calls",
    "tool",
]
