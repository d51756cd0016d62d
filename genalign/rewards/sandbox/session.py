"""Trusted tests against an untrusted program, with a verdict the program cannot forge: :func:`run_test_session`.

One sandbox (:mod:`genalign.rewards.sandbox`) runs a test session: the *harness* executes each test's code (assert
statements, a HumanEval ``check``) in a process of its own, and every call of one of the program's functions goes, as
plain data, to a *solution* process that runs the program (one for the tests in turn, a fresh one after a test that
killed it or aborted). The program never shares an interpreter, memory or a writable file with the tests; the verdicts
travel on a pipe only the harness holds. Design and protocol: :mod:`genalign.rewards.sandbox.protocol` and
:mod:`~genalign.rewards.sandbox.wire`; process setup: :mod:`~genalign.rewards.sandbox.child` and
:mod:`~genalign.rewards.sandbox.init_session`.

The harness and solution processes run ``python -c`` with the code of wire.py and protocol.py as arguments, compiled
once per interpreter by that interpreter (marshal, hex): compiling them in each process cost ~20 ms of CPU each.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import marshal
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from genalign.rewards.sandbox import protocol
from genalign.rewards.sandbox.child import SEARCH_PATH
from genalign.rewards.sandbox.interpreter import default_interpreter
from genalign.rewards.sandbox.limits import SandboxLimits
from genalign.rewards.sandbox.result import SandboxError, SandboxResult
from genalign.rewards.sandbox.run import SessionPlan, execute

TestStatus = Literal["ok", "fail", "timeout", "memory", "crash", "output_limit"]

#: what ``python -c`` runs in the harness and solution processes, with the code of wire.py and protocol.py as its
#: first two arguments: genalign is not importable there (and, as root, the private uids may not even read its files)
_BOOTSTRAP = """\
import marshal, sys
for _name in ("genalign", "genalign.rewards", "genalign.rewards.sandbox", "genalign.rewards.sandbox.wire"):
    sys.modules[_name] = type(sys)(_name)
_wire, _protocol = (marshal.loads(bytes.fromhex(code)) for code in sys.argv[1:3])
del sys.argv[1:3]
exec(_wire, sys.modules["genalign.rewards.sandbox.wire"].__dict__)
exec(_protocol, {"__name__": "__main__", "__builtins__": __builtins__})
"""
#: run by the sandbox's interpreter on the parent's side: compiles the NUL-separated sources on stdin
_COMPILE = """\
import marshal, sys
names = ("wire.py", "protocol.py")
codes = [marshal.dumps(compile(text, name, "exec")).hex() for name, text in zip(names, sys.stdin.read().split("\\0"))]
sys.stdout.write(" ".join(codes))
"""
#: the longest single argument Linux passes to a program (MAX_ARG_STRLEN), less a margin
_MAX_ARGUMENT = 120_000
#: the most tests of one session (each holds a socket pair in init until its turn); split longer lists
MAX_SESSION_TESTS = 256
#: the harness's time to start, read its tests and stop each solution, on top of ``timeout_s`` per test
_SESSION_SLACK_S = 2.0
_PER_TEST_SLACK_S = 1.5


@dataclass(frozen=True)
class SessionResult:
    """The outcome of a test session.

    ``statuses``: one per test, in order: ``"ok"`` (passed), ``"fail"`` (ran; an assertion failed, or the program
    returned what cannot cross to the tests), ``"timeout"``, ``"memory"``, ``"crash"`` (the program, or the test code on
    the program's answers, raised; or the solution's process died), ``"output_limit"``. A test that got no verdict
    (the session was stopped or the harness died) takes the session's status (``"crash"`` if that is ``"ok"``).
    ``run``: the session as one sandboxed run: its status is the harness's, its stdout/stderr hold what the harness and
    every solution process printed (the harness writes a line per failed test on stderr), its isolation what every
    process got.
    """

    statuses: tuple[TestStatus, ...]
    run: SandboxResult


def run_test_session(
    program: str,
    tests: Sequence[str],
    *,
    entry_point: str | None = None,
    limits: SandboxLimits | None = None,
    interpreter: str | None = None,
    use_namespaces: bool = True,
    use_seccomp: bool = True,
) -> SessionResult:
    """Run each of ``tests`` (Python source: asserts, or test code with a call of ``check``) against ``program``.

    Args:
        program: the program's source; its top-level functions are what the tests call.
        tests: test code, one string per test; each runs against a fresh process of the program.
        entry_point: a name of the program that the tests reach even if it is also a built-in's name.
        limits: per test (and per solution process): ``timeout_s`` from the start of its solution process to the end
            of its test code, CPU, memory, processes, output (``max_output_bytes`` per test, for the whole session's
            stdout and stderr together).
        interpreter, use_namespaces, use_seccomp: as in :func:`~genalign.rewards.sandbox.run_sandboxed`.

    Raises:
        ValueError: not a list of strings, or more than :data:`MAX_SESSION_TESTS` tests.
        SandboxError: the sandbox could not be set up.
    """
    tests = list(tests)
    if not isinstance(program, str) or not all(isinstance(test, str) for test in tests):
        raise ValueError("run_test_session: program and every test must be strings of Python source.")
    if not 1 <= len(tests) <= MAX_SESSION_TESTS:
        raise ValueError(
            f"run_test_session: {len(tests)} tests; give 1 to {MAX_SESSION_TESTS} (split longer lists into sessions)."
        )
    limits = limits or SandboxLimits()
    interpreter = interpreter or default_interpreter(drop_privileges=os.geteuid() == 0)
    spec = {
        "tests": tests,
        "entry_point": entry_point,
        "reply_limit": max(limits.max_output_bytes, limits.memory_mb * 1024 * 1024 // 32),
        "cpu_seconds": limits.cpu_seconds,
    }
    plan = SessionPlan(
        spec=json.dumps(spec),
        tests=len(tests),
        sources=_shipped(interpreter),
        wall_s=_SESSION_SLACK_S + len(tests) * (limits.timeout_s + _PER_TEST_SLACK_S),
    )
    run, verdicts = execute(
        program,
        stdin="",
        limits=dataclasses.replace(limits, max_output_bytes=limits.max_output_bytes * len(tests)),
        interpreter=interpreter,
        use_namespaces=use_namespaces,
        use_seccomp=use_seccomp,
        session=plan,
    )
    decided, private = _parse_verdicts(verdicts, len(tests))
    run = dataclasses.replace(run, isolation=dataclasses.replace(run.isolation, harness_private=private))
    missing: TestStatus = "crash" if run.status == "ok" else run.status
    return SessionResult(statuses=tuple(decided.get(index, missing) for index in range(len(tests))), run=run)


@functools.cache
def _shipped(interpreter: str) -> dict[str, str]:
    """The code init runs (init_session.py, compiled here: init is this Python) and the code it ships to the harness
    and solution processes (wire.py and protocol.py, compiled by ``interpreter``), as marshal data in hex."""
    folder = Path(protocol.__file__).parent
    sources = {
        name: (folder / f"{name}.py").read_text(encoding="utf-8") for name in ("wire", "protocol", "init_session")
    }
    compiled = subprocess.run(
        [interpreter, "-I", "-S", "-B", "-c", _COMPILE],
        input=sources["wire"] + "\0" + sources["protocol"],
        capture_output=True,
        text=True,
        env={"PATH": SEARCH_PATH, "LANG": "C.UTF-8"},
        check=False,
    )
    codes = compiled.stdout.split()
    if compiled.returncode != 0 or len(codes) != 2:
        raise SandboxError(f"{interpreter} could not compile the test session's code: {compiled.stderr[-2000:]}")
    if max(len(code) for code in codes) > _MAX_ARGUMENT:
        raise SandboxError("the test session's code outgrew one program argument; split wire.py or protocol.py")
    init_session = marshal.dumps(compile(sources["init_session"], "init_session.py", "exec")).hex()
    return {"bootstrap": _BOOTSTRAP, "wire": codes[0], "protocol": codes[1], "init_session": init_session}


def _parse_verdicts(data: bytes, count: int) -> tuple[dict[int, TestStatus], bool]:
    """The harness's lines: ``({test index: status}, whether it reported itself not dumpable)``; the first verdict of
    a test counts, anything unreadable is skipped."""
    decided: dict[int, TestStatus] = {}
    private = False
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        if isinstance(message.get("harness"), dict):
            private = message["harness"].get("private") is True
        index, status = message.get("test"), message.get("status")
        if type(index) is int and 0 <= index < count and status in protocol.TEST_STATUSES and index not in decided:
            decided[index] = status
    return decided, private
