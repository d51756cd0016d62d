"""The demo dashboards committed under docs/images exist, the README shows them, and scripts/make_dashboards.py (the
one command that regenerates them) runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from PIL import Image

from genalign.trainer.dashboard import RunInfo, build_panels, read_logs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from make_dashboards import DEMOS  # noqa: E402

from tests import prepared_python  # noqa: E402

pytestmark = pytest.mark.heavy(cpu_s=20)  # scheduled first (tests/conftest.py)


def test_the_committed_dashboards_are_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for _, image, _ in DEMOS.values():
        path = ROOT / "docs" / "images" / image
        assert Image.open(path).size[0] >= 1000, path
        assert f"docs/images/{image}" in readme


def test_the_script_draws_a_dashboard_named_panel_by_panel(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(ROOT / "scripts" / "make_dashboards.py"), "--smoke", "--demos", "chain",
               "--work", str(tmp_path)]  # fmt: skip
    proc = prepared_python.run(command, env=env, capture_output=True, text=True, timeout=600, fork_descendants=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "demo_chain_grpo"
    assert (run / "demo_chain_grpo_dashboard.png").exists() and "held-out accuracy (accuracy): best" in proc.stdout
    panels, _ = build_panels(*read_logs(run), RunInfo.of(run))
    titles = [p.title for p in panels]
    assert titles[:4] == ["reward: accuracy", "reward: progress", "combined reward (weighted)",
                          "held-out rewards (accuracy: accuracy)"]  # fmt: skip
    assert {"loss", "entropy", "completion length (tokens)", "gradient norm (before clipping)"} <= set(titles)
