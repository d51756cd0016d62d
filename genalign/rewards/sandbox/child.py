"""The sandbox side of a run: this file, run as a script by :func:`genalign.rewards.sandbox.run_sandboxed`.

``python -I -S -B child.py CONFIG`` starts as the caller's user. It is the *runner*: it enters new namespaces where it
can and forks the sandbox's *init*, which sets up the filesystem, forks the program (limits set, privileges dropped,
then ``exec`` of the interpreter on ``main.py``), waits for it within the time limit and kills whatever it left.
Runner and init report on the status pipe (``config["status_fd"]``) as JSON lines: ``isolation``, ``started``,
``exit`` or ``error``.

Standard library only, and nothing imported from genalign: in isolated mode the script's directory is not on
``sys.path``, so this file must stand alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from typing import Any

#: the ``PATH`` of the runner and the program (and where :func:`~genalign.rewards.sandbox.default_interpreter` looks)
SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"

# Linux constants (sched.h, mount.h, prctl.h)
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_NOATIME, _MS_NODIRATIME, _MS_BIND, _MS_REC, _MS_PRIVATE, _MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
_MOUNT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC, "noatime": _MS_NOATIME}
_MOUNT_FLAGS |= {"nodiratime": _MS_NODIRATIME, "relatime": _MS_RELATIME}
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 1, 36, 38


# ----------------------------------------------------------------------------------------------------------------------
# system calls
# ----------------------------------------------------------------------------------------------------------------------


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _unshare(libc: Any, flags: int) -> bool:
    return libc.unshare(flags) == 0


def _mount(libc: Any, source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> bool:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    return libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) == 0


def _prctl(libc: Any, option: int, value: int) -> None:
    import ctypes

    libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def _emit(fd: int, event: str, **values: Any) -> None:
    os.write(fd, (json.dumps({"event": event, **values}) + "\n").encode())


# ----------------------------------------------------------------------------------------------------------------------
# filesystem (in init)
# ----------------------------------------------------------------------------------------------------------------------


def _mounts() -> list[tuple[str, list[str]]]:
    """``(mount point, per-mount options)`` for every mount of this mount namespace."""
    import re

    mounts = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), fields[4])
            mounts.append((point, fields[5].split(",")))
    return mounts


def _make_filesystem_readonly(libc: Any, scratch: str) -> bool:
    """Remount every mount read-only (keeping its other flags) except ``scratch``; True when every visible mount (the
    last one mounted on each path; those below it cannot be reached) ends up read-only."""
    for point, options in _mounts():
        if point == scratch or "ro" in options:
            continue
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        for option in options:
            flags |= _MOUNT_FLAGS.get(option, 0)
        _mount(libc, None, point, None, flags, None)
    visible = dict(_mounts())
    return all("ro" in options for point, options in visible.items() if point != scratch)


def _setup_filesystem(libc: Any, config: dict[str, Any], namespaces: dict[str, bool]) -> dict[str, bool]:
    """In init: a private tmpfs scratch directory, a private /proc, the program file, everything else read-only."""
    scratch, uid, limits = config["scratch"], config["uid"], config["limits"]
    done = {"private_scratch": False, "filesystem_readonly": False}
    separate = False
    if namespaces["mount"]:
        _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE, None)
        owner = uid if uid is not None else os.getuid()
        options = f"size={limits['scratch_mb']}m,nr_inodes=4096,mode=0700,uid={owner},gid={owner}"
        done["private_scratch"] = _mount(libc, "tmpfs", scratch, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
        separate = done["private_scratch"] or _mount(libc, scratch, scratch, None, _MS_BIND, None)
        if namespaces["pid"]:
            _mount(libc, "proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    with open(config["program"], "rb") as handle:
        source = handle.read()
    main = os.path.join(scratch, "main.py")
    with open(main, "wb") as handle:
        handle.write(source)
    if uid is not None:
        os.chown(main, uid, uid)
    if separate:
        done["filesystem_readonly"] = _make_filesystem_readonly(libc, scratch)
    return done


# ----------------------------------------------------------------------------------------------------------------------
# the program's process
# ----------------------------------------------------------------------------------------------------------------------


def _set_limits(limits: dict[str, Any], nproc: int) -> None:
    import resource

    mib = 1024 * 1024
    for name, value in (
        ("RLIMIT_CORE", 0),
        ("RLIMIT_AS", limits["memory_mb"] * mib),
        ("RLIMIT_FSIZE", limits["max_file_mb"] * mib),
        ("RLIMIT_NOFILE", limits["max_open_files"]),
        ("RLIMIT_NPROC", nproc),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
    cpu = limits["cpu_seconds"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU at the soft limit, SIGKILL one second later


def _tasks_of_uid(uid: int) -> int:
    """Processes plus threads running as ``uid`` (what RLIMIT_NPROC counts)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return count


def _exec_program(config: dict[str, Any], libc: Any, isolation: dict[str, Any], status_fd: int) -> None:
    """In the program's process: limits, privileges dropped, then exec the interpreter (never returns)."""
    try:
        os.setpgid(0, 0)
        limits = config["limits"]
        uid = isolation["uid"]
        if uid is not None:  # a private uid: only the program's processes count
            nproc = limits["max_processes"]
        elif isolation["user_namespace"]:  # counted per user namespace: the runner and init count too (measured)
            nproc = limits["max_processes"] + 2
        else:  # the caller's uid: all its processes count (this one, already counted, is the program's first)
            nproc = limits["max_processes"] + _tasks_of_uid(os.getuid()) - 1
        _set_limits(limits, nproc)
        os.chdir(config["scratch"])  # before dropping privileges: the uid cannot traverse the 0700 parent directory
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        _prctl(libc, _PR_SET_NO_NEW_PRIVS, 1)
        _prctl(libc, _PR_SET_PDEATHSIG, signal.SIGKILL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        os.close(status_fd)
        scratch = config["scratch"]
        env = {"PATH": SEARCH_PATH, "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}
        interpreter = config["interpreter"]
        os.execve(interpreter, [interpreter, "-I", "-S", "-B", "main.py"], env)
    except BaseException as error:  # report, then leave without running the program
        try:
            _emit(status_fd, "error", message=f"{type(error).__name__}: {error}")
        finally:
            os._exit(127)


# ----------------------------------------------------------------------------------------------------------------------
# init: sets the sandbox up, runs the program, cleans up
# ----------------------------------------------------------------------------------------------------------------------


def _measure_isolation(config: dict[str, Any], libc: Any, namespaces: dict[str, bool]) -> dict[str, Any]:
    """Set up the filesystem and report what the program will get (:class:`SandboxIsolation`'s fields)."""
    uid = config["uid"]
    isolation = {
        "network_isolated": False,
        "pid_namespace": namespaces["pid"],
        "user_namespace": namespaces["user"],
        "uid": uid,
        "process_limit": uid is not None or os.getuid() != 0,
    }
    if namespaces["net"]:
        import socket

        isolation["network_isolated"] = [name for _, name in socket.if_nameindex()] == ["lo"]
    isolation |= _setup_filesystem(libc, config, namespaces)
    return isolation


def _wait_for_program(program: int, deadline: float) -> tuple[tuple[int, Any] | None, bool, bool]:
    """Wait for the program until ``deadline`` or a SIGTERM (the parent's stop request; SIGCHLD and SIGTERM blocked).

    Returns ``((wait status, rusage) or None, timed out, stopped)``.
    """
    ended: tuple[int, Any] | None = None
    timed_out = stopped = False
    while ended is None:
        try:
            pid, status, usage = os.wait4(program, os.WNOHANG)
        except ChildProcessError:  # cannot happen: only this loop reaps the program
            break
        if pid == program:
            ended = (status, usage)
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        received = signal.sigtimedwait({signal.SIGCHLD, signal.SIGTERM}, remaining)
        if received is not None and received.si_signo == signal.SIGTERM:
            stopped = True
            break
    return ended, timed_out, stopped


def _kill_descendants(program: int) -> dict[int, tuple[int, Any]]:
    """Kill the program's process group and, as subreaper, every process re-parented to this one; reap them all.

    Returns ``{pid: (wait status, rusage)}`` of the reaped processes.
    """
    me = str(os.getpid())
    reaped: dict[int, tuple[int, Any]] = {}
    for _ in range(1000):
        with contextlib.suppress(OSError):
            os.killpg(program, signal.SIGKILL)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as handle:
                        parent = handle.read().rsplit(")", 1)[1].split()[1]
                    if parent == me:
                        os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    continue
        try:
            while True:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
                if pid == 0:
                    break
                reaped[pid] = (status, usage)
        except ChildProcessError:
            return reaped
        time.sleep(0.001)
    return reaped


def _exit_report(ended: tuple[int, Any] | None, timed_out: bool, stopped: bool) -> dict[str, Any]:
    """The ``exit`` event: how the program ended (exit code or signal, CPU time) and whether init stopped it."""
    result: dict[str, Any] = {"timed_out": timed_out, "stopped": stopped, "exit_code": None, "signal": None}
    if ended is not None:
        status, usage = ended
        if os.WIFSIGNALED(status):
            result["signal"] = os.WTERMSIG(status)
        else:
            result["exit_code"] = os.WEXITSTATUS(status)
        result["cpu_time_s"] = usage.ru_utime + usage.ru_stime
    return result


def _init_main(config: dict[str, Any], libc: Any, namespaces: dict[str, bool]) -> None:
    """The sandbox's init: set up the filesystem, start the program, wait for it (within the time limit), clean up."""
    status_fd = config["status_fd"]
    try:
        _prctl(libc, _PR_SET_PDEATHSIG, signal.SIGKILL)
        _prctl(libc, _PR_SET_CHILD_SUBREAPER, 1)
        isolation = _measure_isolation(config, libc, namespaces)
        _emit(status_fd, "isolation", **isolation)

        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, signal.SIGTERM})
        deadline = time.monotonic() + config["limits"]["timeout_s"]
        program = os.fork()
        if program == 0:
            _exec_program(config, libc, isolation, status_fd)
        _emit(status_fd, "started", pid=program, pgid=program)
        ended, timed_out, stopped = _wait_for_program(program, deadline)
        reaped = _kill_descendants(program)  # also reaps orphans re-parented to this subreaper
        _emit(status_fd, "exit", **_exit_report(ended or reaped.get(program), timed_out, stopped))
    except BaseException as error:
        _emit(status_fd, "error", message=f"{type(error).__name__}: {error}")
        os._exit(1)
    os._exit(0)


# ----------------------------------------------------------------------------------------------------------------------
# the runner: namespaces, then init
# ----------------------------------------------------------------------------------------------------------------------


def _enter_namespaces(libc: Any, use_namespaces: bool) -> dict[str, bool]:
    """Enter new namespaces where the kernel allows (as root, else through a user namespace); which ones it got."""
    root = os.geteuid() == 0
    namespaces = {"net": False, "mount": False, "pid": False, "user": False}
    everything = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC
    if not use_namespaces:
        pass
    elif root and _unshare(libc, everything):
        namespaces.update(net=True, mount=True, pid=True)
    elif root and _unshare(libc, _CLONE_NEWNET):
        namespaces["net"] = True
    else:
        uid, gid = os.getuid(), os.getgid()
        if _unshare(libc, _CLONE_NEWUSER | everything):
            namespaces.update(net=True, mount=True, pid=True, user=True)
        elif _unshare(libc, _CLONE_NEWUSER | _CLONE_NEWNET):
            namespaces.update(net=True, user=True)
        if namespaces["user"]:  # identity mapping: the program keeps the caller's uid and loses every capability
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as handle:
                    handle.write(text)
    return namespaces


def _runner_main(config: dict[str, Any]) -> None:
    """Enter new namespaces where possible, fork the sandbox's init, forward a stop request to it, wait."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    libc = _libc()
    namespaces = _enter_namespaces(libc, config["use_namespaces"])
    init = os.fork()
    if init == 0:
        _init_main(config, libc, namespaces)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(init, signal.SIGTERM))
    os.waitpid(init, 0)


if __name__ == "__main__":
    _runner_main(json.loads(sys.argv[1]))
