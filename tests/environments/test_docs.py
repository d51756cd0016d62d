"""docs/environments.md: its Python blocks run, in order, in a fresh process (their registrations stay out of this
one), and it names every registered environment, tool, task and error kind."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from genalign.environments import ENVIRONMENTS, ERROR_KINDS, TASKS, TOOLS
from tests import prepared_python

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "environments.md"


def test_the_page_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) >= 3, "the page lost its examples"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = prepared_python.run(
        [sys.executable, "-c", "\n\n".join(blocks)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_the_page_names_every_registered_option_and_error_kind():
    text = PAGE.read_text()
    names = [*ENVIRONMENTS.names(), *TOOLS.names(), *TASKS.names(), *ERROR_KINDS]
    missing = [name for name in names if f"`{name}`" not in text]
    assert not missing, f"docs/environments.md does not mention {missing}"
