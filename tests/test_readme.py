"""The README's backend snippet runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_backend_snippet_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    snippet = next(b for b in blocks if "compute_advantages" in b)
    scope: dict = {}
    exec(compile(snippet, "README.md", "exec"), scope)
    assert scope["logp"].grad is not None and scope["metrics"]["ratio_mean"] == 1.0
