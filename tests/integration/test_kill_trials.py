"""The SIGKILL benchmark's smoke mode: two kills at random moments, then a resume to the end, nothing lost."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import prepared_python

pytestmark = pytest.mark.heavy(cpu_s=25)  # scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]


def test_kill_trials_smoke_mode_loses_nothing():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    script = str(ROOT / "benchmarks" / "bench_kill_trials.py")
    proc = prepared_python.run([sys.executable, script, "--smoke"], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=600, fork_descendants=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '"unloadable": 0' in proc.stdout and '"failed_resumes": 0' in proc.stdout
