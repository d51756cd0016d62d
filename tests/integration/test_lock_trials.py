"""The concurrent-start benchmark's smoke mode: two trainers entering `train()` together on one run directory, fresh
and resumed: exactly one runs, the other is refused naming it, every step is logged once."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import prepared_python

pytestmark = pytest.mark.heavy(cpu_s=30)  # scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]


def test_lock_trials_smoke_mode_lets_exactly_one_trainer_run():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    script = str(ROOT / "benchmarks" / "bench_lock_trials.py")
    proc = prepared_python.run([sys.executable, script, "--smoke"], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=600, fork_descendants=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '"exactly_one_ran": 2' in proc.stdout and '"refusal_named_the_holder": 2' in proc.stdout
