"""``benchmarks/bench_plan.py --smoke``: trains the tiny cases in a fresh process, prints estimate vs measured, and
writes nothing into benchmarks/. The script itself (model folders, plans) runs in this process
(tests/benchmarks/in_process.py); the measured cases run in the fresh process the script starts."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks.in_process import run_script

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_mode_measures_both_cases_and_writes_nothing():
    before = {p.name for p in (ROOT / "benchmarks").iterdir()}
    done = run_script("bench_plan.py", ["--smoke"], cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith(("| lm", "| flow"))]
    assert {row[0].strip() for row in rows} == {"lm", "flow"}
    for row in rows:
        planned, measured = float(row[7]), float(row[8])
        assert planned > 0 and measured > 0
    assert {p.name for p in (ROOT / "benchmarks").iterdir()} == before
