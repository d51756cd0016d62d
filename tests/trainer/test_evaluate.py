"""Held-out evaluation records the rollouts' event counts (``Rollout.counts``: a multi-turn rollout's turns, tool
calls by outcome) summed over its batches, under ``eval/rollout/``."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from genalign.config.schema import RewardSpec
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.multi_turn_options import MultiTurnOptions
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.trainer.evaluate import evaluate
from genalign.trainer.rewards import RewardSet

torch.set_num_threads(1)

SCRIPT = [
    '<tool_call>{"name": "add", "arguments": {"a": 1, "b": </tool_call>',  # bad_json
    '<tool_call>{"name": "ad", "arguments": {"a": 1, "b": 2}}</tool_call>'  # unknown_tool
    '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',  # ok
]


def test_an_evaluation_records_the_tool_counts_of_its_rollouts(tmp_path):
    environment = {"name": "tests.policies.lm.scripted_environments:ScriptedTools", "script": SCRIPT}
    config = CausalLMPolicyConfig(model=str(build_tiny_causal_lm(tmp_path / "model", vocab_size=96)),
                                  max_new_tokens=3, use_chat_template=True,
                                  multi_turn=MultiTurnOptions(environments=environment))  # fmt: skip
    policy = build_policy(config, "cpu")
    rewards = RewardSet([RewardSpec(fn="tool_calls")])
    rows = [{"prompt": f"{i} + 1 ="} for i in range(5)]
    result = evaluate(policy, rows, rewards, batch_size=2, accuracy_reward=None)  # batches of 2, 2 and 1 prompts
    # each of the 5 trajectories: 2 turns, 3 calls (bad_json in turn 1; unknown_tool and ok in turn 2)
    assert result["eval/rollout/trajectories"] == 5 and result["eval/rollout/turns"] == 10
    assert result["eval/rollout/tools/calls"] == 15
    assert result["eval/rollout/tools/bad_json"] == result["eval/rollout/tools/unknown_tool"] == 5
    assert result["eval/rollout/tools/ok"] == 5 and result["eval/rollout/tools/timeout"] == 0
    assert result["eval/rollout/completion_tokens"] == result["eval/rollout/generated_tokens"] > 0  # counts: summed
    assert "eval/rollout/turns_per_trajectory" not in result, "info entries are batch facts, not summed counts"
