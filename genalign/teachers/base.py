"""What every teacher does: judge a rollout's sampled actions and return the teacher signals the options read.

A teacher's :meth:`Teacher.judge` takes this process's training rollout and the names of the teacher signals the
configured options need (:mod:`genalign.algorithms.signals`, producer ``teacher``) and returns them, each ``[n]`` or
``[n, T]`` (0 on padding and on the samples it could not score, which ``teacher_scored`` marks). It works in passes of
``batch_size`` samples; a teacher that runs the policy's own modules (a self-teacher) makes as many passes as the
busiest process when the trainer asks (sharded modules gather their parameters in every pass). A model or self teacher also
writes (:meth:`Teacher.write`): it continues given starts after the prompts for the sample sources that add samples
the teacher writes (:attr:`genalign.sampling.base.Forced.teacher_writes`). A teacher holds no state that changes
during training (no optimizer, no random generator), so a resumed run sees the same judgements.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from torch import Tensor

from genalign.policies.base import Rollout, TeacherHost
from genalign.teachers.config import TeacherConfig

#: ``passes_everywhere(n) -> m >= n``: how many passes the busiest process makes (the trainer's all-reduce max)
PassCount = Callable[[int], int]


def same_count(passes: int) -> int:
    """One process: every process makes its own number of passes."""
    return passes


class Teacher(ABC):
    """A configured teacher (module docstring).

    Args:
        config: ``algorithm.teacher``.
        host: what the policy family offers a teacher.
        batch_size: samples per pass (or remote request).
    """

    #: the teacher runs the policy's own (possibly sharded) modules
    shares_policy_modules: bool = False

    def __init__(self, config: TeacherConfig, host: TeacherHost, batch_size: int) -> None:
        self.config = config
        self.host = host
        self.batch_size = batch_size

    def batches(self, size: int) -> list[list[int]]:
        """Consecutive index blocks of at most ``batch_size`` samples covering ``size`` samples."""
        return [list(range(start, min(start + self.batch_size, size))) for start in range(0, size, self.batch_size)]

    @abstractmethod
    def judge(
        self, rollout: Rollout, wanted: frozenset[str], *, passes_everywhere: PassCount = same_count
    ) -> dict[str, Tensor]:
        """The teacher signals ``wanted`` of ``rollout``'s samples (module docstring)."""

    def write(
        self, rows: list[dict[str, Any]], starts: list[list[int]], caps: list[int | None]
    ) -> list[tuple[list[int], Tensor]]:
        """The teacher's continuations of ``starts[i]`` (action ids, maybe none) after ``rows[i]``'s prompt, at most
        ``caps[i]`` actions each (None: to the completion limit), sampled with the policy's training sampling
        settings: the written ids and their sampling log-probs ``[k_i]`` (:meth:`TeacherHost.write_with`). Only
        teachers that run in this process write (config load refuses the others)."""
        raise NotImplementedError(f"a {self.config.source!r} teacher does not write completions")

    def take_metrics(self) -> dict[str, float]:
        """Counters since the previous call (e.g. a remote teacher's failures), as ``teacher/<key>``."""
        return {}


__all__ = ["PassCount", "Teacher", "same_count"]
