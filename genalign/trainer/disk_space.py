"""A full or read-only disk, said once and clearly: what failed, how much room a checkpoint needs (the size of the last
complete one), how much is free and which checkpoints are intact; the run stops with exit code 74 and continues with
``run.resume=latest`` once there is room (the next start removes this run's leftovers before it writes anything).

Every process of a run takes the same decision: an error of the main process while it writes the logs is held back
(:class:`HeldBack`) until the step's agreement (:func:`genalign.trainer.shutdown.agree_to_stop`), a failed checkpoint
is agreed inside :func:`genalign.trainer.checkpoint.save_checkpoint`.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from genalign.errors import UserError

#: errors that mean "the disk cannot take more": no space, quota exceeded, read-only file system
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


class StorageError(UserError, RuntimeError):
    """The run directory's disk is full or read-only; the message says what failed, what a checkpoint needs, which
    checkpoints are intact and how to continue (CLI exit code 2)."""


def is_disk_error(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in DISK_ERRNOS


def human_bytes(count: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def free_bytes(path: Path) -> int:
    """Free space of the file system that holds ``path`` (or its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


__all__ = [
    "DISK_ERRNOS",
    "StorageError",
    "free_bytes",
    "human_bytes",
    "is_disk_error",
]
