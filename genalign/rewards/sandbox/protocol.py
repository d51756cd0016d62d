"""The two ends of a test session (:func:`genalign.rewards.sandbox.run_test_session`): the *harness*, which runs the
dataset's trusted test code and decides every verdict, and the *solution server*, which runs the model-written program
and answers the harness's calls of its functions. Each is its own process in the sandbox; they share no memory, only a
socket that carries plain data (:mod:`genalign.rewards.sandbox.wire`).

**The harness** (:func:`harness_main`) first makes itself not dumpable (``PR_SET_DUMPABLE`` 0: its
``/proc/<pid>/mem``, ``environ`` and descriptors are closed to processes of its uid without ``CAP_SYS_PTRACE``), then
reads the tests from its stdin (a pipe from init). For each test it asks init for the solution process
(``{"start": i}`` on its control pipe; init names the socket of the live process, or of a new one) and executes the
test code in a namespace where each top-level callable the program defines is a *proxy*: calling it sends
``{"id", "call", "args", "kwargs"}`` and returns the decoded ``value``, or raises the program's exception (as the
built-in exception class of that name, else :class:`SolutionError`; never ``StopIteration``, which ends loops
silently, nor ``SystemExit`` or another ``BaseException``). A name of the program never replaces a built-in (``len``,
``sorted``, ``AssertionError``...), except the row's ``entry_point``; modules the program imported are imported again
by the harness (standard library only); other plain values are copied. The test passes when its code runs to the end
and the solution's process neither died, nor ran past the test's time, nor sent what cannot be read or checked
(objects of the program's own classes, functions, endless generators: status ``fail``). Then the harness asks init to
end the test (``{"stop": i, "kill": ...}``; a process that aborted is killed, and init says how it ended) and writes
the verdict, ``{"test": i, "status": ...}``, on its verdict pipe: a descriptor only the harness holds, read by the
parent. A program that cannot be loaded fails every test the same way, once.

**The solution server** (:func:`solution_main`) waits for the harness's ``{"load": true}`` (sent only once the harness
is not dumpable), executes ``main.py`` (the program) in a namespace named ``__solution__``, sends
``{"loaded": true, "names": ...}`` (or ``{"loaded": false, "error": ...}``), then answers calls until the harness
closes the socket. It is trusted code only until the program runs: the program can replace it, write anything on the
socket, exit or crash; each is a wrong answer or a failure, never a verdict.

Standard library and :mod:`~genalign.rewards.sandbox.wire` only: in the sandbox, genalign is not importable, so
:func:`~genalign.rewards.sandbox.run_test_session` ships both files' source and runs
``python -I -S -B -c BOOTSTRAP WIRE PROTOCOL harness FDS`` (or ``... solution FD``), where the bootstrap registers
``WIRE`` as this module's ``genalign.rewards.sandbox.wire``.
"""

from __future__ import annotations

import builtins
import os
import sys
from typing import Any

from genalign.rewards.sandbox.wire import (
    Channel,
    ProtocolError,
    TooLong,
    Unencodable,
    dumps,
    from_data,
    loads,
    text_of,
    to_data,
)

#: what the solution server reads at most in one request (the harness's requests are trusted)
REQUEST_LIMIT = 1 << 30
#: statuses of one test, as in :data:`genalign.rewards.sandbox.SandboxStatus` plus ``fail`` (ran, wrong answer)
TEST_STATUSES = ("ok", "fail", "timeout", "memory", "crash", "output_limit")

_SIGXCPU = 24


class SolutionError(Exception):
    """An exception the program raised whose type is not a built-in exception class."""


# ----------------------------------------------------------------------------------------------------------------------
# the solution server (runs the program; untrusted once the program has run)
# ----------------------------------------------------------------------------------------------------------------------


#: the largest program constant copied to the tests (items of a container, characters of its JSON): a sieve of 10**7
#: flags must not slow down or overflow the load report
_MAX_CONSTANT_ITEMS, _MAX_CONSTANT_CHARS = 1000, 1 << 16


def _constant(value: Any) -> Any:
    """``value`` as plain data if it is small; raises :class:`Unencodable` otherwise."""
    if hasattr(value, "__len__") and len(value) > _MAX_CONSTANT_ITEMS and not isinstance(value, (str, bytes)):
        raise Unencodable("too many items to copy")
    data = to_data(value)
    if len(dumps(data)) > _MAX_CONSTANT_CHARS:
        raise Unencodable("too large to copy")
    return data


def _describe(namespace: dict[str, Any]) -> dict[str, list[Any]]:
    """What the harness may use of the program's top-level names: callables, modules (by name), small plain values."""
    names: dict[str, list[Any]] = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if type(value) is type(sys):
            names[name] = ["module", str(getattr(value, "__name__", ""))]
        elif callable(value):
            names[name] = ["callable"]
        else:
            try:
                names[name] = ["value", _constant(value)]
            except Exception:  # not plain data, or large: the tests do not get it
                continue
    return names


def _answer(namespace: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    number = request.get("id")
    try:
        function = namespace[request["call"]]
        value = function(*from_data(request["args"]), **from_data(request["kwargs"]))
        return {"id": number, "value": to_data(value)}
    except Unencodable as error:
        return {"id": number, "unencodable": text_of(error)}
    except BaseException as error:  # the program's exception (even SystemExit) is its answer
        return {"id": number, "raised": [type(error).__name__, text_of(error)]}


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # the program may have closed or replaced it
            continue


def solution_main(fd: int) -> None:
    """Wait for the harness's ``{"load": true}``, run ``main.py`` (the program), then answer the harness's calls on
    socket ``fd`` until it closes."""
    channel = Channel(fd, REQUEST_LIMIT)
    if channel.receive() != {"load": True}:  # the program runs only once the harness is protected (not dumpable)
        return
    namespace: dict[str, Any] = {"__name__": "__solution__", "__builtins__": builtins}
    try:
        with open("main.py", "rb") as handle:
            source = handle.read()
        exec(compile(source, "<solution>", "exec"), namespace)
    except BaseException as error:  # the program failed while loading: every test fails
        import traceback

        traceback.print_exc()
        _flush()
        channel.send({"loaded": False, "error": [type(error).__name__, text_of(error)]})
        return
    _flush()
    channel.send({"loaded": True, "names": _describe(namespace)})
    while (request := channel.receive()) is not None:
        answer = _answer(namespace, request)
        _flush()
        try:
            channel.send(answer)
        except (TypeError, ValueError) as error:  # cannot be written as JSON
            channel.send({"id": answer.get("id"), "unencodable": text_of(error)})


# ----------------------------------------------------------------------------------------------------------------------
# the harness (trusted: runs the dataset's tests, decides every verdict)
# ----------------------------------------------------------------------------------------------------------------------


class _Aborted(BaseException):
    """The solution's process ended, timed out or answered what cannot be read: the test fails whatever its code
    catches (a ``BaseException``, and remembered by :class:`_Solution`)."""

    def __init__(self, status: str, detail: str, ended: bool = False) -> None:
        super().__init__(detail)
        self.status, self.detail, self.ended = status, detail, ended


def _exception_class(name: Any) -> type[Exception]:
    """The built-in exception class named ``name`` (never StopIteration, which ends loops silently, nor a
    ``BaseException`` such as SystemExit); :class:`SolutionError` for any other name."""
    candidate = getattr(builtins, name, None) if isinstance(name, str) else None
    if (
        isinstance(candidate, type)
        and issubclass(candidate, Exception)
        and not issubclass(candidate, (StopIteration, StopAsyncIteration))
    ):
        return candidate
    return SolutionError


class _Solution:
    """The harness's side of one solution process: its names, and calls of its functions through socket ``fd``."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd = fd
        self.channel = Channel(fd, limit)
        self.aborted: _Aborted | None = None
        self.raised: list[BaseException] = []  # exceptions raised on the program's behalf (in the current test)
        self.calls = 0
        self.names: dict[str, Any] | None = None  # once loaded
        self.load_error: tuple[str, str] | None = None

    def _abort(self, status: str, detail: str, ended: bool = False) -> _Aborted:
        if self.aborted is None:
            self.aborted = _Aborted(status, detail, ended)
        return self.aborted

    def _receive(self, during: str) -> dict[str, Any]:
        try:
            message = self.channel.receive()
        except TooLong as error:
            raise self._abort("output_limit", f"{during}: {error}") from None
        except ProtocolError as error:
            raise self._abort("crash", f"{during}: {error}") from None
        if message is None:
            raise self._abort("crash", f"the program's process ended {during}", ended=True)
        return message

    def load(self) -> None:
        """Read the load report once (:func:`solution_main`): sets ``names`` or ``load_error``; raises
        :class:`_Aborted`."""
        if self.aborted is not None:
            raise self.aborted
        if self.names is not None or self.load_error is not None:
            return
        try:
            self.channel.send({"load": True})
        except OSError:
            raise self._abort("crash", "the program's process ended before loading", ended=True) from None
        message = self._receive("while loading")
        error = message.get("error")
        if message.get("loaded") is True and type(message.get("names")) is dict:
            self.names = message["names"]
        elif message.get("loaded") is False and type(error) is list and len(error) == 2:
            self.load_error = (str(error[0]), str(error[1]))
        else:
            raise self._abort("crash", f"not a load report: {str(message)[:80]}")

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.aborted is not None:
            raise self.aborted
        try:
            request = {"call": name, "args": to_data(list(args)), "kwargs": to_data(dict(kwargs))}
        except Unencodable as error:
            raise TypeError(f"{name}(): an argument cannot be sent to the program ({error})") from None
        self.calls += 1
        request["id"] = self.calls
        try:
            self.channel.send(request)
        except OSError:  # the socket is closed: the process ended
            raise self._abort("crash", f"the program's process ended before {name}() was called", ended=True) from None
        reply = self._receive(f"during {name}()")
        if reply.get("id") != self.calls:
            raise self._abort("crash", f"{name}(): an answer to another call: {str(reply)[:80]}")
        if "value" in reply:
            try:
                return from_data(reply["value"])
            except ProtocolError as error:
                raise self._abort("crash", f"{name}(): {error}") from None
        if "unencodable" in reply:
            detail = f"{name}() returned {str(reply['unencodable'])[:200]}, which cannot cross to the tests"
            raise self._abort("fail", detail + " (only plain data can: see genalign.rewards.sandbox.protocol)")
        raised = reply.get("raised")
        if type(raised) is list and len(raised) == 2:
            cls = _exception_class(raised[0])
            message = str(raised[1])
            try:
                error = cls(message) if cls is not SolutionError else cls(f"{raised[0]}: {message}")
            except Exception:  # a built-in class that needs other arguments
                error = SolutionError(f"{raised[0]}: {message}")
            self.raised.append(error)
            raise error
        raise self._abort("crash", f"{name}(): not an answer: {str(reply)[:80]}")

    def proxy(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, args, kwargs)

        call.__name__ = call.__qualname__ = name
        return call


#: standard-library modules whose import does something (runs .pth hooks, starts programs, prints, opens windows)
_LOUD_MODULES = {"site", "antigravity", "webbrowser", "this", "__hello__", "__phello__", "tkinter", "turtle"}
_LOUD_MODULES |= {"turtledemo", "idlelib", "pydoc", "test"}


def _stdlib_module(name: Any) -> Any:
    """The standard-library module ``name``, imported by the harness itself; None for any other name (and for
    :data:`_LOUD_MODULES`)."""
    stdlib = set(getattr(sys, "stdlib_module_names", ())) - _LOUD_MODULES  # Python >= 3.10; none before
    if not isinstance(name, str) or name.partition(".")[0] not in stdlib:
        return None
    try:
        import importlib

        return importlib.import_module(name)
    except Exception:
        return None


def _namespace(names: dict[str, Any], solution: _Solution, entry_point: str | None) -> dict[str, Any]:
    """The test code's globals: proxies, modules and values for the program's top-level names (module docstring)."""
    namespace: dict[str, Any] = {"__name__": "__tests__", "__builtins__": builtins}
    for name, description in names.items():
        if not name.isidentifier() or name.startswith("__") or type(description) is not list or not description:
            continue
        if name != entry_point and hasattr(builtins, name):
            continue  # the tests' len, sorted, AssertionError... stay the built-ins
        kind = description[0]
        if kind == "callable":
            namespace[name] = solution.proxy(name)
        elif kind == "module" and len(description) == 2:
            module = _stdlib_module(description[1])
            if module is not None:
                namespace[name] = module
        elif kind == "value" and len(description) == 2:
            try:
                namespace[name] = from_data(description[1])
            except ProtocolError:
                continue
    return namespace


def _judge(code: Any, solution: _Solution, entry_point: str | None) -> tuple[str, str]:
    """Run one test's code against the solution: ``(status, detail)``."""
    try:
        solution.load()
    except _Aborted as aborted:
        return aborted.status, aborted.detail
    if solution.load_error is not None:
        kind, message = solution.load_error
        return ("memory" if kind == "MemoryError" else "crash"), f"the program raised {kind} while loading: {message}"
    assert solution.names is not None
    namespace = _namespace(solution.names, solution, entry_point)
    solution.raised.clear()
    try:
        exec(code, namespace)
    except _Aborted:
        pass  # recorded in solution.aborted
    except AssertionError as error:
        if solution.aborted is None:
            return "fail", f"assertion failed: {text_of(error)}".rstrip(": ")
    except BaseException as error:  # the test's verdict, whatever it raised
        if solution.aborted is None:
            from_program = any(error is raised for raised in solution.raised)
            status = "memory" if from_program and isinstance(error, MemoryError) else "crash"
            return status, f"{type(error).__name__}: {text_of(error)}"
    if solution.aborted is not None:  # even when the test code caught it
        return solution.aborted.status, solution.aborted.detail
    return "ok", ""


def _not_dumpable() -> bool:
    """``PR_SET_DUMPABLE`` 0 for this process; True when ``PR_GET_DUMPABLE`` then reads 0."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        zero = ctypes.c_ulong(0)
        libc.prctl(4, zero, zero, zero, zero)
        return libc.prctl(3, zero, zero, zero, zero) == 0
    except Exception:
        return False


class _Harness:
    """The tests of a session, run in turn against the solution process that init gives for each."""

    def __init__(self, fds: dict[str, Any], spec: dict[str, Any]) -> None:
        self.fds, self.spec = fds, spec
        self.control = Channel(fds["from_init"], 1 << 20, write_fd=fds["to_init"])
        self.solution: _Solution | None = None
        self.channel = -1  # init's number of the solution process
        self.unloadable: str | None = None  # every later test's status once the program could not be loaded

    def _ask(self, request: dict[str, Any], answer: str) -> dict[str, Any]:
        self.control.send(request)
        reply = self.control.receive()
        if reply is None or answer not in reply:
            raise RuntimeError(f"init did not answer {request}: {reply}")
        return reply

    def _solution_for(self, channel: Any) -> _Solution:
        """The solution process init runs the test on: the current one, or a new one on socket ``channel``."""
        if self.solution is None or channel != self.channel:
            if type(channel) is not int or not 0 <= channel < len(self.fds["channels"]):
                raise RuntimeError(f"init named no socket: {channel!r}")
            if self.solution is not None:
                os.close(self.solution.fd)
            self.solution = _Solution(self.fds["channels"][channel], self.spec["reply_limit"])
            self.channel = channel
        return self.solution

    def test(self, index: int, source: str) -> tuple[str, str]:
        """Run test ``index``: ``(status, detail)``."""
        if self.unloadable is not None:
            return self.unloadable, ""
        try:
            code = compile(source, "<tests>", "exec")
        except (SyntaxError, ValueError) as error:
            return "crash", f"the test does not compile: {error}"
        solution = self._solution_for(self._ask({"start": index}, "started").get("channel"))
        status, detail = _judge(code, solution, self.spec.get("entry_point"))
        unusable = solution.aborted is not None or solution.names is None
        report = self._ask({"stop": index, "kill": unusable}, "ended")["ended"]
        ended_early = solution.aborted is not None and solution.aborted.ended
        if report.get("timed_out") or (ended_early and report.get("signal") == _SIGXCPU):
            status, detail = "timeout", f"past the time limit{'; ' + detail if detail else ''}"
        if not report.get("alive"):
            os.close(solution.fd)
            self.solution = None
        if solution.names is None:  # the program never loaded: neither would it for a later test
            self.unloadable = status
        return status, detail

    def run(self) -> None:
        verdicts = self.fds["verdict"]
        for index, source in enumerate(self.spec["tests"]):
            status, detail = self.test(index, source)
            if status != "ok" and detail:
                sys.stderr.write(f"[test {index}] {status}: {detail}\n")
                sys.stderr.flush()
            os.write(verdicts, (dumps({"test": index, "status": status}) + "\n").encode())


def harness_main(fds: dict[str, Any]) -> None:
    """Make this process not dumpable, then run every test of the spec on stdin and write one verdict per test."""
    private = _not_dumpable()  # first: before any solution process exists
    os.write(fds["verdict"], (dumps({"harness": {"private": private}}) + "\n").encode())
    _Harness(fds, loads(sys.stdin.buffer.read())).run()


if __name__ == "__main__":
    if sys.argv[1] == "harness":
        harness_main(loads(sys.argv[2].encode()))
    elif sys.argv[1] == "solution":
        solution_main(int(sys.argv[2]))
