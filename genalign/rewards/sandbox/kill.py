"""Killing what a run left behind, from the parent: the runner's process group, every process of a private uid."""

from __future__ import annotations

import contextlib
import os
import signal
import time


def killpg(pgid: int | None) -> None:
    """SIGKILL the process group ``pgid`` (nothing for None or 0, or when it is already gone)."""
    if pgid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def kill_uid(uid: int) -> None:
    """SIGKILL every process running as ``uid`` (a private uid of this run), until none is left."""
    for _ in range(100):
        found = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    found = True
                    os.kill(int(entry), signal.SIGKILL)
            except OSError:
                continue
        if not found:
            return
        time.sleep(0.01)
