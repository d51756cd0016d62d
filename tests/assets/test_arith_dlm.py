"""The bundled demo masked diffusion LM ``builtin:arith-dlm``: loads, generates, and is partly right by design."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from genalign.assets import resolve
from genalign.data.procedural import arithmetic
from genalign.policies.dlm.policy import DiffusionLMPolicyConfig, build_policy
from genalign.rewards.text import exact_match


def test_asset_folder_holds_weights_tokenizer_card_and_log():
    folder = resolve("builtin:arith-dlm")
    for name in ["model.safetensors", "config.json", "tokenizer.json", "MODEL_CARD.md", "pretraining_log.json"]:
        assert (folder / name).is_file(), name
    log = json.loads((folder / "pretraining_log.json").read_text())
    assert log["digits"] == 2 and log["gen_length"] == 4


def test_demo_model_is_small_and_partly_right_with_diversity_under_temperature():
    torch.manual_seed(0)
    policy = build_policy(DiffusionLMPolicyConfig(model="builtin:arith-dlm"))
    params = sum(p.numel() for p in policy.model.parameters())
    assert 0.5e6 < params < 5e6
    rows = arithmetic(64, 0, digits=2, split="eval")
    greedy = policy.rollout(rows, group_size=1, mode="eval")
    accuracy = sum(exact_match(None, greedy.outputs, [r["answer"] for r in greedy.rows])) / len(rows)
    assert 0.1 <= accuracy <= 0.7  # partly right: room for RL, signal for it
    sampled = policy.rollout(rows[:16], group_size=8, mode="train")
    rewards = torch.tensor(exact_match(None, sampled.outputs, [r["answer"] for r in sampled.rows])).view(16, 8)
    assert (rewards.std(dim=1) > 0).sum() >= 4  # several groups hold both right and wrong answers
