"""The credit rules that read rollout-time probes, raw-logit statistics or the raw reward table train the LM demo:
the trainer requests the structure (with the reward probe for Monte-Carlo values), the scoring pass before the update
returns ``logit_stats``, and ``StepBatch`` carries the rewards."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from genalign.trainer import train
from tests.integration.test_method_catalogue import demo_config

os.environ.setdefault("HF_HUB_OFFLINE", "1")

RUNS = {
    "segment_mc": ["algorithm.credit=[segment_mc]", "policy.probes.value_samples=2"],
    "step_potential": ["algorithm.credit=[step_potential, belief_progress]"],
    "uncertainty_shaping": ["algorithm.credit=[uncertainty_shaping]"],
    "self_distill_magnitude": ["algorithm.credit=[self_distill_magnitude, spurious_tokens]"],
    "blockwise": ["algorithm.credit=[blockwise]", "policy.probes.block_markers=['0']"],
    "rubric_contrast": ["algorithm.credit=[rubric_contrast]", "policy.probes.counterfactual_column=operator"],
}


@pytest.mark.parametrize("overrides", list(RUNS.values()), ids=list(RUNS))
def test_probe_reading_credit_rules_train_the_lm_demo(overrides, tmp_path):
    torch.manual_seed(0)
    result = train(demo_config(overrides, tmp_path))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in records)
    assert 0.0 <= result["eval/accuracy"] <= 1.0
