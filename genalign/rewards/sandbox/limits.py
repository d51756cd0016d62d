"""The limits of one sandboxed run: :class:`SandboxLimits`."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed run.

    Args:
        timeout_s: wall-clock limit in seconds (status ``timeout``).
        cpu_time_s: CPU-time limit in seconds (``RLIMIT_CPU``, rounded up to whole seconds; status ``timeout``);
            None: ``timeout_s``.
        memory_mb: address-space limit of each process in MiB (``RLIMIT_AS``; status ``memory``).
        max_output_bytes: the most bytes kept of stdout and of stderr; more stops the program (``output_limit``).
        max_processes: processes plus threads the program may have at once, itself included (``RLIMIT_NPROC``).
        max_file_mb: largest file the program may write, in MiB (``RLIMIT_FSIZE``).
        scratch_mb: size of the private tmpfs scratch directory, in MiB (only with a mount namespace).
        max_open_files: open file descriptors (``RLIMIT_NOFILE``).
    """

    timeout_s: float = 5.0
    cpu_time_s: float | None = None
    memory_mb: int = 512
    max_output_bytes: int = 1 << 20
    max_processes: int = 16
    max_file_mb: int = 16
    scratch_mb: int = 64
    max_open_files: int = 64

    def __post_init__(self) -> None:
        checks = {
            "timeout_s": (self.timeout_s, 0.0, "a positive number of seconds, e.g. 5"),
            "cpu_time_s": (self.cpu_time_s, 0.0, "a positive number of seconds or None"),
            "memory_mb": (self.memory_mb, 32, "at least 32 (an interpreter needs about 20 MiB to start)"),
            "max_output_bytes": (self.max_output_bytes, 0, "a positive number of bytes"),
            "max_processes": (self.max_processes, 1, "at least 1 (the program itself)"),
            "max_file_mb": (self.max_file_mb, 0, "a positive number of MiB"),
            "scratch_mb": (self.scratch_mb, 0, "a positive number of MiB"),
            "max_open_files": (self.max_open_files, 16, "at least 16"),
        }
        for name, (value, minimum, fix) in checks.items():
            if value is None and name == "cpu_time_s":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= minimum or value <= 0:
                raise ValueError(f"SandboxLimits: {name}={value!r} is not valid; use {fix}.")

    @property
    def cpu_seconds(self) -> int:
        """The ``RLIMIT_CPU`` soft limit: ``cpu_time_s`` (or ``timeout_s``) rounded up to whole seconds."""
        return max(1, math.ceil(self.timeout_s if self.cpu_time_s is None else self.cpu_time_s))
