"""Run an untrusted program in a separate, limited, isolated process: :func:`run_sandboxed`.

Code rewards (:mod:`genalign.rewards.code_execution`) run programs written by the policy. Each run gets:

- **a fresh process tree.** A small runner (:mod:`genalign.rewards.sandbox.child` run as a script, ``python -I -S``,
  standard library only) is started in its own session; it enters new namespaces where it can, forks an *init*
  process that sets the sandbox up, and init forks the program: ``python -I -S -B main.py`` (isolated mode: no
  ``PYTHON*`` variables, no user or site directories, no site-packages; the standard library only) in a fresh scratch
  directory, with a clean environment (``PATH``, ``HOME``/``TMPDIR`` = the scratch directory, ``LANG``).
- **limits** (``setrlimit`` in the program's process, inherited by its children): CPU time (``RLIMIT_CPU``), address
  space (``RLIMIT_AS``, per process), file size (``RLIMIT_FSIZE``), open files, no core dumps, and the number of
  processes/threads (``RLIMIT_NPROC``). A wall-clock limit is enforced by init (then by the parent as a backstop), and
  output beyond ``max_output_bytes`` on stdout or stderr stops the program (status ``output_limit``).
- **a private uid** when the caller is root: the program runs as an unprivileged uid of its own (one per concurrent
  run, no supplementary groups, ``no_new_privs``). The kernel does not apply ``RLIMIT_NPROC`` to root (measured: 50
  of 50 forks succeed as root with a limit of 5), but does to that uid, so the process limit holds; file permissions
  then protect everything not world-writable (the repository, run directories, ``/root``).
- **namespaces** where the kernel allows them (as root, or through an unprivileged user namespace otherwise):
  a network namespace with only a loopback interface that is down (no network at all, not even ``127.0.0.1``); a mount
  namespace in which every mount is remounted read-only and the scratch directory is a private, size-limited tmpfs;
  a PID namespace whose init is the sandbox's init (with its own ``/proc``: the program sees only its own processes,
  and when init exits the kernel kills every process left in it); an IPC namespace.
- **cleanup.** Init is a child subreaper: after the program exits (or at the time limit) it kills the program's
  process group and every descendant left, and the parent kills the runner's process group, so nothing outlives a
  run. The scratch directory is deleted.

What was achieved is reported in :class:`SandboxIsolation` on every result, never assumed: a machine without
namespaces runs the program with ``network_isolated=False`` (and so on), it does not fail. Measured on the development
machine (root in a VM): every layer above is active. Not isolated: the program can read world-readable files (the
standard library, the repository's source), use up to ``max_processes * memory_mb`` of memory in all (there is no
cgroup), and spend CPU in up to ``max_processes`` processes; there is no seccomp filter on system calls.

Modules: :mod:`~genalign.rewards.sandbox.limits` (:class:`SandboxLimits`), :mod:`~genalign.rewards.sandbox.result`
(:class:`SandboxResult`, :class:`SandboxIsolation`, :class:`SandboxError`, the status of a run); the parent side:
:mod:`~genalign.rewards.sandbox.run` (:func:`run_sandboxed`), :mod:`~genalign.rewards.sandbox.interpreter`
(:func:`default_interpreter`), :mod:`~genalign.rewards.sandbox.uids` (private uids),
:mod:`~genalign.rewards.sandbox.output` (reading the pipes), :mod:`~genalign.rewards.sandbox.kill` (what a run left);
the sandbox side: :mod:`~genalign.rewards.sandbox.child` (runner, init and the program's process setup).
"""

from genalign.rewards.sandbox.interpreter import default_interpreter
from genalign.rewards.sandbox.limits import SandboxLimits
from genalign.rewards.sandbox.result import SandboxError, SandboxIsolation, SandboxResult, SandboxStatus
from genalign.rewards.sandbox.run import Language, run_sandboxed
from genalign.rewards.sandbox.session import SessionResult, TestStatus, run_test_session

__all__ = [
    "Language",
    "SandboxError",
    "SandboxIsolation",
    "SandboxLimits",
    "SandboxResult",
    "SandboxStatus",
    "SessionResult",
    "TestStatus",
    "default_interpreter",
    "run_sandboxed",
    "run_test_session",
]
