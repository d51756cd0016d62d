"""What a sandboxed run reports: :class:`SandboxResult` (with its :class:`SandboxIsolation` and status), or
:class:`SandboxError` when the sandbox itself failed."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any, Literal

SandboxStatus = Literal["ok", "timeout", "memory", "crash", "output_limit"]


@dataclass(frozen=True)
class SandboxIsolation:
    """What a run actually got (see :mod:`genalign.rewards.sandbox`); every flag is measured in the sandbox, not
    assumed."""

    network_isolated: bool = False  # network namespace with only a down loopback: no connection anywhere
    filesystem_readonly: bool = False  # mount namespace: every mount read-only except the scratch directory
    private_scratch: bool = False  # the scratch directory is a private, size-limited tmpfs
    pid_namespace: bool = False  # own PID namespace (and /proc): all processes die with the sandbox's init
    user_namespace: bool = False  # namespaces created through an unprivileged user namespace (caller not root)
    uid: int | None = None  # the unprivileged uid the program ran as (caller root), None if it kept the caller's
    process_limit: bool = False  # RLIMIT_NPROC applies (the program does not run as root)
    seccomp: bool = False  # every process the run started had the system-call filter (sandbox.seccomp) installed
    harness_private: bool = False  # test sessions: the harness made itself not dumpable (sandbox.protocol)


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of one run.

    ``status``: ``"ok"`` (exit code 0), ``"timeout"`` (wall or CPU limit), ``"memory"`` (``MemoryError`` or another
    allocation failure), ``"crash"`` (non-zero exit code or a signal) or ``"output_limit"``. Whether the output is
    *right* is the caller's business. ``stdout``/``stderr`` are decoded as UTF-8 (invalid bytes replaced) and hold at
    most ``max_output_bytes`` bytes each (``*_truncated`` when more was written).
    """

    status: SandboxStatus
    stdout: str
    stderr: str
    exit_code: int | None  # None when the program was killed by a signal
    signal: int | None
    wall_time_s: float
    cpu_time_s: float | None
    stdout_truncated: bool
    stderr_truncated: bool
    isolation: SandboxIsolation
    interpreter: str
    process_group: int = field(repr=False, default=0)  # the runner's process group (empty once the run returned)


class SandboxError(RuntimeError):
    """The sandbox itself could not run the program (a setup problem, not the program's fault)."""


def classify_status(
    exit_event: dict[str, Any], stderr: bytes, output_limited: bool, backstop_killed: bool, cpu_seconds: int
) -> SandboxStatus:
    """The status of a run from init's ``exit`` report and what the parent saw (see :class:`SandboxResult`)."""
    if output_limited:
        return "output_limit"
    if backstop_killed or exit_event.get("timed_out"):
        return "timeout"
    code, sig = exit_event.get("exit_code"), exit_event.get("signal")
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and (exit_event.get("cpu_time_s") or 0) >= cpu_seconds - 0.05):
        return "timeout"
    if code == 0 and sig is None:
        return "ok"
    tail = stderr[-4096:]
    if b"MemoryError" in tail or b"Cannot allocate memory" in tail or b"std::bad_alloc" in tail:
        return "memory"
    return "crash"
