"""Disk errors of a run explained: what failed, what a checkpoint needs, which checkpoints are intact
(:func:`describe_disk_error`), for every process alike (:class:`HeldBack`)."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from genalign.trainer.checkpoint import checkpoint_size, list_checkpoints, verify_checkpoint
from genalign.trainer.disk_space import StorageError, free_bytes, human_bytes, is_disk_error


def describe_disk_error(err: OSError, output_dir: str | Path, doing: str) -> StorageError:
    """The :class:`StorageError` for ``err`` raised while ``doing`` (e.g. 'step 12: writing checkpoint step-12')."""
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


__all__ = ["HeldBack", "describe_disk_error", "explained_disk_errors"]
