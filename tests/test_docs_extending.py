"""docs/extending.md: every block headed ``# file: PATH`` is written to that path in a fresh folder, and every other
Python block runs, in order, in a fresh process from the repository root with that folder on the path (its registrations stay out of this
one)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from tests import prepared_python

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"
FILE_HEADER = re.compile(r"# file: (\S+)\n")


def page_blocks() -> tuple[dict[str, str], list[str]]:
    """``({path: source}, [script blocks])`` of the page's Python blocks."""
    files, script = {}, []
    for block in re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S):
        header = FILE_HEADER.match(block)
        if header:
            files[header.group(1)] = block
        else:
            script.append(block)
    return files, script


def test_the_extending_page_examples_run(tmp_path):
    files, script = page_blocks()
    assert {"letters/signals.py", "letters/family.py", "my_methods/calm_credit.py"} <= set(files)
    assert {"my_methods/running_baseline.py", "my_architectures/sd3_feed_forward.py"} <= set(files)
    assert len(script) >= 6, "the page lost its examples"
    for relative, source in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(source)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}
    proc = prepared_python.run(
        [sys.executable, "-c", "\n\n".join(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_the_signal_example_touches_no_trainer_file():
    files, _ = page_blocks()
    for source in (files["letters/signals.py"], files["letters/family.py"], files["my_methods/calm_credit.py"]):
        assert "genalign.trainer" not in source
