"""Sample sources across two data-parallel processes (torchrun, gloo, DDP): extra sampling rounds, replayed
completions (action ids gathered across processes with different completion widths) and reference solutions, each
sampled or built by the process that owns the prompt, train to the end without a deadlock, and the rules' decisions
cover both processes' samples."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from tests import prepared_python

pytestmark = pytest.mark.heavy(cpu_s=20)  # scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")

CONFIG = {
    "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "use_chat_template": False, "max_prompt_tokens": 16,
               "max_new_tokens": 6},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8, "seed": 0, "digits": 3}}},
    "rewards": [{"fn": "exact_match", "name": "accuracy"}],
    "algorithm": {
        "group_size": 4, "prompts_per_step": 4, "micro_batch_size": 32, "clip": "off_policy",
        "sample_sources": ["dars", {"name": "gcpo", "solution_column": "answer"},
                           {"name": "repo", "replays": 2, "strategy": "recent", "per_prompt": 8, "min_stored": 4}],
    },
    "eval": {"at_start": False, "every": 0},
    "run": {"max_steps": 4, "save_every": 2, "progress_bar": False, "num_threads": 1, "distributed": "ddp"},
}  # fmt: skip


def test_rounds_replay_and_references_in_two_processes(tmp_path):
    config = {**CONFIG, "run": {**CONFIG["run"], "output_dir": str(tmp_path / "run")}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = prepared_python.run([*TORCHRUN, "-m", "genalign.cli", "train", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert sum(s["sampling/extra_samples"] for s in steps) > 0, "DARS drew no extra samples"
    assert sum(s.get("sampling/forced_replay", 0.0) for s in steps) > 0, "RePO replayed nothing"
    for s in steps:  # the stage's counts are global: both processes' samples
        assert s["sampling/rounds"] >= 1.0
        assert s["num_samples"] <= 4 * 4 + s["sampling/extra_samples"] + s.get("sampling/forced_replay", 0.0) + s.get(
            "sampling/forced_reference", 0.0
        )  # this process's share of the step's samples
    state = json.loads((tmp_path / "run" / "checkpoints" / "step-4" / "trainer_state.json").read_text())
    assert set(state["extra"]["components"]["sample_sources"]) == {"dars", "gcpo", "repo"}
