"""``benchmarks/bad_inputs.py --smoke``: a handful of bad inputs (a config value, a seed, an empty output folder, a
YAML python tag, a broken override, a data file of invalid UTF-8) each end in a clear error, in seconds; nothing is
written into benchmarks/. The full table (every case through a subprocess) is benchmarks/bad_inputs_results.md. The
script runs in this process (tests/benchmarks/in_process.py); its first case still goes through a subprocess."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks.in_process import run_script

ROOT = Path(__file__).resolve().parents[2]


def test_bad_inputs_smoke_has_no_failure():
    before = {p.name for p in (ROOT / "benchmarks").iterdir()}
    proc = run_script("bad_inputs.py", ["--smoke"], cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    outcomes = {cells[1].strip(): cells[3].strip() for cells in rows[1:]}  # rows[0] is the header
    assert len(outcomes) >= 6 and set(outcomes.values()) == {"clear error"}, outcomes
    assert ", 0 failures." in proc.stdout
    assert {p.name for p in (ROOT / "benchmarks").iterdir()} - {"__pycache__"} == before - {"__pycache__"}
