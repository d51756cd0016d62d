"""VGPO [67] step values and SAGE-GRPO [76] gradient-norm equaliser, hand-computed."""

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.values import cumulative_step_values


def test_cumulative_step_values_discounted_mean_of_later_states():
    step_rewards = torch.tensor([[0.2, 0.4, 1.0], [0.2, float("nan"), 0.0]])
    values = cumulative_step_values(step_rewards, gamma=0.5)
    # step 0: (V1 + 0.5 V2) / 1.5; a NaN state is skipped; step 1: V2
    torch.testing.assert_close(values, torch.tensor([[0.9 / 1.5, 1.0], [0.0, 0.0]]))
    torch.testing.assert_close(
        cumulative_step_values(step_rewards, gamma=0.0), torch.tensor([[0.4, 1.0], [torch.nan, 0.0]]), equal_nan=True
    )


def _inputs(step_rewards, groups, mask=None, step_std=None):
    n, t = step_rewards.shape[0], step_rewards.shape[1] - 1
    mask = torch.ones(n, t) if mask is None else mask
    return StepBatch(sample_advantages=torch.zeros(n), mask=mask, group_ids=groups,
                        step_rewards=step_rewards, step_std=step_std)  # fmt: skip


def test_vgpo_values_normalises_each_step_with_the_absolute_anchor():
    step_rewards = torch.tensor([[0.2, 0.4, 1.0], [0.2, 0.6, 0.0], [0.2, 0.9, 0.9], [0.2, 0.9, 0.9]])
    groups = torch.tensor([0, 0, 1, 1])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
    out = CREDIT_RULES.get("vgpo_values")(torch.zeros(4, 2), _inputs(step_rewards, groups, mask),
                                          gamma=0.5, anchor=0.5, alpha=1.0, tau=0.0, eps=0.0)  # fmt: skip
    r = 1 / math.sqrt(2)  # [0.6, 0.4] and [1, 0] normalised (unbiased std)
    # group 1: constant values 0.9 -> 0 relative + 1 * (0.9 - 0.5); its step 0 has one trained sample -> no baseline
    expected = torch.tensor([[r, r], [-r, -r], [0.0, 0.4], [0.0, 0.4]])
    torch.testing.assert_close(out, expected)


def test_vgpo_values_rejects_a_bad_gamma():
    with pytest.raises(ValueError, match="gamma"):
        CREDIT_RULES.get("vgpo_values")(torch.zeros(2, 1), _inputs(torch.zeros(2, 2), torch.tensor([0, 0])), gamma=2.0)


def test_gradient_norm_equalizer_equalises_advantage_over_std():
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    step_std = torch.tensor([[0.5, 0.1], [0.5, 0.1]])
    inputs = _inputs(torch.zeros(2, 3), torch.tensor([0, 0]), step_std=step_std)
    out = CREDIT_RULES.get("gradient_norm_equalizer")(advantages, inputs)
    # n = [2, 10], target 6 -> w = [3, 0.6]
    torch.testing.assert_close(out, torch.tensor([[3.0, 0.6], [-3.0, -0.6]]))
    ratio = out.abs() / step_std
    torch.testing.assert_close(ratio[:, 0], ratio[:, 1])  # every step has the same predicted gradient scale
    clipped = CREDIT_RULES.get("gradient_norm_equalizer")(advantages, inputs, max_weight=2.0)
    torch.testing.assert_close(clipped, torch.tensor([[2.0, 0.6], [-2.0, -0.6]]))
