"""docs/walkthrough.md runs as written: its files are written into a fresh folder and its commands run in order."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests import prepared_python

pytestmark = pytest.mark.heavy(cpu_s=20)  # scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "walkthrough.md"


def test_the_walkthrough_runs_as_written(tmp_path, monkeypatch, capsys):
    """``python`` commands run as processes; ``genalign`` commands through the command's entry point
    (``genalign.cli:main``) in this process, in the page's folder."""
    from genalign.cli import main

    text = PAGE.read_text()
    files = re.findall(r"```\w+ file=(\S+)\n(.*?)```", text, flags=re.S)
    commands = [line for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S) for line in block.splitlines()]
    assert {name for name, _ in files} >= {"make_models.py", "prompts.jsonl", "my_rewards.py", "lm.yaml", "t2i.yaml"}
    for name, content in files:
        (tmp_path / name).write_text(content)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    monkeypatch.chdir(tmp_path)
    outputs = {}
    for command in commands:
        argv = shlex.split(command)
        if argv[0] == "python":
            proc = prepared_python.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=600)  # fmt: skip
            assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            outputs[command] = proc.stdout
            continue
        assert argv[0] == "genalign", command
        capsys.readouterr()
        code = main(argv[1:])
        out, err = capsys.readouterr()
        assert code == 0, f"{command}\n{out[-2000:]}\n{err[-3000:]}"
        outputs[command] = out
    assert [json.loads(line)["step"] for line in (tmp_path / "runs/lm/metrics.jsonl").read_text().splitlines()] == [
        1,
        2,
        3,
    ]
    assert (tmp_path / "runs/t2i/checkpoints/step-3/policy/pytorch_lora_weights.safetensors").exists()
    sample = json.loads(outputs['genalign sample runs/lm/config.yaml --prompt "1 + 2 ="'])
    assert sample["checkpoint"].endswith("runs/lm/checkpoints/step-3")
    assert json.loads(outputs["genalign eval runs/lm/config.yaml"])["eval/num_prompts"] == 4
    assert (tmp_path / "samples" / "sample-0.png").exists()
    compare = [
        json.loads(line)
        for line in outputs["genalign sample runs/t2i --num 2 --score --compare base --out compare"].splitlines()
    ]
    assert len(compare) == 4 * 2 and set(compare[0]["trained"]["rewards"]) == {"redness"}  # 4 prompts x 2 samples
    assert (tmp_path / "compare" / "grid.png").exists() and (tmp_path / "compare" / "base-0.png").exists()
    assert "3 of 3 steps" in outputs["genalign report runs/lm"] and (tmp_path / "runs/lm/dashboard.png").exists()
