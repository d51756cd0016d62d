"""DaGRPO's pair-masked group advantage [286] (``distinct_pairs``): hand-computed values, and GRPO when no pair is
masked."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import ADVANTAGE_ESTIMATORS, CREDIT_RULES, StepBatch

NAN = float("nan")


def run(rewards, hidden, group_ids, mask=None, **hp):
    rewards = torch.tensor(rewards, dtype=torch.float64)
    hidden = torch.tensor(hidden, dtype=torch.float64)
    mask = torch.ones(hidden.shape[:2]) if mask is None else torch.tensor(mask, dtype=torch.float64)
    batch = StepBatch(mask=mask, group_ids=torch.tensor(group_ids), combined_reward=rewards, hidden=hidden)
    return CREDIT_RULES.get("distinct_pairs")(torch.zeros(mask.shape, dtype=torch.float64), batch, **hp)


def test_pairs_of_near_identical_samples_are_masked():
    # samples 0 and 1 are the same completion (one rewarded, one not): their pair is masked
    hidden = [[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]], [[1.0, -1.0], [-1.0, -1.0]]]
    advantages = run([1.0, 0.0, 0.0, 1.0], hidden, [5, 5, 5, 5], min_distinctiveness=0.1)
    scale = 4 * (math.sqrt(1 / 3) + 1e-6)  # n_G · (unbiased std + eps)
    # A_0 = [(1−0) masked + (1−0) + (1−1)]/scale; GRPO would give 2/scale
    expected = torch.tensor([1.0, -1.0, -2.0, 2.0], dtype=torch.float64) / scale
    torch.testing.assert_close(advantages, expected[:, None].expand(4, 2))


def test_without_masking_it_is_grpo():
    generator = torch.Generator().manual_seed(3)
    rewards = torch.rand(6, generator=generator, dtype=torch.float64).tolist()
    hidden = torch.randn(6, 3, 4, generator=generator, dtype=torch.float64).tolist()
    group_ids = [0, 0, 0, 1, 1, 1]
    advantages = run(rewards, hidden, group_ids, min_distinctiveness=0.0)
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")(torch.tensor(rewards, dtype=torch.float64), torch.tensor(group_ids))
    torch.testing.assert_close(advantages[:, 0], grpo)


def test_padding_missing_rewards_and_bad_values():
    hidden = [[[1.0, 0.0], [9.0, 9.0]], [[0.0, 1.0], [0.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]]
    # the padded action of sample 0 does not enter its embedding; sample 2's reward is missing: it gets 0 and leaves
    # every pair, so the group is {0, 1} (std √½)
    advantages = run([1.0, 0.0, NAN], hidden, [0, 0, 0], mask=[[1, 0], [1, 1], [1, 1]], min_distinctiveness=0.5)
    value = 1.0 / (2 * (math.sqrt(0.5) + 1e-6))
    torch.testing.assert_close(advantages[:, 0], torch.tensor([value, -value, 0.0], dtype=torch.float64))
    assert CREDIT_RULES.meta("distinct_pairs")["replaces"] is True
    with pytest.raises(ValueError, match=r"min_distinctiveness in \[0, 2\]"):
        run([1.0, 0.0], [[[1.0]], [[1.0]]], [0, 0], min_distinctiveness=3.0)
