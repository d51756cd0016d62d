"""``benchmarks/grader_comparison.py --smoke``: one pair per kind through both math graders (math-verify in the
sandbox), the report's tables printed, nothing written into benchmarks/. The full table is
benchmarks/grader_comparison_results.md. The script runs in this process (tests/benchmarks/in_process.py); math-verify
runs in the sandbox's processes."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from genalign.rewards.math_answers.math_verify_grader import math_verify_available, math_verify_paths
from genalign.rewards.sandbox.interpreter import reachable_by_others
from tests.benchmarks.in_process import run_script

ROOT = Path(__file__).resolve().parents[2]


def _unusable() -> str | None:
    if not sys.platform.startswith("linux"):
        return "the sandbox needs Linux"
    if not math_verify_available():
        return "math-verify is not installed: pip install 'genalign[math]'"
    if os.geteuid() == 0 and not all(reachable_by_others(path) for path in math_verify_paths()):
        return "math-verify's folder is not readable by the sandbox's unprivileged uid"
    return None


@pytest.mark.skipif(_unusable() is not None, reason=_unusable() or "")
def test_grader_comparison_smoke_reports_both_graders():
    pytest.importorskip("reasoning_gym", reason="the corpus takes answers from reasoning-gym: pip install -e '.[data]'")
    before = {p.name for p in (ROOT / "benchmarks").iterdir()} - {"__pycache__"}
    proc = run_script("grader_comparison.py", ["--smoke"], cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for measure in ("agreement of the two graders", "genalign accuracy", "math-verify accuracy"):
        match = re.search(rf"\| {measure}[^|]*\| \*\*([\d.]+)%\*\*", out)
        assert match and 0 <= float(match.group(1)) <= 100, measure
    assert "## Disagreements, by class" in out and "| reasoning-gym |" in out
    assert {p.name for p in (ROOT / "benchmarks").iterdir()} - {"__pycache__"} == before
