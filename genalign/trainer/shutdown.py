"""Graceful shutdown: SIGTERM (what Slurm, Kubernetes and spot instances send before they kill) and SIGINT (Ctrl-C)
end the run at the end of the current step, with a checkpoint of that step, flushed logs and trackers and one line.

* The first signal is recorded (the handler does nothing else; a signal during start-up counts at the end of the
  first step). After every step, all processes sum their flags in the one collective the step already had for
  ``run.max_time_minutes`` (:func:`agree_to_stop`), so every rank stops after the same step and writes its part of
  the same checkpoint.
* A second signal stops the process at once, without saving: after the first, both signals are back to the
  system's default action, which ends the process even in the middle of a long native call.
* Handlers are installed only from the main thread (elsewhere signals are left alone) and the previous ones are put
  back when :func:`genalign.trainer.train` returns or raises, so scripts and tests keep theirs.

Exit codes of ``genalign train`` (also in README.md):

====  ===============================================================================================================
0     finished
2     a failure the user can fix, one paragraph (:class:`genalign.errors.UserError`): an invalid config or argument,
      the run directory held by another trainer (:class:`~genalign.trainer.run_lock.RunLockedError`), a full or
      read-only disk (:class:`~genalign.trainer.disk_space.StorageError`), ...
75    stopped by SIGTERM / SIGINT after saving a checkpoint (:class:`TrainingInterrupted`): resume with
      ``run.resume=latest``
143   (130) killed by a second SIGTERM (SIGINT), nothing saved at that step: the shell's 128 + signal number
====  ===============================================================================================================

75 is sysexits.h's EX_TEMPFAIL ("a temporary failure; the invoker is invited to retry"), which is what a preempted run
is: the job can be requeued as is. It differs from 143/130, which a shell reports for a process the signal killed, so
a wrapper can tell "stopped cleanly, checkpoint written" from "killed, up to run.save_every steps lost" (and a
Kubernetes ``podFailurePolicy`` can match it).
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch

from genalign.trainer.distributed import all_reduce_sum

#: the signals that stop a run gracefully, in the order of the agreement's flags
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TrainingInterrupted(RuntimeError):
    """The run stopped on SIGTERM / SIGINT after its checkpoint; the message says where and how to resume."""

    exit_code = 75  # sysexits.h EX_TEMPFAIL: try again later (module docstring)

    def __init__(self, message: str, *, signal_name: str, step: int, checkpoint: Path | None) -> None:
        super().__init__(message)
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint


#: the errors that end ``genalign train`` early on purpose, each with its ``exit_code``
STOP_ERRORS = (TrainingInterrupted,)


class StopSignals:
    """Context manager: records the first SIGTERM / SIGINT (``received``), lets a second one end the process, and
    restores the previous handlers on exit."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self.previous: dict[signal.Signals, Any] = {}
        self.announce = int(os.environ.get("RANK", "0")) == 0  # one notice per run, from the main process

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self.previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handle)
                signal.siginterrupt(sig, False)  # native code's system calls resume after the handler (SA_RESTART)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum)
        for sig in STOP_SIGNALS:  # the next signal ends the process at once
            signal.signal(sig, signal.SIG_DFL)
        if self.announce:  # os.write: print() is not safe inside a signal handler
            os.write(2, f"received {self.received.name}: stopping after this step with a checkpoint (send it again "
                        "to stop at once without saving)\n".encode())  # fmt: skip

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self.previous = {}


@dataclass(frozen=True)
class StopDecision:
    """What every process decided after a step: out of time, a signal received by any process (its name), or the
    main process unable to write."""

    out_of_time: bool
    signal_name: str | None
    failed: bool


def agree_to_stop(*, out_of_time: bool, signals: StopSignals, failed: bool) -> StopDecision:
    """One collective per step: the sums over processes of ``[out of time, SIGTERM, SIGINT, failed]``."""
    flags = [float(out_of_time), *(float(signals.received == sig) for sig in STOP_SIGNALS), float(failed)]
    summed = all_reduce_sum(torch.tensor(flags)).tolist()
    names = [sig.name for sig, count in zip(STOP_SIGNALS, summed[1:3]) if count > 0]
    return StopDecision(out_of_time=summed[0] > 0, signal_name=names[0] if names else None, failed=summed[3] > 0)


def interrupted(signal_name: str, step: int, saved: Path | None, newest: Path | None) -> TrainingInterrupted:
    """The error that ends a run stopped by a signal after ``step`` (``saved``: its checkpoint, None when it could not
    be written because the weights hold NaN/inf; ``newest``: the newest complete checkpoint)."""
    if saved is not None:
        where = f"saved checkpoint {saved.name}"
    else:
        where = f"no checkpoint of this step (non-finite weights), the newest is {newest.name if newest else 'none'}"
    return TrainingInterrupted(f"received {signal_name} at step {step}: {where}; resume with run.resume=latest",
                               signal_name=signal_name, step=step, checkpoint=saved)  # fmt: skip


__all__ = ["STOP_ERRORS", "StopDecision", "StopSignals", "TrainingInterrupted", "agree_to_stop", "interrupted"]
