"""The VLM demo trains one step with the token-credit options of issue 29 item 3 that read the VLM family's signals:
DyCo's attention-role weights ([199], score feature ``modality_attention``) and token-judge rewards ([155], [224],
rollout signal ``token_judgement``)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from genalign.config import load_config
from genalign.trainer import train

pytestmark = pytest.mark.heavy(cpu_s=15)  # scheduled first (tests/conftest.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]


def test_modality_roles_and_judged_tokens_train_the_vlm(tmp_path):
    overrides = [
        "algorithm.credit=[modality_alignment_weights, {name: judged_token_rewards, weight: 0.2}]",
        "policy.token_judge.judge={name: reference_diff, reference_column: answer}",
        "algorithm.prompts_per_step=2", "algorithm.group_size=2", "algorithm.micro_batch_size=4",
        "policy.max_new_tokens=6", "data.train.args.size=4", "data.eval.args.size=2", "eval.num_prompts=2",
        "eval.batch_size=2", "eval.at_start=false", "run.max_steps=1", "run.sample_every=0", "run.save_every=0",
        f"run.output_dir={tmp_path / 'run'}",
    ]  # fmt: skip
    torch.manual_seed(0)
    train(load_config(ROOT / "configs" / "demo_shapes_vlm_grpo.yaml", overrides))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if "loss" in json.loads(line)]
    assert [r["step"] for r in records] == [1] and math.isfinite(records[0]["loss"])
