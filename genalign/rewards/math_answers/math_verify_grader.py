"""``math_verify_equivalence``: the grader TRL and open-r1 score math with (Hugging Face's ``math-verify``), run only
inside the sandbox of :mod:`genalign.rewards.sandbox`. Optional: ``pip install 'genalign[math]'``.

**Why a sandbox.** math-verify turns model text into sympy objects with ``latex2sympy2_extended`` (an ANTLR parser)
and, for plain expressions such as ``1/2`` or ``3*4``, with sympy's ``parse_expr``, which is Python ``eval`` on the
text (a regular expression keeps that text to digits and operators, but it is ``eval`` all the same); sympy then
simplifies and evaluates what it built, and its time limits are ``signal.alarm`` handlers, which cannot stop a long
computation inside C code. Contract 5 says nothing the model generates runs outside a sandbox, so genalign never
imports math-verify in its own process: :func:`math_verify_outcomes` runs
:mod:`~genalign.rewards.math_answers.math_verify_program` as a sandboxed program (a separate process tree, no network,
a read-only filesystem, a private uid as root, CPU/memory/process limits, the system-call filter) with the pairs on
its standard input, and reads one outcome per pair from its output.

**How math-verify is importable there.** Sandboxed programs run ``python -I -S``: the standard library only. This
grader finds, without importing anything, the folders that hold ``math_verify``, ``latex2sympy2_extended``,
``antlr4``, ``sympy`` and ``mpmath`` in the caller's environment (:func:`math_verify_paths`; usually one
site-packages folder) and passes them in its request; the program puts them on its own ``sys.path``. Nothing else of
the caller's environment reaches the sandbox (no ``PYTHONPATH``, no ``.pth`` files), the folders are read-only in
there (the whole filesystem is), and as root the private uid must be able to read them (checked, with the fix named).
The interpreter is :func:`~genalign.rewards.sandbox.default_interpreter`; it should be the caller's Python version
(the packages are pure Python, so a different patch release is fine); a program that cannot import them makes
:class:`~genalign.rewards.sandbox.SandboxError` with math-verify's error.

**Cost.** One sandbox run grades a whole batch (at most ``batch_size`` pairs): its start and the imports (~1 s) are
paid once per batch, then each pair costs what math-verify costs (milliseconds; measured numbers in
``benchmarks/grader_comparison_results.md``). Inside, a supervisor enforces ``timeout_s`` per pair on a forked worker
and replaces the worker when it is stuck, so one pathological answer costs ``timeout_s``, not the batch.

**What it scores** (as TRL's ``accuracy_reward``): the gold answer parsed with math-verify's default extraction (LaTeX
and plain expressions; a ``\\boxed{}`` in it is found; a bare answer such as ``(1, 2)`` is read as ``$(1, 2)$``
unless ``wrap_gold=False``: math-verify reads bare ``(1, 2)`` as ``2`` and ``8y+48`` as ``8``), the completion with
LaTeX extraction only (``\\boxed{}`` first, text outside ``$..$``/``\\boxed{}`` is not read, units dropped), then
``verify(gold, answer)``. 1.0 when equal, 0.0 when not, when nothing was found in the completion, or on a
timeout/error; ``None`` when the gold answer does not parse (TRL skips those rows too) or is not an answer
(``bad_answer``).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from genalign.rewards.base import register_reward
from genalign.rewards.inputs import AnswerColumn, answer_text, check_column, completion_text
from genalign.rewards.sandbox import SandboxError, SandboxLimits, default_interpreter, run_sandboxed
from genalign.rewards.sandbox.interpreter import reachable_by_others

#: how math-verify judged one (gold, completion) pair
MathVerifyOutcome = Literal["equal", "not_equal", "no_answer", "reference_parse_failure", "timeout", "error"]
_OUTCOMES = frozenset(MathVerifyOutcome.__args__)

#: the top-level modules the sandboxed program imports, located in the caller's environment
REQUIRED_MODULES = ("math_verify", "latex2sympy2_extended", "antlr4", "sympy", "mpmath")
#: the sandboxed program's source (read once)
PROGRAM = (Path(__file__).parent / "math_verify_program.py").read_text(encoding="utf-8")
#: wall-clock seconds a sandbox may take, on top of ``timeout_s`` per pair, to start and import math-verify
STARTUP_S = 20.0
INSTALL_HINT = "pip install 'genalign[math]' (math-verify with its ANTLR runtime)"


def math_verify_available() -> bool:
    """Whether math-verify and what it imports are installed (found, not imported)."""
    return all(importlib.util.find_spec(name) is not None for name in REQUIRED_MODULES)


def math_verify_paths() -> tuple[str, ...]:
    """The folders to put on the sandboxed program's ``sys.path`` so that it finds :data:`REQUIRED_MODULES`.

    Raises:
        ImportError: one of them is not installed (the message names the install command).
    """
    folders: list[str] = []
    for name in REQUIRED_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ImportError(
                f"math_verify_equivalence needs the module {name!r}, which is not installed: {INSTALL_HINT}."
            )
        origin = Path(spec.origin).resolve()
        folder = origin.parent.parent if spec.submodule_search_locations is not None else origin.parent
        if str(folder) not in folders:
            folders.append(str(folder))
    return tuple(folders)


def _check_reachable(paths: Sequence[str]) -> None:
    """As root the program runs as an unprivileged uid: it must be able to read ``paths``."""
    if os.geteuid() != 0:
        return
    for path in paths:
        if not reachable_by_others(path):
            raise SandboxError(
                f"math_verify_equivalence: the sandbox's unprivileged uid cannot read {path} (a folder on the way "
                "is not open to others, e.g. a virtual environment under /root); install math-verify into an "
                "environment every user can read."
            )


def math_verify_outcomes(
    pairs: Sequence[tuple[str, str]],
    *,
    timeout_s: float = 5.0,
    wrap_gold: bool = True,
    batch_size: int = 256,
    memory_mb: int = 1024,
    interpreter: str | None = None,
    use_namespaces: bool = True,
) -> list[MathVerifyOutcome]:
    """Grade ``(gold, completion)`` pairs with math-verify in the sandbox: one outcome per pair, in order.

    Args:
        pairs: the gold answer and the completion's text.
        timeout_s: the most one pair may take (both parses and the comparison); then ``"timeout"``.
        wrap_gold: parse a gold answer written without ``$``, ``\\(`` or ``\\boxed`` as ``$gold$`` (False: as TRL's
            ``accuracy_reward`` does, which reads ``(1, 2)`` as ``2`` and ``8y+48`` as ``8``).
        batch_size: pairs per sandbox run (one start and one import of math-verify each).
        memory_mb: address space of each sandboxed process.
        interpreter, use_namespaces: as in :func:`~genalign.rewards.sandbox.run_sandboxed`.

    Raises:
        ImportError: math-verify is not installed here.
        SandboxError: the sandbox could not run, or math-verify could not be imported in it.
    """
    pairs = [(str(gold), str(completion)) for gold, completion in pairs]
    paths = math_verify_paths()
    _check_reachable(paths)
    interpreter = interpreter or default_interpreter()
    outcomes: list[MathVerifyOutcome] = []
    for start in range(0, len(pairs), batch_size):
        outcomes += _grade_batch(
            pairs[start : start + batch_size], paths, timeout_s, wrap_gold, memory_mb, interpreter, use_namespaces
        )
    return outcomes


def _grade_batch(
    pairs: list[tuple[str, str]],
    paths: tuple[str, ...],
    timeout_s: float,
    wrap_gold: bool,
    memory_mb: int,
    interpreter: str,
    use_namespaces: bool,
) -> list[MathVerifyOutcome]:
    """One sandbox run for ``pairs``; when it ends early (its whole-run limit, a crash), the pair it was on is a
    ``"timeout"``/``"error"`` and the pairs after it go to a fresh sandbox."""
    decided: dict[int, MathVerifyOutcome] = {}
    while len(decided) < len(pairs):
        pending = [index for index in range(len(pairs)) if index not in decided]
        wall = STARTUP_S + len(pending) * (timeout_s + 0.5)
        limits = SandboxLimits(timeout_s=wall, memory_mb=memory_mb, max_processes=4, max_output_bytes=1 << 20)
        request = {
            "paths": list(paths),
            "pairs": [pairs[i] for i in pending],
            "timeout_s": timeout_s,
            "wrap_gold": wrap_gold,
        }
        run = run_sandboxed(
            PROGRAM, stdin=json.dumps(request), limits=limits, interpreter=interpreter, use_namespaces=use_namespaces
        )
        for line in run.stdout.splitlines():
            message = _message(line)
            if "error" in message:
                raise SandboxError(
                    f"math_verify_equivalence: math-verify could not be imported in the sandbox ({interpreter}, "
                    f"paths {list(paths)}): {message['error']}"
                )
            index, outcome = message.get("i"), message.get("outcome")
            if type(index) is int and 0 <= index < len(pending) and outcome in _OUTCOMES:
                decided.setdefault(pending[index], outcome)
        stopped = [index for index in pending if index not in decided]
        if stopped:  # the run ended on this pair: charge it, retry the rest
            decided[stopped[0]] = "timeout" if run.status == "timeout" else "error"
    return [decided[index] for index in range(len(pairs))]


def _message(line: str) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


#: outcome -> the ``pop_metrics`` counter it increments
_OUTCOME_COUNTERS = {
    "no_answer": "no_answer",
    "reference_parse_failure": "reference_parse_failures",
    "timeout": "timeouts",
    "error": "errors",
}


@register_reward("math_verify_equivalence", source="rule")
class MathVerifyEquivalence:
    """1.0 where math-verify finds the completion's answer equal to ``answer``, else 0.0; math-verify runs only
    inside the sandbox (:mod:`genalign.rewards.math_answers.math_verify_grader`). ``None`` where the reference does not
    parse (as TRL's ``accuracy_reward``) or is not an answer (``bad_answer``).

    Args:
        timeout_s: the most one completion may take; then 0.0 and a counted timeout.
        wrap_gold: read a bare gold answer (no ``$``, ``\\(`` or ``\\boxed``) as LaTeX math, ``$answer$``; False
            parses it as TRL's ``accuracy_reward`` does, where ``(1, 2)`` is read as ``2`` and ``8y+48`` as ``8``.
        batch_size: completions graded per sandbox run (its start and math-verify's import are paid once per run).
        memory_mb: address-space limit of each sandboxed process, in MiB.

    Raises:
        ImportError: at construction, when math-verify is not installed (``pip install 'genalign[math]'``).
    """

    def __init__(self, *, timeout_s: float = 5.0, wrap_gold: bool = True, batch_size: int = 256, memory_mb: int = 1024):
        if not timeout_s > 0:
            raise ValueError(f"math_verify_equivalence: timeout_s={timeout_s!r} must be > 0 seconds.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"math_verify_equivalence: batch_size={batch_size!r} must be an integer >= 1.")
        if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 256:
            raise ValueError(f"math_verify_equivalence: memory_mb={memory_mb!r} must be an integer >= 256 (sympy).")
        if not isinstance(wrap_gold, bool):
            raise ValueError(f"math_verify_equivalence: wrap_gold={wrap_gold!r} must be true or false.")
        math_verify_paths()  # fail at config load, not at the first batch
        self.timeout_s, self.wrap_gold, self.batch_size, self.memory_mb = timeout_s, wrap_gold, batch_size, memory_mb
        self._counts = dict.fromkeys(["scored", *_OUTCOME_COUNTERS.values()], 0)
        self.answers = AnswerColumn("math_verify_equivalence")

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[Any], answer: Sequence[Any] | None = None, **columns: Any
    ) -> list[float | None]:
        return self.score(completions, self.answers.read(answer, len(completions), columns))

    def score(self, completions: Sequence[Any], references: Sequence[str | None]) -> list[float | None]:
        """Rewards of ``completions`` against reference answers already read as text (None: not applicable)."""
        rows = [index for index, reference in enumerate(references) if reference is not None]
        pairs = [(references[index], completion_text(completions[index])) for index in rows]
        outcomes = math_verify_outcomes(
            pairs,
            timeout_s=self.timeout_s,
            wrap_gold=self.wrap_gold,
            batch_size=self.batch_size,
            memory_mb=self.memory_mb,
        )
        rewards: list[float | None] = [None] * len(completions)
        for index, outcome in zip(rows, outcomes, strict=True):
            if outcome == "reference_parse_failure":
                self._counts["reference_parse_failures"] += 1
                continue
            self._counts["scored"] += 1
            if outcome in _OUTCOME_COUNTERS:
                self._counts[_OUTCOME_COUNTERS[outcome]] += 1
            rewards[index] = float(outcome == "equal")
        return rewards

    def pop_metrics(self) -> dict[str, float]:
        """Counts since the previous call: ``scored`` completions, and among them ``no_answer``, ``timeouts`` and
        ``errors``; ``reference_parse_failures`` (rows not scored: the gold answer did not parse) and ``bad_answer``
        (rows whose reference was not text or a number)."""
        counts, self._counts = self._counts, dict.fromkeys(self._counts, 0)
        return {key: float(value) for key, value in counts.items()} | self.answers.pop_metrics()


def math_verify_equivalence(
    prompts: Sequence[str],
    completions: Sequence[Any],
    answer: Sequence[Any] | None = None,
    *,
    timeout_s: float = 5.0,
    **columns: Any,
) -> list[float | None]:
    """:class:`MathVerifyEquivalence` as a plain function (no counters), for direct calls."""
    reward = MathVerifyEquivalence(timeout_s=timeout_s)
    references = [answer_text(v) for v in check_column("answer", answer, len(completions), "math_verify_equivalence")]
    return reward.score(completions, references)
