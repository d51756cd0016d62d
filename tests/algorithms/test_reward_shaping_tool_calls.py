"""OTC-PO's tool-call efficiency reward [302] (reward shaper ``otc``), hand-computed."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REWARD_SHAPERS, StepBatch, apply_reward_shaping

F64 = torch.float64


def shaped(rewards, calls, correct, group_ids, **hp):
    batch = StepBatch(
        group_ids=torch.tensor(group_ids),
        tool_calls=torch.tensor(calls),
        rewards=torch.tensor([[c] for c in correct], dtype=F64),
    )
    return apply_reward_shaping([("otc", hp)], torch.tensor(rewards, dtype=F64), batch)


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=F64), rtol=0, atol=1e-12)


def test_otc_grpo_peaks_at_the_fewest_calls_of_a_correct_answer_in_the_group():
    # group 0: correct samples used 2 and 1 calls -> n = 1; f(m, 1) = 2m/(m + 1): m = 2 -> 4/3, 1 -> 1, 3 -> 3/2, 0 -> 0
    # r_tool = sin(f·π/2): √3/2, 1, √2/2, 0
    # group 1: a correct sample without calls -> n = 0: cos(mπ/(2m + 1)): m = 0 -> 1, m = 4 -> cos(4π/9)
    # group 2: no correct sample -> n = 0: m = 1 -> cos(π/3) = 0.5, m = 2 -> cos(2π/5)
    rewards, stats = shaped(
        [1.0, 1.0, 0.5, 0.5, 1.0, 0.2, 0.1, 0.1],
        [2, 1, 3, 0, 0, 4, 1, 2],
        [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
        [0, 0, 0, 0, 1, 1, 2, 2],
    )
    close(rewards, [math.sqrt(3) / 2, 1.0, 0.5 * math.sqrt(2) / 2, 0.0, 1.0, 0.2 * math.cos(4 * math.pi / 9),
                    0.05, 0.1 * math.cos(2 * math.pi / 5)])  # fmt: skip
    assert stats["reward_shaping/otc_optimal_calls_mean"] == pytest.approx(0.5)  # n = 1 for 4 of 8 samples


def test_otc_ppo_prefers_fewer_calls_without_a_group_estimate():
    rewards, _ = shaped([1.0, 1.0, math.nan], [0, 2, 1], [1.0, 1.0, math.nan], [0, 0, 0], mode="ppo", alpha=2.0)
    close(rewards[:2], [2.0, 2.0 * math.cos(2 * math.pi / 5)])
    assert math.isnan(rewards[2])  # a missing reward stays missing
    slow, _ = shaped([1.0], [2], [1.0], [0], mode="ppo", smoothing=10.0)  # a larger c falls more slowly
    close(slow, [math.cos(2 * math.pi / 14)])


def test_otc_names_bad_arguments_and_reads_the_tool_calls_signal():
    assert REWARD_SHAPERS.meta("otc")["needs"] == ("tool_calls", "rewards")
    with pytest.raises(ValueError, match=r"mode 'grpo' or 'ppo'.*mode='pp'"):
        shaped([1.0], [1], [1.0], [0], mode="pp")
    with pytest.raises(ValueError, match="success_column=3 is not one of the 1 rewards"):
        shaped([1.0], [1], [1.0], [0], success_column=3)
    with pytest.raises(ValueError, match="reward shaper 'otc' needs the signal 'tool_calls'"):
        apply_reward_shaping([("otc", {})], torch.ones(2), StepBatch(group_ids=torch.tensor([0, 0]),
                                                                      rewards=torch.ones(2, 1)))  # fmt: skip
