"""``code_execution``: run the policy's programs against each row's tests, in the sandbox of
:mod:`genalign.rewards.sandbox`, and score the fraction of tests passed.

**The program** is the last fenced code block of the completion tagged ``python``/``py``/``python3`` (else the last
untagged fenced block, else the whole text) with ``extract="last_block"``, or the whole completion with
``extract="whole"``.

**The tests**, one of two styles as in code-RL datasets:

- ``tests`` as a list of ``{"input": str, "output": str}`` (stdin/stdout, APPS / CodeContests style; also accepted:
  ``{"inputs": [...], "outputs": [...]}`` and either of them as a JSON string). Each test is one run of the program
  with ``input`` on stdin (:func:`~genalign.rewards.sandbox.run_sandboxed`); it passes when the run ends with status
  ``ok`` and the output equals ``output`` line by line after stripping both texts and collapsing the whitespace inside
  each line. The expected output never enters the sandbox and the comparison happens here, so nothing the program
  prints or does decides it but the output itself (a printed "passed", an early ``exit(0)``: wrong output).
- ``tests`` as a list of assert statements (MBPP style), or ``test_code`` as one string (HumanEval style; with an
  ``entry_point`` column, ``check(<entry_point>)`` is called after it). All of a row's tests run in one *test session*
  (:func:`~genalign.rewards.sandbox.run_test_session`): the test code runs in a harness process of its own, and each
  call of one of the program's functions goes as plain data (JSON) to a separate process that runs the program, and
  its return value comes back as plain data; the comparison happens in the harness, which alone decides and reports
  each verdict, on a pipe the program's process does not hold. The program shares no interpreter, memory or writable
  file with the tests, so no token, global, patched ``AssertionError``, ``__eq__``, ``atexit`` hook, early exit or
  printed line can pass a test; it can only return values. Like MBPP's and HumanEval's own harnesses, a row's tests
  share the program's process while it stays healthy (a test after a crash, timeout or unreadable answer gets a fresh
  one); the program's ``if __name__ == "__main__":`` block does not run (its ``__name__`` is ``"__solution__"``).
  Limits are per test, as for one run. What cannot cross (objects of the program's own classes, functions, endless
  generators) fails the test; see :mod:`genalign.rewards.sandbox.protocol`.

Reward: the fraction of tests passed (``mode="fraction"``) or 1.0 only when all pass (``mode="all_or_nothing"``);
``None`` for a row without tests. Runs and sessions of the whole batch go through a thread pool of ``max_parallel``
workers, each waiting on its own sandbox. :meth:`CodeExecution.pop_metrics` reports, per test since the previous call,
how many were ``ok`` (passed), ``fail`` (ran, wrong output, a failed assert or an answer that cannot cross),
``timeout``, ``memory``, ``crash`` and ``output_limit``, plus ``network_isolated`` and ``seccomp`` (1.0 when every test
ran without network / under the system-call filter) and ``rows_without_tests``.
"""

from __future__ import annotations

import json
import re
import typing
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from genalign.rewards.base import register_reward
from genalign.rewards.inputs import completion_text
from genalign.rewards.sandbox import SandboxIsolation, SandboxLimits, run_sandboxed, run_test_session

ScoreMode = Literal["fraction", "all_or_nothing"]
ExtractMode = Literal["last_block", "whole"]
Language = Literal["python"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3"}
_STATUSES = ("ok", "fail", "timeout", "memory", "crash", "output_limit")
#: the most tests of one row in one session (longer lists are split: a session's backstop grows with its tests)
_SESSION_TESTS = 32


def extract_program(text: str, *, extract: ExtractMode = "last_block") -> str:
    """The program in a completion (see the module docstring for ``extract``)."""
    if extract == "whole":
        return text
    blocks = _FENCE.findall(text)
    tagged = [code for tag, code in blocks if tag.lower() in _PYTHON_TAGS]
    untagged = [code for tag, code in blocks if not tag]
    if tagged:
        return tagged[-1]
    if untagged:
        return untagged[-1]
    return text


def normalize_output(text: str) -> list[str]:
    """The lines of ``text``, the whole text stripped and the whitespace inside each line collapsed."""
    return [" ".join(line.split()) for line in text.strip().splitlines()]


@dataclass(frozen=True)
class _Job:
    """One sandbox of a row: a stdin/stdout run (``stdin`` and ``expected_output``) or a test session (``tests``)."""

    row: int
    program: str
    stdin: str | None = None
    expected_output: str | None = None
    tests: tuple[str, ...] = ()
    entry_point: str | None = None


def _parse_tests(value: Any, row: int) -> list[Any]:
    """A row's ``tests`` value as a list of ``{"input", "output"}`` dicts or of assert strings."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = [value]  # one assert statement
    if isinstance(value, dict) and "inputs" in value and "outputs" in value:
        value = [{"input": i, "output": o} for i, o in zip(value["inputs"], value["outputs"], strict=True)]
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            f"reward 'code_execution': row {row}: tests={value!r:.80} is not a list; give a list of "
            '{"input": ..., "output": ...} dicts or a list of assert statements.'
        )
    for test in value:
        if isinstance(test, dict) and ("input" not in test or "output" not in test):
            raise ValueError(
                f"reward 'code_execution': row {row}: test {test!r:.80} needs the keys 'input' and 'output'."
            )
        if not isinstance(test, (dict, str)):
            raise ValueError(
                f"reward 'code_execution': row {row}: test {test!r:.80} is neither an input/output dict nor an "
                "assert string."
            )
    return list(value)


@register_reward("code_execution", source="rule")
class CodeExecution:
    """Fraction of the row's tests that the completion's program passes, run in the sandbox (module docstring).

    Args:
        mode: ``"fraction"`` of tests passed, or ``"all_or_nothing"``.
        extract: ``"last_block"`` (the last fenced python block, else the whole text) or ``"whole"``.
        timeout_s: wall-clock limit of one test (a stdin/stdout run, or one test of a session), in seconds.
        cpu_time_s: CPU-time limit of one test, in seconds (None: ``timeout_s``).
        memory_mb: address-space limit of each process, in MiB.
        max_output_bytes: stdout (and stderr) beyond this per test stops the run or session (``output_limit``).
        max_processes: processes plus threads the program may have at once.
        max_parallel: sandboxes run at the same time (threads, each waiting on its own sandbox).
        language: only ``"python"``.
        interpreter: the Python that runs the programs (default: see
            :func:`genalign.rewards.sandbox.default_interpreter`).
    """

    def __init__(
        self,
        *,
        mode: ScoreMode = "fraction",
        extract: ExtractMode = "last_block",
        timeout_s: float = 5.0,
        cpu_time_s: float | None = None,
        memory_mb: int = 512,
        max_output_bytes: int = 1 << 20,
        max_processes: int = 16,
        max_parallel: int = 4,
        language: Language = "python",
        interpreter: str | None = None,
    ) -> None:
        for name, value, options in (
            ("mode", mode, ScoreMode),
            ("extract", extract, ExtractMode),
            ("language", language, Language),
        ):
            if value not in typing.get_args(options):
                raise ValueError(
                    f"code_execution: {name}={value!r} is not valid; use one of {', '.join(typing.get_args(options))}."
                )
        if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
            raise ValueError(f"code_execution: max_parallel={max_parallel!r} must be an integer >= 1.")
        try:
            self.limits = SandboxLimits(
                timeout_s=timeout_s,
                cpu_time_s=cpu_time_s,
                memory_mb=memory_mb,
                max_output_bytes=max_output_bytes,
                max_processes=max_processes,
            )
        except ValueError as error:
            raise ValueError(f"code_execution: {str(error).removeprefix('SandboxLimits: ')}") from None
        self.mode = mode
        self.extract = extract
        self.language = language
        self.max_parallel = max_parallel
        self.interpreter = interpreter
        self._counts: dict[str, int] = {}
        self._isolated: list[bool] = []
        self._filtered: list[bool] = []
        self._warned = False
        self._reset_counts()

    def _reset_counts(self) -> None:
        self._counts = dict.fromkeys([*_STATUSES, "rows_without_tests"], 0)
        self._isolated = []
        self._filtered = []

    def _jobs(self, row: int, program: str, tests: Any, test_code: Any, entry_point: Any) -> list[_Job]:
        jobs, code_tests = [], []
        if tests is not None:
            for test in _parse_tests(tests, row):
                if isinstance(test, dict):
                    jobs.append(_Job(row, program, stdin=str(test["input"]), expected_output=str(test["output"])))
                else:
                    code_tests.append(test)
        if test_code:
            if not isinstance(test_code, str):
                raise ValueError(
                    f"reward 'code_execution': row {row}: test_code must be a string, got {type(test_code).__name__}."
                )
            if entry_point:
                test_code = f"{test_code}\n\ncheck({entry_point})\n"
            code_tests.append(test_code)
        entry = str(entry_point) if entry_point else None
        for start in range(0, len(code_tests), _SESSION_TESTS):
            jobs.append(_Job(row, program, tests=tuple(code_tests[start : start + _SESSION_TESTS]), entry_point=entry))
        return jobs

    def _execute(self, job: _Job) -> tuple[list[str], SandboxIsolation]:
        """The status of each test of ``job`` (``"ok"``: passed) and the isolation it ran under."""
        if job.tests:
            session = run_test_session(
                job.program, job.tests, entry_point=job.entry_point, limits=self.limits, interpreter=self.interpreter
            )
            return list(session.statuses), session.run.isolation
        assert job.stdin is not None and job.expected_output is not None
        result = run_sandboxed(
            job.program, stdin=job.stdin, language=self.language, limits=self.limits, interpreter=self.interpreter
        )
        if result.status != "ok":
            return [result.status], result.isolation
        passed = normalize_output(result.stdout) == normalize_output(job.expected_output)
        return ["ok" if passed else "fail"], result.isolation  # "fail": ran, wrong output

    def __call__(
        self,
        prompts: Sequence[str],
        completions: Sequence[Any],
        tests: Sequence[Any] | None = None,
        test_code: Sequence[Any] | None = None,
        entry_point: Sequence[Any] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        count = len(completions)
        if tests is None and test_code is None:
            raise ValueError(
                "reward 'code_execution' needs the dataset column 'tests' (input/output dicts or assert statements) "
                "or 'test_code' (a HumanEval-style check); add one to the data or map it with data.columns.tests=..."
            )
        for name, values in (("tests", tests), ("test_code", test_code), ("entry_point", entry_point)):
            if values is not None and len(values) != count:
                raise ValueError(f"reward 'code_execution': column {name!r} has {len(values)} values for {count}.")
        jobs: list[_Job] = []
        has_tests = [False] * count
        for row, completion in enumerate(completions):
            row_tests = tests[row] if tests is not None else None
            row_code = test_code[row] if test_code is not None else None
            program = extract_program(completion_text(completion), extract=self.extract)
            row_entry = entry_point[row] if entry_point is not None else None
            row_jobs = self._jobs(row, program, row_tests, row_code, row_entry)
            has_tests[row] = bool(row_jobs)
            jobs.extend(row_jobs)
        with ThreadPoolExecutor(max_workers=self.max_parallel) as pool:
            outcomes = list(pool.map(self._execute, jobs))
        if not self._warned and any(isolation.uid is None and not isolation.pid_namespace for _, isolation in outcomes):
            self._warned = True
            warnings.warn(
                "code_execution: the sandbox got neither a PID namespace nor a private uid here, so the programs run "
                "as your uid and can open this process's /proc entries (its memory, its pipes): their rewards can be "
                "forged. Run as root, or where unprivileged user namespaces are allowed (see "
                "docs/rewards_code_execution.md).",
                RuntimeWarning,
                stacklevel=2,
            )
        passed = [0] * count
        total = [0] * count
        for job, (statuses, isolation) in zip(jobs, outcomes, strict=True):
            for status in statuses:
                self._counts[status] += 1
                self._isolated.append(isolation.network_isolated)
                self._filtered.append(isolation.seccomp)
                total[job.row] += 1
                passed[job.row] += int(status == "ok")
        rewards: list[float | None] = []
        for row in range(count):
            if not has_tests[row]:
                self._counts["rows_without_tests"] += 1
                rewards.append(None)
            elif self.mode == "all_or_nothing":
                rewards.append(float(passed[row] == total[row]))
            else:
                rewards.append(passed[row] / total[row])
        return rewards

    def pop_metrics(self) -> dict[str, float]:
        """Per-status counts of the tests since the previous call (module docstring); ``network_isolated`` is 1.0
        when every one of those tests ran with no network, 0.0 when one did not, and ``seccomp`` likewise for the
        system-call filter (both absent when nothing ran)."""
        metrics = {key: float(value) for key, value in self._counts.items()}
        if self._isolated:
            metrics["network_isolated"] = float(all(self._isolated))
            metrics["seccomp"] = float(all(self._filtered))
        self._reset_counts()
        return metrics
