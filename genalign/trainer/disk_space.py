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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

#: errors that mean "the disk cannot take more": no space, quota exceeded, read-only file system
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


class StorageError(RuntimeError):
    """The run directory's disk is full or read-only; the message says what failed, what a checkpoint needs, which
    checkpoints are intact and how to continue."""

    exit_code = 74  # sysexits.h EX_IOERR: an error while doing I/O on a file


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


def describe_disk_error(err: OSError, output_dir: str | Path, doing: str) -> StorageError:
    """The :class:`StorageError` for ``err`` raised while ``doing`` (e.g. 'step 12: writing checkpoint step-12')."""
    from genalign.trainer.checkpoint import checkpoint_size, list_checkpoints, verify_checkpoint

    out = Path(output_dir)
    where = f" ({err.filename})" if err.filename else ""
    if err.errno == errno.EROFS:
        problem, fix = "the file system is read-only", "remount it read-write or point run.output_dir elsewhere"
    else:
        problem = "disk quota exceeded" if err.errno == errno.EDQUOT else "no space left on device"
        fix = "free space (or lower run.keep_last, or move the run to a larger disk)"
    complete = list_checkpoints(out)
    # A full disk can cut files short, not change their bytes: the sizes against the manifest are the check (no hash).
    intact = [p.name for p in complete if verify_checkpoint(p, hashes=False) is None]
    if complete and err.errno != errno.EROFS:
        need = (f" A checkpoint of this run needs about {human_bytes(checkpoint_size(complete[-1]))} (the size of "
                f"{complete[-1].name}); {human_bytes(free_bytes(out))} are free.")  # fmt: skip
    else:
        need = ""
    saved = f"Intact checkpoints: {', '.join(intact)} (newest {intact[-1]})." if intact else "No checkpoint is intact."
    return StorageError(
        f"{doing} failed: {problem}{where}.{need} {saved} {fix[0].upper()}{fix[1:]}, then continue with "
        "run.resume=latest (the start removes this run's leftovers before it writes anything)."
    )


@contextmanager
def explained_disk_errors(output_dir: str | Path) -> Iterator[None]:
    """Turn a disk error escaping the block into a :class:`StorageError` (naming the file it could not write)."""
    try:
        yield
    except OSError as err:
        if not is_disk_error(err):
            raise
        raise describe_disk_error(err, output_dir, f"writing {err.filename or 'to ' + str(output_dir)}") from err


class HeldBack:
    """Catches a disk error in ``with`` blocks and keeps it (``error``) until every process has agreed to stop."""

    def __init__(self) -> None:
        self.error: OSError | None = None

    def __enter__(self) -> HeldBack:
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: TracebackType | None) -> bool:
        if error is not None and is_disk_error(error):
            self.error = error  # type: ignore[assignment]
            return True
        return False

    def raise_for(self, output_dir: str | Path, step: int) -> None:
        """Raise the :class:`StorageError` of the held error (or, on a process without one, of the main process's)."""
        if self.error is not None:
            raise describe_disk_error(self.error, output_dir, f"step {step}: writing {self.error.filename or 'logs'}")
        raise StorageError(f"step {step}: the main process could not write to {output_dir} (disk full or read-only)")


__all__ = [
    "DISK_ERRNOS",
    "HeldBack",
    "StorageError",
    "describe_disk_error",
    "explained_disk_errors",
    "free_bytes",
    "human_bytes",
    "is_disk_error",
]
