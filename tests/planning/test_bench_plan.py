"""``benchmarks/bench_plan.py --smoke``: trains the tiny cases in fresh processes, prints estimate vs measured, and
writes nothing into benchmarks/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_mode_measures_both_cases_and_writes_nothing():
    before = {p.name for p in (ROOT / "benchmarks").iterdir()}
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_plan.py", "--smoke"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith(("| lm", "| flow"))]
    assert {row[0].strip() for row in rows} == {"lm", "flow"}
    for row in rows:
        planned, measured = float(row[7]), float(row[8])
        assert planned > 0 and measured > 0
    assert {p.name for p in (ROOT / "benchmarks").iterdir()} == before
