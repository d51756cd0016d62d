"""Reading a running sandbox from the parent: its stdout, stderr and status pipe, with the output limit and the
wall-clock backstop (:func:`collect`)."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from genalign.rewards.sandbox.kill import killpg
from genalign.rewards.sandbox.limits import SandboxLimits


@dataclass
class Collected:
    """What the parent read from a run: the three pipes (four in a test session), and whether it had to stop the run
    itself."""

    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    status: bytearray = field(default_factory=bytearray)
    verdict: bytearray = field(default_factory=bytearray)
    truncated: dict[str, bool] = field(default_factory=lambda: {"stdout": False, "stderr": False})
    output_limited: bool = False
    backstop_killed: bool = False


def collect(
    process: Any, status_read: int, limits: SandboxLimits, backstop: float, verdict_read: int | None = None
) -> Collected:
    """Read stdout, stderr, the status pipe (and the verdict pipe) until all close; past ``max_output_bytes`` on stdout
    or stderr ask the runner (SIGTERM) to stop the program; past ``backstop`` kill the runner's process group."""
    collected = Collected()
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, "stdout")
        selector.register(process.stderr, selectors.EVENT_READ, "stderr")
        selector.register(status_read, selectors.EVENT_READ, "status")
        open_streams = 3
        if verdict_read is not None:
            selector.register(verdict_read, selectors.EVENT_READ, "verdict")
            open_streams += 1
        while open_streams:
            remaining = backstop - time.monotonic()
            if remaining <= 0:
                collected.backstop_killed = True
                killpg(process.pid)
                return collected
            for key, _ in selector.select(timeout=remaining):
                name = key.data
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                buffer = getattr(collected, name)
                if name in ("status", "verdict"):
                    buffer += chunk
                    continue
                room = limits.max_output_bytes - len(buffer)
                buffer += chunk[: max(room, 0)]
                if len(chunk) > room:
                    collected.truncated[name] = True
                    if not collected.output_limited:
                        collected.output_limited = True
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(process.pid, signal.SIGTERM)  # the runner asks init to stop the program
    return collected
