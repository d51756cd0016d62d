"""RREDCoT reward redistribution [154]: the terminal reward spread over segments by the model's own state values
(the reference answer's teacher-forced probability), against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.redistribution import redistributed_rewards

F64 = torch.float64
NAN = math.nan
SEGMENTS = torch.tensor([[0, 0, 1, 2, 2], [0, 1, 1, 1, 1]])
MASK = torch.tensor([[1.0, 1, 1, 1, 1], [1, 1, 1, 0, 0]])


def probe(values: list[list[float]]) -> torch.Tensor:
    """``answer_probe`` ``[N, S + 1, 3]`` whose answer log-probability channel holds ``log values``."""
    out = torch.zeros(len(values), len(values[0]), 3)
    out[..., 0] = torch.tensor(values).log()
    out[..., 1] = 0.5
    return out


VALUES = [[0.2, 0.5, 0.4, 0.9], [0.3, 0.1, 0.7, NAN]]  # V of the states; the final state's value is replaced by R


def test_redistribution_anchors_the_final_state_to_the_reward_and_sums_to_reward_minus_v0():
    rewards = torch.tensor([1.0, 0.0])
    credits = redistributed_rewards(torch.tensor(VALUES), rewards)
    # sample 0: V = 0.2, 0.5, 0.4, R = 1 -> 0.3, −0.1, 0.6 (sum 0.8 = R − V_0); sample 1: V = 0.3, 0.1, R = 0
    # -> −0.2, −0.1 (its final state's probe value 0.7 is replaced by the reward)
    expected = torch.tensor([[0.3, -0.1, 0.6], [-0.2, -0.1, NAN]], dtype=F64)
    torch.testing.assert_close(credits, expected, equal_nan=True)
    assert float(credits[0].sum()) == pytest.approx(1.0 - 0.2)


def test_reward_redistribution_gives_each_segment_its_credit_in_group_std_units():
    batch = StepBatch(
        mask=MASK, group_ids=torch.tensor([0, 0]), segment_ids=SEGMENTS, answer_probe=probe(VALUES),
        combined_reward=torch.tensor([1.0, 0.0]), group_reward_std=torch.tensor([0.5, 0.5]),
    )  # fmt: skip
    rule = CREDIT_RULES.get("reward_redistribution")
    out = rule(torch.full((2, 5), 4.0, dtype=F64), batch, eps=0.0)
    expected = torch.tensor([[0.6, 0.6, -0.2, 1.2, 1.2], [-0.4, -0.2, -0.2, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(out, expected)  # the incoming 4.0 is replaced; padding gets 0
    raw = rule(torch.zeros(2, 5, dtype=F64), batch, normalize=False)
    torch.testing.assert_close(raw[0], torch.tensor([0.3, 0.3, -0.1, 0.6, 0.6], dtype=F64))
    # a group whose rewards are all equal carries no signal once normalised, as in GRPO
    flat = rule(torch.zeros(2, 5, dtype=F64), batch.with_values(group_reward_std=torch.zeros(2)))
    torch.testing.assert_close(flat, torch.zeros(2, 5, dtype=F64))
    # the mean token probability channel as the value: 0.5 everywhere -> only the last segment moves (R − 0.5)
    mean_channel = rule(torch.zeros(2, 5, dtype=F64), batch, value="mean_token_probability", normalize=False)
    torch.testing.assert_close(mean_channel[0], torch.tensor([0.0, 0.0, 0.0, 0.5, 0.5], dtype=F64))
