"""One writer per run directory: an OS lock held for the whole run, and the writer identity of temporary folders.

The lock is ``fcntl.flock`` on ``.<name>.lock`` *beside* the run directory (``runs/.demo.lock`` for ``runs/demo``), one
path whether or not the directory exists yet. A fresh start takes it before it checks whether the folder holds a run,
so "check, then write" is no longer a race between two starts, and ``run.overwrite`` can move the folder aside under
the lock (a lock file inside the folder would move with it). The path is resolved first, so two spellings of one
folder (a symlink, ``..``) share one lock. The kernel releases the lock when the process ends, however it ends, so a
lock left by a killed process never blocks; the PID, host and start time written into the file after locking only
name the holder in the refusal. A clean release deletes the file (under the lock; a process that opened the old file
meanwhile notices that its file is no longer the one at the path and tries again).

In a run of several processes, the main process (rank 0) holds the lock; the others never touch it.

A checkpoint being written lives in ``checkpoints/.tmp-step-N.<host>-<pid>`` (:func:`writer_id`): a start removes
the temporary folders of dead writers and never those of another live process on this host.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from genalign.errors import UserError


class RunLockedError(UserError, RuntimeError):
    """Another trainer holds the run directory; the message names it (PID, host) and what to do (CLI exit code 2)."""


def host_name() -> str:
    """This machine's name, reduced to characters that are safe in a file name."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


def writer_id() -> str:
    """``<host>-<pid>`` of this process: the suffix of the temporary folders it writes."""
    return f"{host_name()}-{os.getpid()}"


_WRITER = re.compile(r"\.(?P<host>[A-Za-z0-9._]+)-(?P<pid>\d+)$")


def writer_of(name: str) -> tuple[str, int] | None:
    """``(host, pid)`` of a temporary folder named ``...<.host-pid>`` (None for names without one: older versions)."""
    match = _WRITER.search(name)
    return (match["host"], int(match["pid"])) if match else None


def writer_alive(writer: tuple[str, int]) -> bool:
    """Whether the writer is another live process of this host (a writer on another host cannot be checked: the run
    lock says it is not writing)."""
    host, pid = writer
    if host != host_name() or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def lock_path(output_dir: str | Path) -> Path:
    """``.<name>.lock`` beside the resolved run directory."""
    resolved = Path(output_dir).expanduser().resolve()
    return resolved.with_name(f".{resolved.name}.lock")


class RunLock:
    """An exclusive ``flock`` on the lock file of a run directory (module docstring)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd, self.recorded = path, fd, False

    @classmethod
    def acquire(cls, output_dir: str | Path) -> RunLock | None:
        """Take the lock of ``output_dir``, or raise :class:`RunLockedError` naming the holder. Returns None (with a
        warning) on a file system without ``flock`` support: the run works, but a second trainer is not detected."""
        path = lock_path(output_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except OSError as err:
                if err.errno == errno.ELOOP:
                    raise RunLockedError(f"{path} (the lock file of run.output_dir={str(output_dir)!r}) is a "
                                         "symbolic link; remove it (it is no lock genalign wrote).") from None  # fmt: skip
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunLockedError(_refusal(output_dir, path, holder)) from None
            except OSError as err:  # ENOLCK, EOPNOTSUPP, ENOSYS: a file system without flock (e.g. Lustre -o noflock)
                os.close(fd)
                print(f"warning: cannot lock {path} ({err.strerror}): a second trainer on run.output_dir="
                      f"{str(output_dir)!r} would not be detected", flush=True)  # fmt: skip
                return None
            if _still_at(fd, path):
                break
            os.close(fd)  # the holder released (and deleted) the file between our open and our lock: try again
        lock = cls(path, fd)
        lock.record()
        return lock

    def record(self) -> bool:
        """Write this process's PID, host and start time into the lock file (for the refusal of another trainer);
        on a full disk the lock holds without them until a later call finds room. Returns whether they are written."""
        if self.recorded or self.fd is None:
            return self.recorded
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "output_dir": str(self.path.with_name(self.path.name[1 : -len(".lock")]))}  # fmt: skip
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps(holder).encode(), 0)
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            return False
        self.recorded = True
        return True

    def release(self) -> None:
        """Delete the lock file, then unlock (closing the file unlocks it)."""
        if self.fd is None:
            return
        try:
            if _still_at(self.fd, self.path):
                self.path.unlink()
        finally:
            os.close(self.fd)
            self.fd = None


def _still_at(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is the file at ``path`` now (not deleted or replaced since it was opened)."""
    try:
        current = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (opened.st_dev, opened.st_ino) == (current.st_dev, current.st_ino)


def _read_holder(fd: int) -> dict | None:
    """What the holder wrote into the lock file; it writes right after locking, so wait up to 2 s for it."""
    for _ in range(200):
        try:
            holder = json.loads(os.pread(fd, 4096, 0) or b"null")
        except (OSError, ValueError):
            holder = None
        if isinstance(holder, dict):
            return holder
        time.sleep(0.01)
    return None


def _refusal(output_dir: str | Path, path: Path, holder: dict | None) -> str:
    who = (f"PID {holder.get('pid')} on host {holder.get('host')} (since {holder.get('since')})" if holder
           else "a process that has not written its PID yet")  # fmt: skip
    return (
        f"run.output_dir={str(output_dir)!r} is in use by another trainer: {who}; lock {path}. A run directory has "
        "one writer at a time. Wait for that trainer to end or stop it (SIGTERM or Ctrl-C saves a checkpoint), then "
        "continue with run.resume=latest; or give another run.output_dir."
    )


_HELD: dict[Path, RunLock | None] = {}


def hold_run_directory(output_dir: str | Path) -> None:
    """Take the lock of ``output_dir`` for this process until :func:`release_run_directory` (or the process's end);
    raise :class:`RunLockedError` when another trainer holds it."""
    path = lock_path(output_dir)
    if path in _HELD:
        raise RunLockedError(
            f"run.output_dir={str(output_dir)!r} is already being trained by this process (PID {os.getpid()}); one "
            "trainer per run directory."
        )
    _HELD[path] = RunLock.acquire(output_dir)


def record_holder(output_dir: str | Path) -> None:
    """Write the holder's PID and host into the lock file if a full disk kept :meth:`RunLock.acquire` from it."""
    lock = _HELD.get(lock_path(output_dir))
    if lock is not None:
        lock.record()


def release_run_directory(output_dir: str | Path) -> None:
    """Release the lock taken by :func:`hold_run_directory` (a no-op when this process does not hold it)."""
    lock = _HELD.pop(lock_path(output_dir), None)
    if lock is not None:
        lock.release()


@contextmanager
def released_at_exit(output_dir: str | Path) -> Iterator[None]:
    """Release at the end of the block the lock that :func:`hold_run_directory` took inside it (however it ends)."""
    try:
        yield
    finally:
        release_run_directory(output_dir)


__all__ = [
    "RunLock",
    "RunLockedError",
    "hold_run_directory",
    "lock_path",
    "record_holder",
    "release_run_directory",
    "released_at_exit",
    "writer_alive",
    "writer_id",
    "writer_of",
]
