"""Cost of the unforgeable code-execution verdict: scoring correct solutions with the old one-sandbox-per-assert harness
(the program and the tests in one interpreter, a pass token on stdout: forgeable, kept here only to measure) vs the
test sessions of ``code_execution`` (a harness process, a solution process, plain data between them).

Run: ``python benchmarks/bench_code_execution.py [--rows 64 --repeats 5 --max-parallel 4]`` (about a minute);
``--smoke``: 4 rows, 1 repeat (seconds), prints the table and writes nothing unless ``--out`` is given.

Two styles of rows, each a correct solution: MBPP (``tests``: 3 assert statements, each counted as a test) and
HumanEval (``test_code`` with a ``check`` of 3 asserts and an ``entry_point``: one test). Old and new alternate within
each repeat, on the same sandbox (this branch's: both get the seccomp filter). Reported per style: median wall seconds
of scoring all rows, median CPU seconds of every sandbox process (the parent's ``RUSAGE_CHILDREN``), and new / old.
The table is written to ``benchmarks/code_execution_results.md`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clone without installing genalign

from genalign.rewards.code_execution import CodeExecution
from genalign.rewards.sandbox import SandboxLimits, run_sandboxed

#: the harness this branch replaced (genalign 9e5259f), for the comparison only: it can be forged
OLD_HARNESS = """\
import sys as _sys
_token = _sys.stdin.readline().strip()
_namespace = {{"__name__": "__solution__", "__builtins__": __builtins__}}
exec(compile({program!r}, "<solution>", "exec"), _namespace)
exec(compile({test!r}, "<tests>", "exec"), _namespace)
_sys.stdout.flush()
_sys.stdout.write("\\n" + _token + "\\n")
"""


def make_rows(count: int) -> list[dict[str, str]]:
    """``count`` correct solutions, each with 3 MBPP-style asserts and a HumanEval-style check."""
    rows = []
    for index in range(count):
        name, k = f"combine_{index}", index % 7 + 2
        program = f"def {name}(x, y):\n    return [x * {k} + y, (x, y)]\n"
        cases = [(1, 2), (index, -3), (5, index)]
        asserts = [f"assert {name}({x}, {y}) == [{x * k + y}, ({x}, {y})]" for x, y in cases]
        check = "def check(candidate):\n" + "".join(
            f"    assert candidate({x}, {y}) == [{x * k + y}, ({x}, {y})]\n" for x, y in cases
        )
        rows.append({"program": program, "name": name, "asserts": asserts, "check": check})
    return rows


def old_scores(rows: list[dict], style: str, limits: SandboxLimits, max_parallel: int) -> list[float]:
    """The old harness: one sandbox per assert (MBPP) or per check (HumanEval), a token read back from stdout."""
    runs = []
    for row_index, row in enumerate(rows):
        tests = row["asserts"] if style == "mbpp" else [row["check"] + f"\n\ncheck({row['name']})\n"]
        runs += [(row_index, row["program"], test) for test in tests]

    def one(run: tuple[int, str, str]) -> bool:
        token = secrets.token_hex(16)
        program = OLD_HARNESS.format(program=run[1], test=run[2])
        result = run_sandboxed(program, stdin=token + "\n", limits=limits)
        lines = result.stdout.rstrip("\n").splitlines()
        return result.status == "ok" and bool(lines) and lines[-1] == token

    with ThreadPoolExecutor(max_workers=max_parallel) as pool:
        passed = list(pool.map(one, runs))
    totals, hits = [0] * len(rows), [0] * len(rows)
    for (row_index, _, _), ok in zip(runs, passed, strict=True):
        totals[row_index] += 1
        hits[row_index] += int(ok)
    return [hit / total for hit, total in zip(hits, totals, strict=True)]


def new_scores(rows: list[dict], style: str, limits: SandboxLimits, max_parallel: int) -> list[float]:
    reward = CodeExecution(timeout_s=limits.timeout_s, memory_mb=limits.memory_mb, max_parallel=max_parallel)
    completions = [f"```python\n{row['program']}```" for row in rows]
    if style == "mbpp":
        scores = reward([""] * len(rows), completions, tests=[row["asserts"] for row in rows])
    else:
        codes, entries = [row["check"] for row in rows], [row["name"] for row in rows]
        scores = reward([""] * len(rows), completions, test_code=codes, entry_point=entries)
    return [float(score) for score in scores]


def measure(score: Callable[[], list[float]]) -> tuple[float, float]:
    """Wall and children's CPU seconds of one scoring pass; raises if a correct solution did not score 1."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    scores = score()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if scores != [1.0] * len(scores):
        raise RuntimeError(f"a correct solution did not score 1: {scores}")
    return wall, (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64, help="Correct solutions scored per pass.")
    parser.add_argument("--repeats", type=int, default=5, help="Passes of old and new, alternating.")
    parser.add_argument("--max-parallel", type=int, default=4, help="Sandboxes at once (code_execution's default).")
    parser.add_argument("--smoke", action="store_true", help="Seconds: 4 rows, 1 repeat, nothing written.")
    parser.add_argument("--out", type=Path, default=None, help="Where to write the table (default: see docstring).")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.repeats = 4, 1
    limits = SandboxLimits(timeout_s=5.0, memory_mb=512)
    rows = make_rows(args.rows)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    started = time.perf_counter()
    for _ in range(args.repeats):
        for style in ("mbpp", "humaneval"):
            for harness, score in (("old", old_scores), ("new", new_scores)):
                outcome = measure(lambda score=score, style=style: score(rows, style, limits, args.max_parallel))
                results.setdefault((style, harness), []).append(outcome)
    elapsed = time.perf_counter() - started

    lines = [
        "| style (tests per row) | old wall s | new wall s | new / old wall | old CPU s | new CPU s | new / old CPU |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for style, label in (("mbpp", "MBPP asserts (3)"), ("humaneval", "HumanEval check (1)")):
        old_wall, old_cpu = (statistics.median(v) for v in zip(*results[(style, "old")], strict=True))
        new_wall, new_cpu = (statistics.median(v) for v in zip(*results[(style, "new")], strict=True))
        lines.append(
            f"| {label} | {old_wall:.2f} | {new_wall:.2f} | {new_wall / old_wall:.2f}x | {old_cpu:.2f} | "
            f"{new_cpu:.2f} | {new_cpu / old_cpu:.2f}x |"
        )
    load = os.getloadavg()[0]
    header = (
        f"`benchmarks/bench_code_execution.py --rows {args.rows} --repeats {args.repeats} --max-parallel "
        f"{args.max_parallel}` ({platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"uid {os.geteuid()}, load average {load:.1f} at the end, {elapsed:.0f} s). Medians over the repeats of "
        f"scoring {args.rows} correct solutions; every one scored 1.0 with both harnesses."
    )
    table = header + "\n\n" + "\n".join(lines) + "\n"
    print(table)
    out = args.out or (None if args.smoke else Path(__file__).with_name("code_execution_results.md"))
    if out is not None:
        out.write_text("# Code execution: old (forgeable) harness vs test sessions\n\n" + table)


if __name__ == "__main__":
    main()
