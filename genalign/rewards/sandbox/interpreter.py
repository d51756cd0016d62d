"""The Python that runs sandboxed programs: :func:`default_interpreter`."""

from __future__ import annotations

import functools
import os
import shutil
import stat
import sys

from genalign.rewards.sandbox.child import SEARCH_PATH
from genalign.rewards.sandbox.result import SandboxError


def reachable_by_others(path: str) -> bool:
    """Whether a process with no privileges and no group in common can traverse to ``path`` and read/run it."""
    path = os.path.realpath(path)
    directory = os.path.dirname(path)
    while True:
        try:
            if not os.stat(directory).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        if directory == os.path.dirname(directory):
            break
        directory = os.path.dirname(directory)
    try:
        return bool(os.stat(path).st_mode & (stat.S_IROTH | stat.S_IXOTH))
    except OSError:
        return False


@functools.cache
def default_interpreter(*, drop_privileges: bool | None = None) -> str:
    """The Python that runs sandboxed programs: ``sys.executable``, or when the program will run as an unprivileged
    uid (caller root) and cannot reach it (e.g. a pyenv under ``/root``), the first ``python3`` on ``/usr/local/bin``,
    ``/usr/bin``, ``/bin`` that it can reach."""
    if drop_privileges is None:
        drop_privileges = os.geteuid() == 0
    if not drop_privileges:
        return sys.executable
    stdlib = os.path.dirname(os.__file__)
    if reachable_by_others(sys.executable) and reachable_by_others(stdlib):
        return sys.executable
    for name in ("python3", f"python{sys.version_info.major}.{sys.version_info.minor}"):
        found = shutil.which(name, path=SEARCH_PATH)
        if found and reachable_by_others(found):
            return found
    raise SandboxError(
        f"no Python interpreter reachable by an unprivileged uid: {sys.executable} (or its standard library "
        f"{stdlib}) sits in a directory others cannot enter, and there is no python3 on {SEARCH_PATH}; install one "
        "there or pass interpreter=<path to a python that every user can run>."
    )
