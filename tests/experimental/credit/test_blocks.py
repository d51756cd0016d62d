"""Blockwise advantages [56] against hand values: each reward credits its own block, and a later block's baseline is
stratified by the earlier block's outcome; config acceptance needs block markers on the policy."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.config import from_dict
from genalign.config.core import ConfigError
from genalign.config.schema import TrainConfig

F64 = torch.float64
# one group of four: column 0 = answer correctness (block 0), column 1 = a calibration reward (block 1)
REWARDS = torch.tensor([[1.0, 0.9], [1.0, 0.5], [0.0, 0.8], [0.0, 0.2]])
BLOCKS = torch.tensor([[0, 0, 1, 1]] * 4)
MASK = torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]])


def inputs() -> StepBatch:
    return StepBatch(sample_advantages=torch.zeros(4, dtype=F64), mask=MASK, group_ids=torch.zeros(4, dtype=torch.long), rewards=REWARDS, block_ids=BLOCKS)  # fmt: skip


def test_each_block_gets_its_own_reward_with_an_outcome_conditioned_baseline():
    out = CREDIT_RULES.get("blockwise")(torch.zeros(4, 4, dtype=F64), inputs(), normalize=False)
    # block 0: correctness minus the group mean 0.5 -> ±0.5
    # block 1: the calibration reward minus the mean of the samples with the SAME block-0 outcome:
    #   correct {0, 1}: mean 0.7 -> +0.2, -0.2; incorrect {2, 3}: mean 0.5 -> +0.3, -0.3
    #   (an unconditioned baseline, the group mean 0.6, would give +0.3, -0.1, +0.2, -0.4)
    expected = torch.tensor(
        [[0.5, 0.5, 0.2, 0.2], [0.5, 0.5, -0.2, -0.2], [-0.5, -0.5, 0.3, 0.3], [-0.5, -0.5, -0.3, 0.0]]
    )
    torch.testing.assert_close(out.float(), expected)


def test_blockwise_normalises_by_the_group_std_of_each_block_reward():
    out = CREDIT_RULES.get("blockwise")(torch.zeros(4, 4, dtype=F64), inputs(), eps=0.0)
    # unbiased std of block 0 rewards [1, 1, 0, 0]: sqrt(4 · 0.25 / 3) = 0.57735 -> ±0.5 / 0.57735 = ±0.866025
    # block 1 rewards [0.9, 0.5, 0.8, 0.2]: mean 0.6, squares 0.09, 0.01, 0.04, 0.16 -> std sqrt(0.3 / 3) = 0.316228
    assert out[0, 0].item() == pytest.approx(0.866025, abs=1e-5)
    assert out[0, 2].item() == pytest.approx(0.2 / 0.316228, abs=1e-5)
    assert out[3, 2].item() == pytest.approx(-0.3 / 0.316228, abs=1e-5)


def test_rewards_map_to_blocks_and_bad_mappings_are_rejected():
    # both rewards on block 0: block reward = sum; block 1 (none of the rewards) gets NaN reward -> advantage 0
    out = CREDIT_RULES.get("blockwise")(torch.zeros(4, 4, dtype=F64), inputs(), reward_blocks=[0, 0], normalize=False)
    # sums 1.9, 1.5, 0.8, 0.2 (mean 1.1) -> 0.8, 0.4, -0.3, -0.9 on every valid action (one block)
    torch.testing.assert_close(out[:, 0].float(), torch.tensor([0.8, 0.4, -0.3, -0.9]))
    torch.testing.assert_close(out[:, 3].float(), torch.tensor([0.8, 0.4, -0.3, 0.0]))
    with pytest.raises(ValueError, match="reward_blocks"):
        CREDIT_RULES.get("blockwise")(torch.zeros(4, 4, dtype=F64), inputs(), reward_blocks=[0])


def _config(**policy) -> TrainConfig:
    return from_dict(
        TrainConfig,
        {
            "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "use_chat_template": False, **policy},
            "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8}}},
            "rewards": [{"fn": "exact_match", "name": "answer"}, {"fn": "exact_match", "name": "confidence"}],
            "algorithm": {"group_size": 4, "prompts_per_step": 2,
                          "credit": [{"name": "blockwise", "reward_blocks": [0, 1]}]},
        },
    )  # fmt: skip


def test_a_causal_lm_config_with_block_markers_accepts_blockwise():
    config = _config(probes={"block_markers": ["Confidence:"]})
    assert [rule.name for rule in config.algorithm.credit] == ["blockwise"]
    with pytest.raises(ConfigError, match="block_ids"):
        _config()  # no markers: the family cannot split completions into blocks
