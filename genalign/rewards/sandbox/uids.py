"""Private uids (caller root only): each concurrent run's program gets an unprivileged uid of its own, so that
``RLIMIT_NPROC`` holds (the kernel does not apply it to root) and file permissions protect the caller's files."""

from __future__ import annotations

import os
import threading

#: first uid of the private uids: base + (pid % 100_000) * 64 + slot stays below 2**31
_UID_BASE = 1_900_000_000
_UID_SLOTS = 64
#: the shared fallback uid where the private range is not mapped (never swept: other processes may use it)
NOBODY = 65534

_UID_LOCK = threading.Lock()
_UIDS_IN_USE: set[int] = set()


def _uid_mapped(uid: int) -> bool:
    """Whether ``uid`` exists in this user namespace (``/proc/self/uid_map``); a rootless container maps few uids."""
    try:
        with open("/proc/self/uid_map") as handle:
            ranges = [tuple(int(v) for v in line.split()) for line in handle if line.strip()]
    except OSError:
        return True
    return any(inside <= uid < inside + count for inside, _, count in ranges)


def acquire_uid() -> int:
    """A private uid for one run (root only): unique among this process's concurrent runs; ``nobody`` (shared by
    concurrent runs, and so is its process limit) where the user namespace does not map the private range."""
    with _UID_LOCK:
        first = _UID_BASE + (os.getpid() % 100_000) * _UID_SLOTS
        if not _uid_mapped(first + _UID_SLOTS - 1):
            return NOBODY
        for slot in range(_UID_SLOTS):
            if first + slot not in _UIDS_IN_USE:
                _UIDS_IN_USE.add(first + slot)
                return first + slot
        return first  # more than 64 concurrent runs in one process: they share a uid (and its process limit)


def release_uid(uid: int) -> None:
    with _UID_LOCK:
        _UIDS_IN_USE.discard(uid)
