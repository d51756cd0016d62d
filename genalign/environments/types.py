"""The values that cross the environment interface: what the model said (:class:`ModelTurn`), the tool calls read from
it (:class:`ToolCall`), what each call gave (:class:`ToolResult`), the record of a turn (:class:`TurnRecord`), what
the environment answers (:class:`Observation`, :class:`StepResult`) and the limits of a turn (:class:`ToolLimits`).

Every value here is plain data (frozen dataclasses, strings, numbers, PIL images): the rollout turns it into
observation tokens with the chat template (:meth:`StepResult.messages` gives the chat messages, in the form
``transformers`` chat templates and TRL use); nothing here holds code the model wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

#: why a tool call produced an error observation instead of the tool's answer (each kind is counted per turn)
ErrorKind = Literal["bad_json", "unknown_tool", "bad_arguments", "tool_error", "timeout", "too_large", "too_many_calls"]
ERROR_KINDS: tuple[ErrorKind, ...] = (
    "bad_json",  # a <tool_call> block whose JSON cannot be read, or is not {"name": str, "arguments": object}
    "unknown_tool",  # the name is not one of the episode's tools
    "bad_arguments",  # missing, unexpected or wrongly typed arguments (checked against the tool's JSON schema)
    "tool_error",  # the tool raised
    "timeout",  # the tool ran past its timeout (its thread is abandoned, see genalign.environments.execution)
    "too_large",  # a <tool_call> block over ToolLimits.max_call_chars or ToolLimits.max_depth (not read)
    "too_many_calls",  # calls past ToolLimits.max_calls in one turn (not run; one record stands for all of them)
)

#: counters of a turn besides the error kinds: ``calls`` (every record), ``ok`` (answered) and ``truncated`` (an
#: answer cut to ToolLimits.max_output_chars / max_output_images; such a call is also ``ok``)
COUNT_KEYS: tuple[str, ...] = ("calls", "ok", "truncated", *ERROR_KINDS)


@dataclass(frozen=True)
class Observation:
    """What the model is shown: text and/or images (PIL images, for VLMs).

    ``content()`` is the chat-message content: the text alone when there are no images, else a list of content
    blocks (images first, then the text), the form chat templates and TRL use for multimodal messages.
    """

    text: str = ""
    images: tuple[Any, ...] = ()

    def content(self) -> str | list[dict[str, Any]]:
        if not self.images:
            return self.text
        blocks: list[dict[str, Any]] = [{"type": "image", "image": image} for image in self.images]
        if self.text:
            blocks.append({"type": "text", "text": self.text})
        return blocks

    def __bool__(self) -> bool:
        return bool(self.text or self.images)


@dataclass(frozen=True)
class ModelTurn:
    """One turn of the model, as text.

    Args:
        text: the decoded turn, tool-call markup included (e.g. ``<tool_call>...</tool_call>`` blocks).
        index: the turn's number in the episode, from 0.
        truncated: generation stopped at its token budget, not at an end-of-turn token.
    """

    text: str
    index: int = 0
    truncated: bool = False


@dataclass(frozen=True)
class ToolCall:
    """One tool call read from a turn. ``error`` is set when the block could not be read (``bad_json``,
    ``too_large``) or was not run (``too_many_calls``); such a call has ``name`` None (or the name, when it could be
    read) and empty ``arguments``.

    Args:
        index: position in the turn, from 0.
        name: the tool's name as the model wrote it.
        arguments: the parsed JSON arguments (plain data: dict, list, str, int, float, bool, None).
        raw: the block's text between the tags (at most ``ToolLimits.max_call_chars`` characters kept).
        error: why it cannot run, or None.
        message: what the error observation says.
    """

    index: int
    name: str | None
    arguments: Mapping[str, Any] = field(default_factory=dict)
    raw: str = ""
    error: ErrorKind | None = None
    message: str = ""

    def as_message_call(self) -> dict[str, Any]:
        """The call in chat-message form: ``{"type": "function", "function": {"name", "arguments"}}``."""
        return {"type": "function", "function": {"name": self.name or "", "arguments": dict(self.arguments)}}


@dataclass(frozen=True)
class ToolResult:
    """What one call gave: the tool's answer, or an error observation.

    Args:
        call: the call.
        output: what the model is shown (the answer, or the error text).
        error: the error kind, or None when the tool answered.
        truncated: the answer was cut to the output limits.
        elapsed_s: wall time of the call (0 when it did not run).
    """

    call: ToolCall
    output: Observation
    error: ErrorKind | None = None
    truncated: bool = False
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def message(self) -> dict[str, Any]:
        """The chat message of this result: ``{"role": "tool", "name": ..., "content": ...}``."""
        message: dict[str, Any] = {"role": "tool", "content": self.output.content()}
        if self.call.name:
            message["name"] = self.call.name
        return message


@dataclass(frozen=True)
class TurnRecord:
    """The structured record of one turn's tool calls.

    Args:
        content: the turn's text outside the tool-call blocks (the assistant message's content).
        calls: every call read, in order (one extra record with error ``too_many_calls`` stands for the blocks past
            the limit).
        results: one per call, same order.
        counts: how many of each kind (:data:`COUNT_KEYS`; every key present).
    """

    content: str = ""
    calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()
    counts: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0))

    @staticmethod
    def count(results: tuple[ToolResult, ...] | list[ToolResult]) -> dict[str, int]:
        counts = dict.fromkeys(COUNT_KEYS, 0)
        for result in results:
            counts["calls"] += 1
            counts[result.error or "ok"] += 1
            counts["truncated"] += result.truncated
        return counts


@dataclass(frozen=True)
class StepResult:
    """The environment's answer to one model turn.

    Args:
        record: the turn's tool calls and their results (empty when the turn called no tool).
        observation: the environment's own message after the tool results (e.g. game feedback), or None.
        done: the episode is over; the rollout asks the model for no further turn.
        reward: this turn's reward, or None (no per-turn reward).
        info: anything to log (plain data).
    """

    record: TurnRecord = field(default_factory=TurnRecord)
    observation: Observation | None = None
    done: bool = False
    reward: float | None = None
    info: Mapping[str, Any] = field(default_factory=dict)

    def replace(self, **changes: Any) -> StepResult:
        return replace(self, **changes)

    def messages(self) -> list[dict[str, Any]]:
        """The chat messages that follow the model's turn: one ``tool`` message per result, then the observation
        as a ``user`` message (when there is one)."""
        messages = [result.message() for result in self.record.results]
        if self.observation:
            messages.append({"role": "user", "content": self.observation.content()})
        return messages


@dataclass(frozen=True)
class ToolLimits:
    """Limits on the tool calls of one turn.

    Args:
        timeout_s: wall-clock limit of one call (a tool's own ``timeout_s`` overrides it).
        max_output_chars: longest text answer kept; longer answers are cut and counted ``truncated``.
        max_output_images: most images kept from one answer.
        max_calls: most calls run per turn; further blocks get one ``too_many_calls`` record.
        max_call_chars: longest ``<tool_call>`` block read (longer: ``too_large``).
        max_depth: deepest nesting of JSON arrays/objects in a block (deeper: ``too_large``).
        max_parallel: calls running at once (threads).
    """

    timeout_s: float = 10.0
    max_output_chars: int = 8192
    max_output_images: int = 4
    max_calls: int = 8
    max_call_chars: int = 65536
    max_depth: int = 32
    max_parallel: int = 4

    def __post_init__(self) -> None:
        for name, minimum, fix in (
            ("timeout_s", 0.0, "a positive number of seconds, e.g. 10"),
            ("max_output_chars", 1, "a positive number of characters, e.g. 8192"),
            ("max_output_images", 0, "a number of images, e.g. 4"),
            ("max_calls", 1, "a positive number, e.g. 8"),
            ("max_call_chars", 16, "at least 16 characters, e.g. 65536"),
            ("max_depth", 2, "at least 2 (a call with object arguments nests 2 deep), e.g. 32"),
            ("max_parallel", 1, "a positive number of threads, e.g. 4"),
        ):
            value = getattr(self, name)
            integer = name != "timeout_s"
            if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
                raise ValueError(f"ToolLimits: {name}={value!r} is not valid; use {fix}.")
            if value < minimum or (name == "timeout_s" and value <= 0):
                raise ValueError(f"ToolLimits: {name}={value!r} is not valid; use {fix}.")

    @classmethod
    def of(cls, value: ToolLimits | Mapping[str, Any] | None) -> ToolLimits:
        """``value`` as limits: limits pass through, a mapping (from YAML) is checked for unknown keys, None gives
        the defaults."""
        if value is None or isinstance(value, ToolLimits):
            return value or cls()
        if not isinstance(value, Mapping):
            raise TypeError(f"tool_limits must be a mapping or ToolLimits, got {type(value).__name__}")
        from genalign.registry import did_you_mean

        known = [f.name for f in cls.__dataclass_fields__.values()]
        for key in value:
            if key not in known:
                raise ValueError(f"tool_limits: unknown key {key!r}.{did_you_mean(key, known)} Valid keys: {known}.")
        return cls(**value)


def as_observation(value: Any) -> Observation | None:
    """A tool's or ``reset``'s return value as an :class:`Observation`.

    ``None`` → None; an :class:`Observation` as it is; ``str`` → text; a PIL image → one image; a list of content
    blocks (``{"type": "text", "text": ...}`` / ``{"type": "image", "image": ...}``, TRL's multimodal form) → text
    and images; any other value → its JSON text (``str()`` when it is not JSON-serialisable).
    """
    if value is None or isinstance(value, Observation):
        return value
    if isinstance(value, str):
        return Observation(text=value)
    if _is_image(value):
        return Observation(images=(value,))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(b, dict) and b.get("type") in ("text", "image") for b in value)
    ):
        texts = [str(b.get("text", "")) for b in value if b["type"] == "text"]
        images = tuple(b["image"] for b in value if b["type"] == "image")
        return Observation(text="\n".join(texts), images=images)
    try:
        return Observation(text=json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return Observation(text=str(value))
    except RecursionError:
        return Observation(text=f"<{type(value).__name__} nested too deeply to show>")


def _is_image(value: Any) -> bool:
    module = type(value).__module__
    return module.startswith("PIL.") and hasattr(value, "size") and hasattr(value, "crop")
