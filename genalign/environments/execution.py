"""Running a turn's tool calls: in parallel threads, each with a timeout and an output cap; every failure becomes an
error observation, never an exception (:func:`run_tool_calls`).

Order of work: calls that could not be read (``bad_json``, ``too_large``, ``too_many_calls``), name no tool
(``unknown_tool``) or whose arguments do not fit the tool's schema (``bad_arguments``) get their error result without
running. The others run in threads, at most ``ToolLimits.max_parallel`` at once: each call to a ``parallel`` tool on
its own, and all calls to the turn's non-parallel tools (an environment's methods, by default) one after the other in
one thread, in call order, so they never race on the environment's state. A call that raises gets ``tool_error``; one
still running at its timeout gets ``timeout`` (and the calls queued after it in the same sequence are not run: they
get ``timeout`` too, since the hung call may still hold the environment's state). The answer is rendered (as text
and images) and cut to ``max_output_chars`` / ``max_output_images`` in the worker thread, so a slow render counts
against the timeout; a cut answer is counted ``truncated``. Results come back in call order.

**A Python thread cannot be killed.** A call past its timeout is *abandoned*: its result is ignored, but the thread
runs on until the function returns (the threads are daemons, so they never keep the process alive at exit;
:func:`abandoned_calls` counts those still running). A tool that may hang must honour a deadline itself (a timeout on
its socket, its subprocess or its loop), or run its work in a subprocess or in the sandbox
(:mod:`genalign.rewards.sandbox`), as the built-in ``python`` tool does: its sandbox has its own wall-clock limit
and kills the whole process tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from genalign.environments.schema import ArgumentError
from genalign.environments.tools import Tool
from genalign.environments.types import ErrorKind, Observation, ToolCall, ToolLimits, ToolResult
from genalign.registry import did_you_mean

_ABANDONED: list[threading.Thread] = []
_ABANDONED_LOCK = threading.Lock()


def abandoned_calls() -> int:
    """How many tool calls abandoned at their timeout are still running in this process."""
    with _ABANDONED_LOCK:
        _ABANDONED[:] = [thread for thread in _ABANDONED if thread.is_alive()]
        return len(_ABANDONED)


def error_result(call: ToolCall, kind: ErrorKind, message: str, elapsed_s: float = 0.0) -> ToolResult:
    """The error observation of ``call``: ``"Error (<kind>): <message>"``."""
    return ToolResult(call=call, output=Observation(text=f"Error ({kind}): {message}"), error=kind, elapsed_s=elapsed_s)


def run_tool_calls(calls: Sequence[ToolCall], tools: Mapping[str, Tool], limits: ToolLimits) -> list[ToolResult]:
    """One :class:`ToolResult` per call, in call order (see the module docstring). Never raises for what the model
    wrote or what a tool did."""
    results: list[ToolResult | None] = [None] * len(calls)
    prepared: dict[int, tuple[Tool, dict[str, Any]]] = {}
    jobs: list[list[int]] = []
    in_sequence: list[int] = []
    for position, call in enumerate(calls):
        if call.error is not None:
            results[position] = error_result(call, call.error, call.message)
            continue
        tool = tools.get(call.name or "")
        if tool is None:
            names = sorted(tools)
            hint = did_you_mean(call.name or "", names)
            available = ", ".join(names) or "none"
            results[position] = error_result(
                call, "unknown_tool", f"no tool named {call.name!r}.{hint} Tools: {available}."
            )
            continue
        try:
            prepared[position] = (tool, tool.check(call.arguments))
        except ArgumentError as err:
            results[position] = error_result(call, "bad_arguments", f"{tool.name}: {err}")
            continue
        if tool.parallel:
            jobs.append([position])
        else:
            in_sequence.append(position)
    if in_sequence:
        jobs.append(in_sequence)
    jobs.sort(key=lambda job: job[0])
    if jobs:
        _Turn(calls, prepared, limits, results).run(jobs)
    assert all(result is not None for result in results)
    return results  # type: ignore[return-value]


@dataclass
class _Running:
    thread: threading.Thread
    cancel: threading.Event
    remaining: list[int]  # positions not finished yet, the current one first
    deadline: float


class _Turn:
    """The waiter of one turn: starts job threads, collects their results, abandons calls past their deadline."""

    def __init__(self, calls, prepared, limits: ToolLimits, results: list[ToolResult | None]) -> None:
        self.calls, self.prepared, self.limits, self.results = calls, prepared, limits, results
        self.events: queue.SimpleQueue = queue.SimpleQueue()

    def timeout_of(self, position: int) -> float:
        tool = self.prepared[position][0]
        return tool.timeout_s if tool.timeout_s is not None else self.limits.timeout_s

    def run(self, jobs: list[list[int]]) -> None:
        waiting = list(reversed(jobs))
        running: dict[int, _Running] = {}
        next_id = 0
        while waiting or running:
            while waiting and len(running) < self.limits.max_parallel:
                job = waiting.pop()
                cancel = threading.Event()
                thread = threading.Thread(
                    target=self.work, args=(next_id, job, cancel), name=f"tool-call-{job[0]}", daemon=True
                )
                running[next_id] = _Running(thread, cancel, list(job), time.monotonic() + self.timeout_of(job[0]))
                thread.start()
                next_id += 1
            wait = min(job.deadline for job in running.values()) - time.monotonic()
            with contextlib.suppress(queue.Empty):  # nothing arrived before the nearest deadline
                self.handle(self.events.get(timeout=max(wait, 0.0)), running)
            self.abandon_late(running)

    def handle(self, event: tuple[str, int, int, Any], running: dict[int, _Running]) -> None:
        kind, job_id, position, payload = event
        job = running.get(job_id)
        if job is None:
            return  # an abandoned call finished late: its result is ignored
        if kind == "start":
            job.deadline = payload + self.timeout_of(position)
            return
        self.results[position] = payload
        job.remaining.remove(position)
        if not job.remaining:
            del running[job_id]

    def abandon_late(self, running: dict[int, _Running]) -> None:
        now = time.monotonic()
        for job_id, job in list(running.items()):
            if job.deadline > now:
                continue
            job.cancel.set()
            current, *rest = job.remaining
            timeout = self.timeout_of(current)
            self.results[current] = error_result(
                self.calls[current], "timeout", f"the tool did not answer within {timeout:g} s.", elapsed_s=timeout
            )
            for position in rest:
                self.results[position] = error_result(
                    self.calls[position], "timeout", "not run: an earlier call of this turn timed out."
                )
            del running[job_id]
            with _ABANDONED_LOCK:
                _ABANDONED.append(job.thread)

    def work(self, job_id: int, job: list[int], cancel: threading.Event) -> None:
        for position in job:
            if cancel.is_set():
                return
            started = time.monotonic()
            self.events.put(("start", job_id, position, started))
            tool, arguments = self.prepared[position]
            result = self.call(self.calls[position], tool, arguments, started)
            self.events.put(("done", job_id, position, result))

    def call(self, call: ToolCall, tool: Tool, arguments: dict[str, Any], started: float) -> ToolResult:
        try:
            value = tool.fn(**arguments)
            if inspect.isawaitable(value):
                value = asyncio.run(_awaited(value))
            output = tool.render(value) or Observation()
            output, truncated = _capped(output, self.limits)
        except BaseException as err:
            return _raised(call, tool, err, time.monotonic() - started)
        return ToolResult(call=call, output=output, truncated=truncated, elapsed_s=time.monotonic() - started)


def _raised(call: ToolCall, tool: Tool, error: BaseException, elapsed_s: float) -> ToolResult:
    """The ``tool_error`` result of a tool that raised (its own ``render_error`` text, else the default)."""
    if tool.render_error is not None:
        try:
            text = tool.render_error(error)[:1000]
            return ToolResult(call=call, output=Observation(text=text), error="tool_error", elapsed_s=elapsed_s)
        except Exception:
            pass
    message = f"{type(error).__name__}: {error}"
    if len(message) > 1000:
        message = message[:997] + "..."
    return error_result(call, "tool_error", message, elapsed_s=elapsed_s)


async def _awaited(value: Any) -> Any:
    return await value


def _capped(output: Observation, limits: ToolLimits) -> tuple[Observation, bool]:
    text, images, truncated = output.text, output.images, False
    if len(text) > limits.max_output_chars:
        omitted = len(text) - limits.max_output_chars
        text = text[: limits.max_output_chars] + f"\n[output truncated: {omitted} more characters]"
        truncated = True
    if len(images) > limits.max_output_images:
        images = images[: limits.max_output_images]
        text += f"\n[{len(output.images) - limits.max_output_images} more image(s) not shown]"
        truncated = True
    return (Observation(text=text, images=tuple(images)), True) if truncated else (output, False)
