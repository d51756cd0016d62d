"""docs/coming_from_trl.md: its Python blocks run, in order, in one fresh process in an empty folder (the script trains
a tiny Qwen2 from an in-memory dataset with two callable rewards, then the conversational variant); the script stays
within 25 lines."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import yaml

from tests import prepared_python

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "coming_from_trl.md"


def page_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_script_is_short():
    blocks = page_blocks()
    assert len(blocks) >= 2, "the page lost its examples"
    assert len(blocks[0].strip().splitlines()) <= 25


def test_the_trl_page_examples_run(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = prepared_python.run(
        [sys.executable, "-c", "\n\n".join(page_blocks())], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    for run in ("from_trl", "from_trl_chat"):
        saved = yaml.safe_load((tmp_path / "runs" / run / "config.yaml").read_text())
        assert saved["data"]["train"]["source"].startswith("python:rows=16,")
        assert saved["rewards"][0]["fn"].startswith("__main__:correct")
