"""Run an untrusted program in a separate, limited, isolated process (:func:`run_sandboxed`), or trusted tests against
it with a verdict it cannot forge (:func:`run_test_session`).

Code rewards (:mod:`genalign.rewards.code_execution`) run programs written by the policy. Each run gets:

- **a fresh process tree.** A small runner (:mod:`genalign.rewards.sandbox.child` run as a script, ``python -I -S``,
  standard library only) is started in its own session; it enters new namespaces where it can, forks an *init*
  process that sets the sandbox up, and init forks the program: ``python -I -S -B main.py`` (isolated mode: no
  ``PYTHON*`` variables, no user or site directories, no site-packages; the standard library only) in a fresh scratch
  directory, with a clean environment (``PATH``, ``HOME``/``TMPDIR`` = the scratch directory, ``LANG``). Runner and
  init are not dumpable, so a program that keeps the caller's uid cannot open their memory or descriptors.
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
  a PID namespace whose init is the sandbox's init (with its own ``/proc``, mounted ``hidepid=2``: the program sees
  only its own processes, and when init exits the kernel kills every process left in it); an IPC namespace.
- **a system-call filter** (:mod:`~genalign.rewards.sandbox.seccomp`, x86_64): a seccomp BPF program installed in
  each process the sandbox starts, before ``exec``, that denies namespaces, ``ptrace``, other processes' memory,
  mounts, keyrings, ``bpf``, ``perf_event_open``, ``io_uring``, kernel modules and the like (``EPERM``).
- **cleanup.** Init is a child subreaper: after the program exits (or at the time limit) it kills the program's
  process group and every descendant left, and the parent kills the runner's process group, so nothing outlives a
  run. The scratch directory is deleted.

A **test session** (:mod:`~genalign.rewards.sandbox.session`) is one such sandbox in which init runs a *harness*
process (the dataset's test code; its own private uid as root, not dumpable) and a *solution* process (the program),
which share nothing but a socket carrying plain data (:mod:`~genalign.rewards.sandbox.protocol`,
:mod:`~genalign.rewards.sandbox.wire`); the verdicts reach the parent on a pipe only the harness holds.

What was achieved is reported in :class:`SandboxIsolation` on every result, never assumed: a machine without
namespaces runs the program with ``network_isolated=False`` (and so on), another architecture with ``seccomp=False``;
it does not fail. Measured on the development machine (root in a VM): every layer above is active. Not isolated: the
program can read world-readable files (the standard library, the repository's source), use up to
``max_processes * memory_mb`` of memory in all (there is no cgroup), and spend CPU in up to ``max_processes``
processes. Without a PID namespace and without a private uid (not root, no user namespaces) the program runs as the
caller's uid and can open the caller's ``/proc`` entries: nothing of the caller, verdicts included, is safe from it.

Modules: :mod:`~genalign.rewards.sandbox.limits` (:class:`SandboxLimits`), :mod:`~genalign.rewards.sandbox.result`
(:class:`SandboxResult`, :class:`SandboxIsolation`, :class:`SandboxError`, the status of a run); the parent side:
:mod:`~genalign.rewards.sandbox.run` (:func:`run_sandboxed`), :mod:`~genalign.rewards.sandbox.session`
(:func:`run_test_session`), :mod:`~genalign.rewards.sandbox.interpreter` (:func:`default_interpreter`),
:mod:`~genalign.rewards.sandbox.uids` (private uids), :mod:`~genalign.rewards.sandbox.seccomp` (the filter),
:mod:`~genalign.rewards.sandbox.output` (reading the pipes), :mod:`~genalign.rewards.sandbox.kill` (what a run left);
the sandbox side: :mod:`~genalign.rewards.sandbox.child` (runner, init and the processes' setup),
:mod:`~genalign.rewards.sandbox.init_session` (init's side of a session), :mod:`~genalign.rewards.sandbox.protocol`
and :mod:`~genalign.rewards.sandbox.wire` (harness and solution server).
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
