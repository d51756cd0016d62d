"""The SIGTERM / SIGINT benchmark's smoke mode: two signals at random steps, each saving the step reached, and the
resumed run equal to the uninterrupted one."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import prepared_python

pytestmark = pytest.mark.heavy(cpu_s=40)  # scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]


def test_signal_trials_smoke_mode_saves_the_step_reached_and_resumes_exactly():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    script = str(ROOT / "benchmarks" / "bench_signal_trials.py")
    proc = prepared_python.run([sys.executable, script, "--smoke"], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=600, fork_descendants=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '"checkpoint_of_the_step_reached": 2' in proc.stdout and '"all_metrics_identical": true' in proc.stdout
