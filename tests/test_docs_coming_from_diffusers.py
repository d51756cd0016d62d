"""docs/coming_from_diffusers.md: its Python block (Flow-GRPO from Python on the bundled text-to-image model with a
reward on PIL images) runs in a fresh process in an empty folder."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from tests import prepared_python

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "coming_from_diffusers.md"


def test_the_diffusers_page_example_runs(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert blocks, "the page lost its example"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = prepared_python.run(
        [sys.executable, "-c", "\n\n".join(blocks)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "runs" / "flow" / "checkpoints").is_dir()
