"""A run folder is portable: a run started from a Python script in one folder, moved to another path, works from a
third folder with genalign sample, export and eval; the rewards of the script are recorded by name and only the
commands that score need them (with a clear message when they cannot be reloaded)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import prepared_python

pytestmark = pytest.mark.heavy(cpu_s=40)  # scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
SCRIPT = """
import genalign
from genalign.policies.lm.tiny import build_tiny_causal_lm

build_tiny_causal_lm("models/tiny", vocab_size=96)
rows = [{"prompt": f"{a} + 1 =", "answer": str(a + 1)} for a in range(8)]

def says_answer(prompts, completions, answer, **columns):
    return [float(a in c.split()) for c, a in zip(completions, answer)]

config = {
    "policy": {"family": "causal_lm", "model": "models/tiny", "max_new_tokens": 3},
    "data": {"eval": {"source": "eval.jsonl"}},
    "algorithm": {"group_size": 2, "prompts_per_step": 2},
    "eval": {"at_start": False, "num_prompts": 2},
    "run": {"output_dir": "runs/py", "max_steps": 1, "progress_bar": False},
}
genalign.train(config, train_dataset=rows, rewards=[says_answer])
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return prepared_python.run(args, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)


def genalign(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run(sys.executable, "-m", "genalign.cli", *args, cwd=cwd)


def test_a_run_moved_elsewhere_samples_exports_and_evaluates_from_a_third_folder(tmp_path):
    started, moved, elsewhere = tmp_path / "a", tmp_path / "b" / "moved", tmp_path / "c"
    for folder in (started, moved.parent, elsewhere):
        folder.mkdir(parents=True)
    (started / "eval.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{a} + 2 =", "answer": "x"}) + "\n" for a in "12")
    )
    (started / "train.py").write_text(SCRIPT)
    trained = run(sys.executable, "train.py", cwd=started)
    assert trained.returncode == 0, trained.stderr[-3000:]
    saved = yaml.safe_load((started / "runs" / "py" / "config.yaml").read_text())
    assert saved["run"]["output_dir"] == "." and saved["policy"]["model"] == str(started / "models" / "tiny")
    assert saved["data"]["eval"]["source"] == str(started / "eval.jsonl")
    assert saved["data"]["train"]["source"].startswith("python:rows=8,")
    assert saved["rewards"][0]["fn"] == "__main__:says_answer"
    shutil.move(started / "runs" / "py", moved)

    sampled = genalign("sample", str(moved), "--prompt", "3 + 1 =", cwd=elsewhere)
    assert sampled.returncode == 0, sampled.stderr[-3000:]
    assert json.loads(sampled.stdout.splitlines()[0])["checkpoint"].startswith(str(moved))
    exported = genalign("export", str(moved / "checkpoints" / "step-1"), "exported", cwd=elsewhere)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert (elsewhere / "exported" / "config.json").is_file()

    scored = genalign("sample", str(moved), "--prompt", "3 + 1 =", "--score", cwd=elsewhere)
    assert scored.returncode == 2 and "function of the script that started the run" in scored.stderr
    refused = genalign("eval", str(moved / "config.yaml"), cwd=elsewhere)
    assert refused.returncode == 2 and "__main__:says_answer" in refused.stderr
    assert "path/to/my_rewards.py:says_answer" in refused.stderr
    evaluated = genalign("eval", str(moved / "config.yaml"), "rewards=[{fn: exact_match}]", cwd=elsewhere)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads((moved / "eval.json").read_text())["checkpoint"] == str(moved / "checkpoints" / "step-1")
