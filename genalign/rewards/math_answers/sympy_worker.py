"""Symbolic comparisons in a worker process, with a timeout and a memory cap: :func:`symbolic_outcome`.

A pathological expression can keep sympy busy for minutes or take gigabytes, so comparisons run in one spawned worker
process; one that runs out of time terminates the worker, and a fresh one is started for the next call.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Literal

from genalign.rewards.math_answers.parser import parse_math
from genalign.rewards.math_answers.symbolic import compare_symbolically
from genalign.rewards.math_answers.syntax import MathParseError

#: how a comparison of two final answers ended (``"equal"`` is the only one worth reward)
MathOutcome = Literal[
    "equal", "not_equal", "no_answer", "parse_failure", "reference_parse_failure", "timeout", "symbolic_error"
]

#: extra address space (MiB) a sympy worker may take beyond what its imports use
SYMPY_WORKER_MEMORY_MB = 4096

_SYMPY_POOL: ProcessPoolExecutor | None = None
_CAPPED = False


def cap_extra_memory(memory_mb: int) -> None:
    """Cap the address space of the current process at its present size plus ``memory_mb`` MiB (the sympy worker
    calls this once its imports are done); a no-op where ``RLIMIT_AS`` is not available. Idempotent."""
    global _CAPPED
    if _CAPPED:
        return
    try:
        import resource

        with open("/proc/self/status") as status:
            size_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
        limit = size_kb * 1024 + memory_mb * 1024 * 1024
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError, StopIteration):  # not Linux: no cap
        pass
    _CAPPED = True


def _symbolic_worker(first: str, second: str, memory_mb: int) -> str:
    """:func:`~genalign.rewards.math_answers.symbolic.compare_symbolically` in the worker process, its memory capped first."""
    import sympy  # noqa: F401  (imported before the address-space cap, so the cap only bounds the comparison)

    cap_extra_memory(memory_mb)
    return compare_symbolically(first, second)


def _drop_sympy_pool() -> None:
    global _SYMPY_POOL
    pool, _SYMPY_POOL = _SYMPY_POOL, None
    if pool is not None:
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)


def symbolic_outcome(first: str, second: str, *, timeout_s: float = 5.0) -> MathOutcome:
    """Compare two answers with sympy: ``"equal"``, ``"not_equal"``, ``"parse_failure"`` (``first``),
    ``"reference_parse_failure"`` (``second``), ``"timeout"`` or ``"symbolic_error"``.

    Both strings are parsed here with the restricted parser of :mod:`genalign.rewards.math_answers` (no ``eval``), and
    only strings that parse are sent to a worker process, which parses them again, builds the sympy objects and
    checks ``simplify(a - b) == 0`` within ``timeout_s``. A comparison that runs out of time terminates the worker;
    a fresh one is started for the next call, so a pathological expression costs at most ``timeout_s``. The worker's
    address space is capped (:data:`SYMPY_WORKER_MEMORY_MB` beyond its imports).
    """
    global _SYMPY_POOL
    sides: tuple[tuple[str, MathOutcome], ...] = ((first, "parse_failure"), (second, "reference_parse_failure"))
    for text, failure in sides:
        try:
            parse_math(text)
        except MathParseError:
            return failure
    if _SYMPY_POOL is None:
        import multiprocessing

        _SYMPY_POOL = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        future = _SYMPY_POOL.submit(_symbolic_worker, first, second, SYMPY_WORKER_MEMORY_MB)
        outcome = future.result(timeout=timeout_s)
    except FutureTimeout:
        _drop_sympy_pool()
        return "timeout"
    except BrokenProcessPool:  # the worker died (killed for memory, crashed): start a fresh one next time
        _drop_sympy_pool()
        return "symbolic_error"
    return "symbolic_error" if outcome == "error" else outcome


def symbolic_equal(first: str, second: str, *, timeout_s: float = 5.0) -> bool:
    """Whether two expressions are symbolically equal (:func:`symbolic_outcome` is ``"equal"``)."""
    return symbolic_outcome(first, second, timeout_s=timeout_s) == "equal"
