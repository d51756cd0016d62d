"""Init's side of a test session (:func:`genalign.rewards.sandbox.run_test_session`): :func:`serve`.

Init (:mod:`genalign.rewards.sandbox.child`) loads this file from the source the parent sends in the config (in
isolated mode nothing beside ``child.py`` is importable) and passes itself as ``child`` for its process helpers.
Standard library only.

Init starts the harness (:mod:`genalign.rewards.sandbox.protocol`; the harness's private uid when the caller is root)
with the tests on its stdin (a memory file from the parent), the verdict pipe, a control pipe each way and one socket per possible solution process,
and at once a first solution process (the program's uid, the program's limits and filter, its socket and nothing
else), which waits for the harness before running the program. Then it serves the harness's requests: ``start`` a
test (on the live solution process, or on a new one), ``stop`` it (killing the process when the harness says it
aborted), and enforces each test's wall-clock and CPU limits by killing the solution process, which the harness then
sees as the end of its socket.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

#: how long after a test's time limit the harness may take to end the test, and to start the next one after
#: ``timeout_s``, before init ends the session (its remaining tests then get no verdict: status ``timeout``)
HARNESS_GRACE_S = 1.0


def serve(config: dict[str, Any], libc: Any, isolation: dict[str, Any], child: Any) -> dict[str, Any]:
    """Run the session of ``config["session"]``; the ``exit`` report of the harness (``child``: init's module)."""
    return _Session(config, libc, isolation, child).serve()


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (all its threads; 0.0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Session:
    """Init's side of a test session: the harness, its control pipes, and the solution process.

    One solution process serves the tests in turn while it stays healthy; the harness asks for a fresh one after a
    test that killed it, timed out or aborted. Each test has the limits of one run: ``timeout_s`` of wall time from
    ``start`` to ``stop`` and ``cpu_seconds`` of the process's CPU time (both enforced here by killing the process;
    ``RLIMIT_CPU`` of the whole session's budget backs them up).
    """

    def __init__(self, config: dict[str, Any], libc: Any, isolation: dict[str, Any], child: Any) -> None:
        import socket

        self.config, self.libc, self.isolation, self.child = config, libc, isolation, child
        self.count = config["session"]["tests"]
        self.timeout, self.cpu_limit = config["limits"]["timeout_s"], config["limits"]["cpu_seconds"]
        pairs = [socket.socketpair() for _ in range(self.count)]  # one per solution process at most
        self.solution_ends: list[Any] = [solution for _, solution in pairs]
        self.reaped: dict[int, tuple[int, Any]] = {}
        self.process: dict[str, Any] | None = None  # the solution process: pid, channel
        self.test: dict[str, Any] | None = None  # the test under way: deadline, CPU at its start, timed out
        self.harness = self._start_harness([own for own, _ in pairs])
        self.deadline = time.monotonic() + self.timeout + HARNESS_GRACE_S
        self._start_solution()  # starts while the harness does; runs the program only on the harness's word

    def _argv(self, role: str, argument: str) -> list[str]:
        """``python -c BOOTSTRAP WIRE PROTOCOL role argument`` (see :mod:`genalign.rewards.sandbox.protocol`)."""
        sources = self.config["session"]["sources"]
        bootstrap = [sources["bootstrap"], sources["wire"], sources["protocol"]]
        return [self.config["interpreter"], "-I", "-S", "-B", "-c", *bootstrap, role, argument]

    def _budget(self) -> dict[str, Any]:
        """Limits of a process that may live through the whole session: ``RLIMIT_CPU`` is every test's CPU time."""
        return self.config["limits"] | {"cpu_seconds": self.count * (self.cpu_limit + 1)}

    def _start_harness(self, harness_ends: list[Any]) -> int:
        config = self.config
        self.requests, harness_writes = os.pipe()
        harness_reads, self.replies = os.pipe()
        spec = config["session"]["spec_fd"]  # a memory file from the parent, at its start
        fds = {"verdict": config["verdict_fd"], "to_init": harness_writes, "from_init": harness_reads}
        fds["channels"] = [end.fileno() for end in harness_ends]
        harness = os.fork()
        if harness == 0:
            os.dup2(spec, 0)
            argv = self._argv("harness", json.dumps(fds))
            limits = self._budget()
            limits["max_open_files"] = max(limits["max_open_files"], self.count + 32)
            keep = (config["verdict_fd"], harness_writes, harness_reads, *fds["channels"])
            uid = config["session"]["harness_uid"]
            self.child.exec_sandboxed(config, self.libc, self.isolation, uid=uid, argv=argv, cwd="/", keep=keep, limits=limits,
                            sandbox_processes=3)  # fmt: skip
        for fd in (harness_writes, harness_reads, spec, config["verdict_fd"]):  # the harness's alone
            os.close(fd)
        for end in harness_ends:
            end.close()
        self.child.emit(config["status_fd"], "started", pid=harness, pgid=harness)
        return harness

    def _start_solution(self) -> None:
        config = self.config
        channel = next(index for index, end in enumerate(self.solution_ends) if end is not None)
        end, self.solution_ends[channel] = self.solution_ends[channel], None
        pid = os.fork()
        if pid == 0:
            fd = end.fileno()
            argv = self._argv("solution", str(fd))
            self.child.exec_sandboxed(config, self.libc, self.isolation, uid=self.isolation["uid"], argv=argv,
                            cwd=config["scratch"], keep=(fd,), limits=self._budget(),
                            sandbox_processes=3)  # fmt: skip
        end.close()
        self.process = {"pid": pid, "channel": channel}

    def _kill_solution(self) -> tuple[int, Any] | None:
        process, self.process = self.process, None
        if process is None:
            return None
        self.child.kill_descendants(process["pid"], self.reaped, spare=self.harness)
        return self.reaped.get(process["pid"])

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """For the harness: ``{"start": i}`` -> ``{"started": i, "channel": k}`` (solution process ``k``, started now
        unless a live one exists); ``{"stop": i, "kill": bool}`` -> ``{"ended": report}`` (how the process ended, or
        ``{"alive": true}`` when it lives on)."""
        if "start" in request and self.test is None:
            index = request["start"]
            if type(index) is not int or not 0 <= index < self.count:
                raise ValueError(f"the harness asked to start test {index!r}")
            if self.process is not None and self.process["pid"] in self.reaped:
                self._kill_solution()  # it died between tests (a thread of the program ended it)
            if self.process is None:
                self._start_solution()
            pid = self.process["pid"]
            self.test = {"deadline": time.monotonic() + self.timeout, "cpu": _cpu_seconds(pid), "timed_out": False}
            self.deadline = self.test["deadline"] + HARNESS_GRACE_S
            return {"started": index, "channel": self.process["channel"]}
        if "stop" in request and self.test is not None:
            test, self.test = self.test, None
            self.deadline = time.monotonic() + self.timeout + HARNESS_GRACE_S  # time to start the next test
            alive = self.process is not None and self.process["pid"] not in self.reaped
            if alive and not request.get("kill") and not test["timed_out"]:
                return {"ended": {"alive": True, "timed_out": False}}
            ended = self._kill_solution()
            return {"ended": self.child.exit_report(ended, test["timed_out"], stopped=alive)}
        raise ValueError(f"not a request the harness may make now: {str(request)[:80]}")

    def _enforce_test_limits(self, now: float) -> None:
        """Kill the solution process when the test under way is past its wall time or CPU time (the harness then
        reads the end of its socket)."""
        test = self.test
        if test is None or test["timed_out"] or self.process is None:
            return
        pid = self.process["pid"]
        if now >= test["deadline"] or _cpu_seconds(pid) - test["cpu"] >= self.cpu_limit:
            self._kill_solution()
            test["timed_out"] = True

    def serve(self) -> dict[str, Any]:
        """Serve the harness until it ends, its time runs out or the parent asks to stop; the ``exit`` report (of the
        harness)."""
        import select

        pending = bytearray()
        timed_out = stopped = closed = False
        while True:
            if signal.sigtimedwait({signal.SIGTERM}, 0) is not None:
                stopped = True
                break
            now = time.monotonic()
            self._enforce_test_limits(now)
            if now >= self.deadline:
                timed_out = True
                break
            self.child.reap(self.reaped)
            if self.harness in self.reaped:
                break
            test = self.test
            wake = test["deadline"] if test is not None and not test["timed_out"] else self.deadline
            wait = max(0.0, min(wake - now, 0.02))
            if closed:  # wait for the harness to exit
                time.sleep(wait)
                continue
            if not select.select([self.requests], [], [], wait)[0]:
                continue
            chunk = os.read(self.requests, 4096)
            closed = not chunk  # the harness is ending
            pending += chunk
            try:
                while (end := pending.find(b"\n")) >= 0:
                    request = json.loads(bytes(pending[:end]))
                    del pending[: end + 1]
                    os.write(self.replies, (json.dumps(self._answer(request)) + "\n").encode())
            except (ValueError, OSError):  # a harness that does not follow the protocol, or has ended
                break
        self._kill_solution()
        self.child.kill_descendants(self.harness, self.reaped)
        for fd in (self.requests, self.replies):
            os.close(fd)
        return self.child.exit_report(self.reaped.get(self.harness), timed_out, stopped)
