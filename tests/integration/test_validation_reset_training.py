"""REVA-PO's VAPR [18] through the trainer on the LM demo: ``eval.reset_to_best_every`` resets the policy and its
frozen reference copy to the best evaluation's weights after the due evaluation, and a run resumed from the
checkpoint written after the reset (the straight run's own, as after a kill) logs the same metrics (KL to the moved reference included) as the straight run."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from genalign.config import ConfigError
from genalign.trainer import train
from tests.integration.test_method_catalogue import demo_config

pytestmark = pytest.mark.heavy(cpu_s=20)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
VAPR = ["eval.at_start=true", "eval.every=1", "eval.reset_to_best_every=2", "algorithm.kl_coef=0.05",
        "algorithm.minibatches=1", "run.save_every=2", "run.keep_last=3", "optim.lr=3e-3"]  # fmt: skip


def records(folder: Path) -> list[dict]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines]


def test_the_reset_moves_policy_and_reference_and_resumes_exactly(tmp_path, capsys):
    train(demo_config([*VAPR, "run.max_steps=4"], tmp_path / "straight"))
    assert "step 2: policy and reference reset to the best evaluation" in capsys.readouterr().out
    straight = records(tmp_path / "straight")
    assert all(r["kl"] == r["kl"] for r in straight)

    # the straight run killed after its step-2 checkpoint (written after the reset), then resumed from it
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    saved = tmp_path / "resumed" / "checkpoints" / "step-2"
    train(demo_config([*VAPR, "run.max_steps=4", f"run.resume={saved}"], tmp_path / "resumed"))
    assert records(tmp_path / "resumed") == straight


def test_a_lora_policy_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"needs full fine-tuning \(policy.lora.rank = 0, got 4\)"):
        demo_config([*VAPR, "policy.lora.rank=4"], tmp_path)
    with pytest.raises(ConfigError, match=r"must be 0 \(off\) or a positive multiple of eval.every = 3"):
        demo_config(["eval.every=3", "eval.reset_to_best_every=2"], tmp_path)
