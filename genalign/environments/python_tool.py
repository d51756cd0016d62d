"""The ``python`` tool: runs the model's program in genalign's code sandbox (:mod:`genalign.rewards.sandbox`) and
returns what it printed.

Each call is one fresh sandbox (nothing carries over between calls: define what you need in each program), with the
sandbox's guarantees as measured and reported in ``docs/rewards_code_execution.md``: ``python -I -S`` with the
standard library only, CPU / wall-clock / memory / process / file-size / output limits, no network, a private scratch
directory (a size-limited tmpfs, deleted afterwards) as its working directory, a read-only file system everywhere else,
a private unprivileged uid when the trainer runs as root, and a system-call filter. What it does not isolate is said
there too: world-readable files can be read.

The tool cannot hang: the sandbox kills the program's whole process tree at ``timeout_s``, and the tool's own thread
timeout is set 10 s above it as a backstop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genalign.environments.tools import TOOLS, Tool

if TYPE_CHECKING:
    from genalign.rewards.sandbox import SandboxLimits, SandboxResult


@TOOLS.register("python", summary="run a Python program in the code sandbox (no network, scratch directory)")
def python_tool(
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 256,
    max_processes: int = 8,
    scratch_mb: int = 16,
    max_output_chars: int = 4000,
) -> Tool:
    """The ``python`` tool with these sandbox limits.

    Args:
        timeout_s: wall-clock (and CPU) limit of one program.
        memory_mb: address-space limit of each of its processes.
        max_processes: processes plus threads at once.
        scratch_mb: size of its scratch directory.
        max_output_chars: the most characters of stdout and of stderr returned (the sandbox stops a program that
            writes much more: status ``output_limit``).
    """
    from genalign.rewards.sandbox import SandboxLimits, run_sandboxed  # imported on use: it loads genalign.rewards

    if isinstance(max_output_chars, bool) or not isinstance(max_output_chars, int) or max_output_chars < 16:
        raise ValueError(f"python tool: max_output_chars={max_output_chars!r} must be an integer of at least 16.")
    limits = SandboxLimits(
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_processes=max_processes,
        scratch_mb=scratch_mb,
        max_output_bytes=4 * max_output_chars,
    )

    def python(code: str) -> str:
        """Run a Python program (standard library only, no network, no state kept between calls) and return its
        printed output.

        Args:
            code: the program; print what you want to see.
        """
        return format_run(run_sandboxed(code, limits=limits), limits, max_output_chars)

    return Tool.from_function(python, timeout_s=timeout_s + 10.0)


def format_run(result: SandboxResult, limits: SandboxLimits, max_output_chars: int) -> str:
    """What the model sees of one run: stdout, then stderr (its end: the traceback) and the status when not ok."""
    parts = [_head(result.stdout, max_output_chars, result.stdout_truncated)] if result.stdout else []
    if result.stderr:
        parts.append("[stderr]\n" + _tail(result.stderr, max_output_chars, result.stderr_truncated))
    if result.status == "timeout":
        parts.append(f"[stopped: the program ran past its {limits.timeout_s:g} s limit]")
    elif result.status == "memory":
        parts.append(f"[stopped: the program ran out of memory ({limits.memory_mb} MiB)]")
    elif result.status == "output_limit":
        parts.append("[stopped: the program printed too much]")
    elif result.status == "crash":
        code = f"signal {result.signal}" if result.signal is not None else f"exit code {result.exit_code}"
        parts.append(f"[the program failed: {code}]")
    return "\n".join(parts) if parts else "[no output]"


def _head(text: str, limit: int, truncated: bool) -> str:
    if len(text) <= limit and not truncated:
        return text.rstrip("\n")
    return text[:limit].rstrip("\n") + "\n[stdout truncated]"


def _tail(text: str, limit: int, truncated: bool) -> str:
    if len(text) <= limit and not truncated:
        return text.rstrip("\n")
    return "[stderr truncated]\n" + text[-limit:].rstrip("\n")
