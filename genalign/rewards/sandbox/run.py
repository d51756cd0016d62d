"""Running one program in a fresh sandbox, from the parent: :func:`run_sandboxed` (see :mod:`genalign.rewards.sandbox`),
and the machinery it shares with :func:`~genalign.rewards.sandbox.run_test_session` (:func:`execute`).

A run: a private directory with the program, its stdin (and a session's tests) and the scratch directory; the runner
(:mod:`genalign.rewards.sandbox.child`) started in its own session; its output, status (and verdicts) read until it
exits; every process it left killed; the outcome classified; the directory deleted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from genalign.rewards.sandbox import child
from genalign.rewards.sandbox.child import SEARCH_PATH
from genalign.rewards.sandbox.interpreter import default_interpreter
from genalign.rewards.sandbox.kill import kill_uid, killpg
from genalign.rewards.sandbox.limits import SandboxLimits
from genalign.rewards.sandbox.output import Collected, collect
from genalign.rewards.sandbox.result import SandboxError, SandboxIsolation, SandboxResult, classify_status
from genalign.rewards.sandbox.seccomp import filter_program
from genalign.rewards.sandbox.uids import NOBODY, acquire_uid, release_uid

Language = Literal["python"]

#: the runner script, started by path (in isolated mode it cannot be found as a module)
_RUNNER = os.path.abspath(child.__file__)


def run_sandboxed(
    program: str,
    *,
    stdin: str = "",
    language: Language = "python",
    limits: SandboxLimits | None = None,
    interpreter: str | None = None,
    use_namespaces: bool = True,
    use_seccomp: bool = True,
) -> SandboxResult:
    """Run ``program`` with ``stdin`` in a fresh sandbox (:mod:`genalign.rewards.sandbox`) and report what happened.

    Args:
        program: the source code.
        stdin: what the program reads on standard input.
        language: only ``"python"``.
        limits: :class:`SandboxLimits` (defaults when None).
        interpreter: the Python that runs the program (default: :func:`default_interpreter`).
        use_namespaces: False runs without namespaces even where they are available (to test the fallback).
        use_seccomp: False runs without the system-call filter (to compare; the result reports ``seccomp=False``).

    Returns:
        :class:`SandboxResult`; a failing program is a result, never an exception.

    Raises:
        ValueError: an unknown ``language`` or a non-string ``program``/``stdin``.
        SandboxError: the sandbox could not be set up or did not report on the program.
    """
    _check_arguments(program, stdin, language)
    result, _ = execute(
        program,
        stdin=stdin,
        limits=limits or SandboxLimits(),
        interpreter=interpreter,
        use_namespaces=use_namespaces,
        use_seccomp=use_seccomp,
    )
    return result


@dataclass(frozen=True)
class SessionPlan:
    """What a test session adds to a run (built by :func:`~genalign.rewards.sandbox.run_test_session`)."""

    spec: str  # JSON for the harness's stdin: tests, entry_point, reply_limit, cpu_seconds
    tests: int
    sources: dict[
        str, str
    ]  # init_session.py for init; bootstrap, wire.py and protocol.py for the harness and solutions
    wall_s: float  # the most the session may take; the parent kills it 2 s after that


def execute(
    program: str,
    *,
    stdin: str,
    limits: SandboxLimits,
    interpreter: str | None,
    use_namespaces: bool,
    use_seccomp: bool,
    session: SessionPlan | None = None,
) -> tuple[SandboxResult, bytes]:
    """Run ``program`` (or, with ``session``, a test session on it) in a fresh sandbox: the result, and what the
    harness wrote on the verdict pipe (``b""`` without a session)."""
    is_root = os.geteuid() == 0
    interpreter = interpreter or default_interpreter(drop_privileges=is_root)

    # 1. a private directory: program and stdin (0600, caller only) and scratch/ (the program's, 0700); in a session
    #    a second private uid, and the tests in a memory file with no path (where the program keeps the caller's uid,
    #    it could read a 0600 file of the run's directory), handed to the harness as its stdin
    uids = [acquire_uid() for _ in range(2 if session else 1)] if is_root else []
    uid = uids[0] if uids else None
    base = tempfile.mkdtemp(prefix="genalign-sandbox-")
    os.chmod(base, 0o711)  # others may pass through to scratch/ (Python opens main.py by its absolute path), not list
    status_read, status_write = os.pipe()
    verdict_read, verdict_write = os.pipe() if session else (-1, -1)
    spec_fd = _memory_file(session.spec) if session else -1
    process = None
    try:
        program_filter = filter_program() if use_seccomp else None
        config = {
            "scratch": _prepare_directory(base, program, stdin, uid),
            "program": os.path.join(base, "program.py"),
            "interpreter": interpreter,
            "uid": uid,
            "status_fd": status_write,
            "use_namespaces": use_namespaces,
            "limits": asdict(limits) | {"cpu_seconds": limits.cpu_seconds},
            "seccomp_filter": program_filter.hex() if program_filter else None,
            "verdict_fd": verdict_write if session else None,
            "session": None,
        }
        if session:
            harness_uid = uids[1] if uids else None
            config["session"] = {"tests": session.tests, "spec_fd": spec_fd, "sources": session.sources}
            config["session"]["harness_uid"] = harness_uid
        # 2. the runner, in its own session, with a clean environment; it reports on the status pipe
        started = time.monotonic()
        process = _start_runner(base, config)
        for fd in (status_write, verdict_write, spec_fd):
            if fd >= 0:
                os.close(fd)
        status_write = verdict_write = spec_fd = -1
        # 3. read the output; init enforces the time limits itself, the backstop only catches a stuck sandbox
        wall = session.wall_s if session else limits.timeout_s
        collected = _collect_until_exit(process, status_read, verdict_read, limits, backstop=started + wall + 2.0)
        wall_time = time.monotonic() - started
        # 4. nothing outlives a run: the runner's group, the program's group, every process of the private uids
        events = _parse_events(collected.status)
        isolation = SandboxIsolation(**events.get("isolation", {}), seccomp=events.get("seccomp", False))
        _kill_leftovers(process.pid, events, isolation, uids)
        # 5. the outcome
        _check_reported(events, collected, process.returncode)
        result = _result(events.get("exit", {}), collected, limits, isolation, interpreter, wall_time, process.pid)
        return result, bytes(collected.verdict)
    finally:
        _clean_up(process, (status_read, status_write, verdict_read, verdict_write, spec_fd), uids, base)


def _check_arguments(program: str, stdin: str, language: str) -> None:
    if language != "python":
        raise ValueError(f"run_sandboxed: language={language!r} is not supported; use 'python'.")
    if not isinstance(program, str) or not isinstance(stdin, str):
        raise ValueError(
            f"run_sandboxed: program and stdin must be strings, got {type(program).__name__} and "
            f"{type(stdin).__name__}."
        )


def _write_private(path: str, text: str) -> None:
    """Write ``text`` to a new file only the caller can read."""
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
        handle.write(text)


def _memory_file(text: str) -> int:
    """A descriptor of an anonymous memory file holding ``text``, positioned at its start."""
    fd = os.memfd_create("genalign-session-tests")
    view = memoryview(text.encode("utf-8"))
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _prepare_directory(base: str, program: str, stdin: str, uid: int | None) -> str:
    """Fill the run's directory ``base``: ``program.py`` and ``stdin`` (caller only) and ``scratch/`` (owned by the
    private ``uid``, if any); returns the scratch directory."""
    scratch = os.path.join(base, "scratch")
    os.mkdir(scratch, 0o700)
    if uid is not None:
        os.chown(scratch, uid, uid)
    _write_private(os.path.join(base, "program.py"), program)
    _write_private(os.path.join(base, "stdin"), stdin)
    return scratch


def _start_runner(base: str, config: dict[str, Any]) -> subprocess.Popen:
    """Start the runner in its own session, with a clean environment, the stdin file and the status pipe (and a
    session's descriptors)."""
    config_path = os.path.join(base, "config.json")  # a file: a session's config outgrows one program argument
    _write_private(config_path, json.dumps(config))
    with open(os.path.join(base, "stdin"), "rb") as stdin_file:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", _RUNNER, config_path],
            stdin=stdin_file,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=_passed_descriptors(config),
            env={"PATH": SEARCH_PATH, "LANG": "C.UTF-8"},
            cwd=base,
            start_new_session=True,
        )


def _passed_descriptors(config: dict[str, Any]) -> tuple[int, ...]:
    """The status pipe and, in a session, the verdict pipe and the tests' memory file."""
    session = config["session"] or {}
    return tuple(fd for fd in (config["status_fd"], config["verdict_fd"], session.get("spec_fd")) if fd is not None)


def _collect_until_exit(
    process: subprocess.Popen, status_read: int, verdict_read: int, limits: SandboxLimits, backstop: float
) -> Collected:
    """Read the pipes (:func:`collect`) and wait for the runner, killing its process group past ``backstop``."""
    collected = collect(process, status_read, limits, backstop, verdict_read if verdict_read >= 0 else None)
    try:
        process.wait(timeout=max(0.5, backstop - time.monotonic()))
    except subprocess.TimeoutExpired:
        collected.backstop_killed = True
        killpg(process.pid)
        process.wait()
    return collected


def _parse_events(status: bytearray) -> dict[str, Any]:
    """The runner's reports, one JSON object a line: ``{event name: its values}`` (the last of each name), and
    ``"seccomp"``: whether every process started reported its filter installed."""
    events: dict[str, Any] = {}
    filters: list[bool] = []
    for line in status.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
            name = event.pop("event")
        except (ValueError, AttributeError, KeyError, TypeError):  # not the runner's: a fallback-mode program can write
            continue  # here (docs/rewards_code_execution.md); skip it rather than fail the caller
        if name == "seccomp":
            filters.append(bool(event.get("installed")))
        else:
            events[name] = event
    events["seccomp"] = bool(filters) and all(filters)
    return events


def _kill_leftovers(runner_group: int, events: dict[str, Any], isolation: SandboxIsolation, uids: list[int]) -> None:
    """Kill the runner's process group and, without a PID namespace, the program's (or harness's) group and the
    private uids' processes."""
    killpg(runner_group)
    if not isolation.pid_namespace:
        killpg(events.get("started", {}).get("pgid"))
        for uid in uids:
            if uid != NOBODY:  # never sweep a uid that other processes may share
                kill_uid(uid)


def _check_reported(events: dict[str, Any], collected: Collected, runner_exit: int | None) -> None:
    """Raise :class:`SandboxError` when the sandbox reported an error, or no exit, without the parent stopping it."""
    stopped_by_parent = collected.backstop_killed or collected.output_limited
    if ("error" in events or "exit" not in events) and not stopped_by_parent:
        reason = events.get("error", {}).get("message") or bytes(collected.stderr[-2000:]).decode("utf-8", "replace")
        raise SandboxError(f"the sandbox did not run the program (runner exit {runner_exit}): {reason}")


def _result(
    exit_event: dict[str, Any],
    collected: Collected,
    limits: SandboxLimits,
    isolation: SandboxIsolation,
    interpreter: str,
    wall_time: float,
    process_group: int,
) -> SandboxResult:
    stderr = bytes(collected.stderr)
    return SandboxResult(
        status=classify_status(
            exit_event, stderr, collected.output_limited, collected.backstop_killed, limits.cpu_seconds
        ),
        stdout=bytes(collected.stdout).decode("utf-8", "replace"),
        stderr=stderr.decode("utf-8", "replace"),
        exit_code=exit_event.get("exit_code"),
        signal=exit_event.get("signal"),
        wall_time_s=wall_time,
        cpu_time_s=exit_event.get("cpu_time_s"),
        stdout_truncated=collected.truncated["stdout"],
        stderr_truncated=collected.truncated["stderr"],
        isolation=isolation,
        interpreter=interpreter,
        process_group=process_group,
    )


def _clean_up(process: subprocess.Popen | None, fds: tuple[int, ...], uids: list[int], base: str) -> None:
    """Whatever happened: the runner killed and its pipes closed, the status (and verdict) pipe closed, the uids
    released, the directory deleted."""
    if process is not None:
        if process.poll() is None:
            killpg(process.pid)
            process.wait()
        process.stdout.close()
        process.stderr.close()
    for fd in fds:
        if fd >= 0:
            os.close(fd)
    for uid in uids:
        release_uid(uid)
    shutil.rmtree(base, ignore_errors=True)
