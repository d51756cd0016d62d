"""Python child processes for the tests, forked from an interpreter that has already imported torch, transformers
and genalign.

A test that starts ``python -m genalign.cli train ...`` pays ~5 CPU-seconds before the first line of genalign runs
(torch ~2 s, transformers and what it pulls in ~3 s); the suite starts well over a hundred such processes. Here one
*prepared interpreter* per pytest worker imports all of that once and forks a child per command. A child is a real
process: its own pid, its own exit status, killable by any signal (the kill / lock / signal tests need exactly
that), with the command's argv, environment, working folder and standard streams. What it shares with the prepared
interpreter is the already-imported modules, in the state an import leaves them (the prepared interpreter runs no
command itself), so registries, RNGs and torch settings start as in a fresh process.

:func:`run` and :func:`popen` take the arguments of :func:`subprocess.run` / :class:`subprocess.Popen` that the tests
use. A command is forked when it is ``[sys.executable, ("-u",) "-m" MODULE | "-c" CODE | SCRIPT.py, ...]``; anything
else (torchrun, interpreter flags, other programs) starts as a plain subprocess. ``GENALIGN_TEST_FRESH_PROCESSES=1``
starts every command as a plain subprocess (to check that a failure is not the prepared interpreter's).

Differences from a fresh interpreter, by design: ``sys.flags`` are the prepared interpreter's (``-u`` is honoured by
unbuffered streams); an environment variable read at *import* time by an already-imported module keeps the prepared
interpreter's value (genalign reads its variables when used; ``HF_HUB_OFFLINE`` and ``OMP_NUM_THREADS`` are set as the
suite sets them, and the child's ``OMP_NUM_THREADS`` sets torch's thread count).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FRESH_ENV = "GENALIGN_TEST_FRESH_PROCESSES"

#: imported once by the prepared interpreter: what a training, sampling or export command of the suite imports
PRELOAD = (
    "torch", "numpy", "yaml", "safetensors.torch", "transformers", "transformers.models.llama.modeling_llama",
    "transformers.models.qwen2.modeling_qwen2", "tokenizers", "genalign", "genalign.cli", "genalign.trainer.recipe",
    "genalign.policies.lm", "genalign.policies.lm.causal", "genalign.sample_command", "genalign.export",
    "genalign.rewards", "genalign.environments",
)  # fmt: skip

_MAX_FDS = 3


# ---------------------------------------------------------------------------------------------------------------
# the prepared interpreter


def _serve(socket_path: str) -> None:
    """Import :data:`PRELOAD`, then fork one child per request on ``socket_path`` until standard input closes."""
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    import torch

    threads = torch.get_num_threads()
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a child that is interrupted before it runs its command just dies
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, its client's connection)
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ, "request")
        selector.register(sys.stdin, selectors.EVENT_READ, "parent")
        while True:
            for key, _ in selector.select():
                if key.data == "parent":  # the test process is gone (or done): so is this one
                    if not sys.stdin.buffer.read1(1 << 12):
                        return
                elif key.data == "request":
                    connection, _ = listener.accept()
                    try:
                        request, fds = _receive(connection)
                    except (OSError, ValueError, struct.error):  # the client went away mid-request
                        connection.close()
                        continue
                    pid = os.fork()
                    if pid == 0:
                        for pidfd, (_, other) in children.items():
                            os.close(pidfd)
                            other.close()
                        selector.close()
                        listener.close()
                        _child(request, fds, connection, threads)  # never returns
                    for fd in fds:
                        os.close(fd)
                    pidfd = os.pidfd_open(pid)
                    children[pidfd] = (pid, connection)
                    selector.register(pidfd, selectors.EVENT_READ, "child")
                    with contextlib.suppress(OSError):  # a client that went away still gets its child reaped
                        connection.sendall(f"pid {pid}\n".encode())
                else:  # a child ended: its status to its client
                    pidfd = key.fd
                    selector.unregister(pidfd)
                    pid, connection = children.pop(pidfd)
                    os.close(pidfd)
                    _, status = os.waitpid(pid, 0)
                    with contextlib.suppress(OSError):  # the client may have stopped listening
                        connection.sendall(f"status {os.waitstatus_to_exitcode(status)}\n".encode())
                    connection.close()


def _receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """A request: a length-prefixed JSON body with the child's standard streams passed as file descriptors."""
    header, fds, _, _ = socket.recv_fds(connection, 4, _MAX_FDS)
    (size,) = struct.unpack("!I", header)
    body = b""
    while len(body) < size:
        body += connection.recv(size - len(body))
    return json.loads(body), list(fds)


def _child(request: dict[str, Any], fds: list[int], connection: socket.socket, threads: int) -> None:
    """Become the requested command: streams, folder, environment, ``sys.path`` and ``argv``, then run it as
    ``__main__`` and exit as an interpreter would (threads joined, ``atexit`` run, streams flushed)."""
    connection.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    unbuffered = request["unbuffered"] or bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = _stream(1, unbuffered, line_buffering=False)
    sys.stderr = _stream(2, True, line_buffering=True)
    kind, target, arguments = request["kind"], request["target"], request["arguments"]
    first = {"-m": os.getcwd(), "-c": "", "script": os.path.dirname(os.path.realpath(target))}[kind]
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    served = set(request["server_path"][:1] + request["server_pythonpath"])
    sys.path[:] = [first, *inherited, *(p for p in sys.path if p not in served)]
    sys.argv = [{"-m": target, "-c": "-c", "script": target}[kind], *arguments]

    import random

    import numpy as np
    import torch

    random.seed()
    np.random.seed()
    if request["fork_descendants"]:
        _Server.forked_from(request)
        subprocess.Popen = _popen_class()
    threads_wanted = os.environ.get("OMP_NUM_THREADS", "")
    torch.set_num_threads(int(threads_wanted) if threads_wanted.isdigit() and int(threads_wanted) > 0 else threads)
    code = 0
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        import runpy

        if kind == "-m":
            sys.modules.pop(target, None)  # runs as ``__main__``; an import of it makes a second copy, as in Python
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif kind == "-c":  # as ``python -c``: the code runs in the ``__main__`` module's namespace
            import types

            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = __builtins__
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:  # as an interpreter does: die by the signal
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    _finish()
    os._exit(code & 0xFF)


def _stream(fd: int, unbuffered: bool, line_buffering: bool) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    binary = raw if unbuffered else io.BufferedWriter(raw)
    return io.TextIOWrapper(binary, encoding="utf-8", errors="backslashreplace" if fd == 2 else "strict",
                            line_buffering=line_buffering, write_through=unbuffered)  # fmt: skip


def _finish() -> None:
    threading._shutdown()  # the interpreter's own exit: wait for non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


# ---------------------------------------------------------------------------------------------------------------
# the test side


class _Server:
    """The prepared interpreter of this test process, started on first use (in a child that forks its own children,
    :func:`_child` points it at the interpreter the child was forked from)."""

    _instance: _Server | None = None

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="prepared-python-")
        self.path = os.path.join(self.folder, "socket")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
        self.pythonpath = env["PYTHONPATH"].split(os.pathsep)
        self.process = subprocess.Popen([sys.executable, __file__, "--serve", self.path], cwd=ROOT, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        line = self.process.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"the prepared interpreter did not start (exit {self.process.wait()})")
        self.server_path = [str(Path(__file__).resolve().parent)]
        atexit.register(self.close)

    @classmethod
    def get(cls) -> _Server:
        if cls._instance is None or (cls._instance.process is not None and cls._instance.process.poll() is not None):
            cls._instance = cls()
        return cls._instance

    @classmethod
    def forked_from(cls, request: dict[str, Any]) -> None:
        """In a child: its own children come from the interpreter it was forked from."""
        server = cls.__new__(cls)
        server.path, server.process = request["socket"], None
        server.server_path, server.pythonpath = request["server_path"], request["server_pythonpath"]
        cls._instance = server

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


class ForkedProcess:
    """The :class:`subprocess.Popen` surface the tests use, for a child of the prepared interpreter."""

    def __init__(self, request: dict[str, Any], stdin, stdout, stderr, text: bool) -> None:
        server = _Server.get()
        request = {**request, "server_path": server.server_path, "server_pythonpath": server.pythonpath,
                   "socket": server.path}  # fmt: skip
        self.args = request["argv"]
        self.returncode: int | None = None
        self.stdout = self.stderr = self.stdin = None
        passed, mine = [], []
        child_in = os.open(os.devnull, os.O_RDONLY) if stdin in (None, subprocess.DEVNULL) else _fd_of(stdin)
        passed.append(child_in)
        out_write = self._output(stdout, 1, text, "stdout", mine)
        err_write = out_write if stderr == subprocess.STDOUT else self._output(stderr, 2, text, "stderr", mine)
        passed += [out_write, err_write]
        self._connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._connection.connect(server.path)
        body = json.dumps(request).encode()
        socket.send_fds(self._connection, [struct.pack("!I", len(body))], passed)
        self._connection.sendall(body)
        for fd in mine:
            os.close(fd)
        if stdin in (None, subprocess.DEVNULL):
            os.close(child_in)
        self._lines = self._connection.makefile("r")
        reply = self._lines.readline().split()
        if reply[:1] != ["pid"]:
            raise RuntimeError(f"the prepared interpreter did not start {self.args!r}")
        self.pid = int(reply[1])

    def _output(self, target, fd: int, text: bool, name: str, mine: list[int]) -> int:
        if target == subprocess.PIPE:
            read, write = os.pipe()
            setattr(self, name, open(read, "r" if text else "rb"))  # noqa: SIM115 (closed by communicate / the user)
            mine.append(write)
            return write
        if target == subprocess.DEVNULL:
            write = os.open(os.devnull, os.O_WRONLY)
            mine.append(write)
            return write
        return fd if target is None else _fd_of(target)

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _, _ = _select_readable(self._connection, 0)
            if ready:
                self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ready, _, _ = _select_readable(self._connection, timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read_status()
        return self.returncode

    def _read_status(self) -> None:
        reply = self._lines.readline().split()
        if reply[:1] != ["status"]:
            raise RuntimeError(f"the prepared interpreter lost {self.args!r} (pid {self.pid})")
        self.returncode = int(reply[1])
        self._lines.close()
        self._connection.close()

    def communicate(self, input=None, timeout: float | None = None) -> tuple[Any, Any]:
        """Read both pipes to their end (a thread each, as :mod:`subprocess` does), then wait for the status."""
        if input is not None:
            raise NotImplementedError("the forked children of the tests take no input")
        results: dict[str, Any] = {}

        def drain(name: str) -> None:
            stream = getattr(self, name)
            results[name] = stream.read()
            stream.close()

        readers = [threading.Thread(target=drain, args=(name,), daemon=True)
                   for name in ("stdout", "stderr") if getattr(self, name) is not None]  # fmt: skip
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return results.get("stdout"), results.get("stderr")

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def _select_readable(sock: socket.socket, timeout: float | None):
    import select

    return select.select([sock], [], [], timeout)


def _fd_of(target) -> int:
    return target if isinstance(target, int) else target.fileno()


def _request(argv: list[str], cwd, env, fork_descendants: bool = False) -> dict[str, Any] | None:
    """The fork request for ``argv``, or None when it must start as a plain subprocess."""
    if os.environ.get(FRESH_ENV, "0") not in ("", "0") or not argv or str(argv[0]) != sys.executable:
        return None
    rest = [str(a) for a in argv[1:]]
    unbuffered = rest[:1] == ["-u"]
    rest = rest[1:] if unbuffered else rest
    if len(rest) >= 2 and rest[0] in ("-m", "-c"):
        kind, target, arguments = rest[0], rest[1], rest[2:]
    elif rest and not rest[0].startswith("-") and rest[0].endswith(".py"):
        kind, target, arguments = "script", os.path.abspath(os.path.join(cwd or os.getcwd(), rest[0])), rest[1:]
    else:
        return None
    return {"argv": [str(a) for a in argv], "kind": kind, "target": target, "arguments": arguments,
            "unbuffered": unbuffered, "cwd": str(cwd or os.getcwd()), "fork_descendants": fork_descendants,
            "env": dict(os.environ if env is None else env)}  # fmt: skip


def popen(argv: list, *, cwd=None, env=None, stdin=None, stdout=None, stderr=None, text: bool = False,
          fork_descendants: bool = False):  # fmt: skip
    """:class:`subprocess.Popen` for the tests: forked from the prepared interpreter when ``argv`` runs Python.
    ``fork_descendants``: the Python commands that the child itself starts through :mod:`subprocess` are forked
    too (a benchmark script that starts training runs)."""
    request = _request(list(argv), cwd, env, fork_descendants)
    if request is None:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, text=text)
    return ForkedProcess(request, stdin, stdout, stderr, text)


def _popen_class():
    """``subprocess.Popen`` for a child with ``fork_descendants``: Python commands started with only the arguments
    :func:`popen` knows are forked, anything else is started as before."""
    real = subprocess.Popen
    known = {"cwd", "env", "stdin", "stdout", "stderr", "text", "universal_newlines"}

    def routed(args, **kwargs):
        if isinstance(args, list | tuple) and set(kwargs) <= known:
            text = bool(kwargs.pop("text", False) or kwargs.pop("universal_newlines", False))
            request = _request(list(args), kwargs.get("cwd"), kwargs.get("env"))
            if request is not None:
                return ForkedProcess(request, kwargs.get("stdin"), kwargs.get("stdout"), kwargs.get("stderr"), text)
            kwargs["text"] = text
        return real(args, **kwargs)

    return routed


#: ``python -m torch.distributed.run --standalone --nproc_per_node N COMMAND...``, as the tests write it
_TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node")


def _ranks(argv: list) -> tuple[int, list[str]] | None:
    """``(N, [sys.executable, *COMMAND])`` for a torchrun command line of the tests, else None."""
    rest = [str(a) for a in argv[1:]]
    if str(argv[0]) != sys.executable or tuple(rest[:4]) != _TORCHRUN or len(rest) < 6 or not rest[4].isdigit():
        return None
    return int(rest[4]), [sys.executable, *rest[5:]]


def _run_ranks(processes: int, argv: list[str], cwd, env, timeout: float | None) -> subprocess.CompletedProcess:
    """What ``torchrun --standalone`` does for the tests, with forked workers: each rank a child with torch
    elastic's environment (rank 0 hosts the rendezvous store on a free port); when a rank fails, the others are
    stopped (SIGTERM, then SIGKILL after 10 s), as torchrun's agent does. Output: rank by rank."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = dict(os.environ if env is None else env)
    workers = []
    for rank in range(processes):
        ranked = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
                  "WORLD_SIZE": str(processes), "LOCAL_WORLD_SIZE": str(processes), "ROLE_WORLD_SIZE": str(processes),
                  "GROUP_WORLD_SIZE": "1", "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                  "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": "none",
                  "OMP_NUM_THREADS": base.get("OMP_NUM_THREADS", "1")}  # fmt: skip
        workers.append(popen(argv, cwd=cwd, env=ranked, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs: dict[int, tuple[str, str]] = {}

    def drain(index: int) -> None:
        outputs[index] = workers[index].communicate()

    readers = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(processes)]
    for reader in readers:
        reader.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    stop_at = None
    while any(reader.is_alive() for reader in readers):
        now = time.monotonic()
        if deadline is not None and now > deadline:
            for worker in workers:
                worker.kill()
            raise subprocess.TimeoutExpired(argv, timeout)
        failed = any(w.returncode not in (None, 0) for w in workers)
        if failed and stop_at is None:
            stop_at = now + 10
            for worker in workers:
                worker.terminate()
        elif stop_at is not None and now > stop_at:
            for worker in workers:
                worker.kill()
        time.sleep(0.05)
    codes = [w.returncode for w in workers]
    code = next((c for c in codes if c != 0), 0)
    stdout = "".join(outputs[i][0] for i in range(processes))
    stderr = "".join(outputs[i][1] for i in range(processes))
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


def run(argv: list, *, cwd=None, env=None, capture_output: bool = False, text: bool = False,
        timeout: float | None = None, check: bool = False, stdout=None, stderr=None,
        fork_descendants: bool = False) -> subprocess.CompletedProcess:  # fmt: skip
    """:func:`subprocess.run` for the tests: forked from the prepared interpreter when ``argv`` runs Python, and
    torchrun's workers forked as ranks (:func:`_run_ranks`)."""
    ranks = None if os.environ.get(FRESH_ENV, "0") not in ("", "0") else _ranks(list(argv))
    if ranks is not None and capture_output and text:
        return _check(_run_ranks(*ranks, cwd, env, timeout), check)
    if capture_output:
        stdout = stderr = subprocess.PIPE
    process = popen(argv, cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=text, fork_descendants=fork_descendants)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    return _check(subprocess.CompletedProcess(argv, process.returncode, out, err), check)


def _check(completed: subprocess.CompletedProcess, check: bool) -> subprocess.CompletedProcess:
    if check:
        completed.check_returncode()
    return completed


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2])
