"""The preference objective runs on the flow demo: configs/demo_shapes_flow_dpo.yaml (DPO on pairs formed inside each
group of images by reward, per-step SDE log-probs against the LoRA-free reference) trains 2 steps of the embedded
text-to-image model in tiny sizes, in process."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from genalign.config import load_config
from genalign.trainer import train

pytestmark = pytest.mark.heavy(cpu_s=10)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PRESET = Path(__file__).resolve().parents[2] / "configs" / "demo_shapes_flow_dpo.yaml"
TINY = [
    "policy.num_steps=4", "policy.eval_num_steps=2", "policy.lora.rank=4", "policy.lora.alpha=8.0",
    "policy.sample_batch_size=8", "policy.train_steps.fraction=0.5",
    "algorithm.group_size=4", "algorithm.prompts_per_step=2", "algorithm.micro_batch_size=8",
    "data.train.args.size=32", "data.eval.args.size=4", "eval.num_prompts=4", "eval.batch_size=4",
    "eval.at_start=false", "eval.every=0", "run.max_steps=2", "run.max_time_minutes=null", "run.sample_every=0",
    "run.progress_bar=false", "run.num_threads=1",
]  # fmt: skip


def test_the_flow_dpo_preset_trains_two_steps_of_the_demo_model(tmp_path):
    torch.manual_seed(0)
    config = load_config(PRESET, [*TINY, f"run.output_dir={tmp_path}"])
    assert config.algorithm.objective.name == "group_dpo" and config.policy.family == "flow"
    assert config.algorithm.aggregation.name == "seq_mean_token_mean"
    train(config)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["loss"]) and math.isfinite(record["grad_norm"]), record
        # a step with pairs has a DPO loss (log 2 per pair before the policy leaves the reference) and a gradient
        if record["dpo/pairs"] > 0:
            assert record["loss"] > 0 and record["grad_norm"] > 0, record
    assert any(r["dpo/pairs"] > 0 for r in records), "the partial-credit rewards of 4 images should differ"
    assert records[0]["dpo/margin"] == 0.0  # step 1: the LoRA starts at zero, the policy is the reference
