"""The polychromic set objective [242] (reward shaper ``polychromic_sets``), hand-computed: a completion is credited
with the mean score of the sets of its group it belongs to, a set scoring its mean reward times its diversity."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REWARD_SHAPERS, StepBatch, apply_reward_shaping, compute_advantages
from genalign.experimental.shaping.polychromic import member_sets, set_diversity

F64 = torch.float64
#: one group of 4: samples 0 and 1 are the same completion (identical hidden states), 2 and 3 are distinct
EMBEDDINGS = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])


def shaped(rewards, **hp):
    hidden = EMBEDDINGS[:, None, :].expand(4, 3, 3).contiguous()  # [N, T, H], the same state at every action
    batch = StepBatch(mask=torch.ones(4, 3), group_ids=torch.zeros(4, dtype=torch.long), hidden=hidden)
    return apply_reward_shaping([("polychromic_sets", hp)], torch.tensor(rewards, dtype=F64), batch)


def test_sets_reward_success_and_diversity_together():
    # n = 2, every pair: f(0,1) = 1·½ (1 copies 0), f(0,2) = ½·1, f(0,3) = 1·1, f(1,2) = ½, f(1,3) = 1, f(2,3) = ½
    # r̃_i = mean of f over the 3 pairs holding i
    rewards, stats = shaped([1.0, 1.0, 0.0, 1.0], set_size=2)
    torch.testing.assert_close(rewards, torch.tensor([2 / 3, 2 / 3, 1 / 2, 5 / 6], dtype=F64))
    assert rewards[3] > rewards[0]  # the distinct correct answer beats the duplicated ones (plain RL ties them)
    assert stats["reward_shaping/set_diversity_mean"] == pytest.approx((0.5 + 1 + 1 + 1 + 1 + 1) / 6)
    # with dr_grpo the advantage is the marginal one: mean over the sets holding i minus the mean over all sets (2/3)
    advantages = compute_advantages("dr_grpo", rewards, torch.zeros(4, dtype=torch.long))
    torch.testing.assert_close(advantages, torch.tensor([0.0, 0.0, -1 / 6, 1 / 6], dtype=F64))


def test_sets_of_one_are_plain_rewards_and_missing_rewards_stay_out():
    plain, _ = shaped([1.0, 0.0, 0.5, 1.0], set_size=1)
    torch.testing.assert_close(plain, torch.tensor([1.0, 0.0, 0.5, 1.0], dtype=F64))
    # sample 3 missing: sets of the 3 others; f(0,1) = ½·½, f(0,2) = ½·1, f(1,2) = 0·1
    missing, _ = shaped([1.0, 0.0, 0.0, math.nan], set_size=2)
    torch.testing.assert_close(missing[:3], torch.tensor([3 / 8, 1 / 8, 1 / 4], dtype=F64))
    assert math.isnan(missing[3])


def test_drawn_sets_hold_every_member_equally_often_and_diversity_counts_copies():
    sets = member_sets(8, 4, max_sets=10, generator=torch.Generator().manual_seed(0))  # C(8, 4) = 70 > 10
    assert sets.shape == (10, 4) and torch.bincount(sets.flatten()).tolist() == [5] * 8
    assert all(len(set(row.tolist())) == 4 for row in sets)
    assert member_sets(4, 2, max_sets=10, generator=torch.Generator()).tolist() == [[0, 1], [0, 2], [0, 3], [1, 2],
                                                                                    [1, 3], [2, 3]]  # fmt: skip
    similarity = torch.tensor([[1.0, 0.99, 0.2], [0.99, 1.0, 0.3], [0.2, 0.3, 1.0]], dtype=F64)
    diversity = set_diversity(similarity, torch.tensor([[0, 1, 2]]), threshold=0.95)
    torch.testing.assert_close(diversity, torch.tensor([2 / 3], dtype=F64))  # 1 is a near-copy of 0


def test_bad_arguments_are_named():
    assert REWARD_SHAPERS.meta("polychromic_sets")["needs"] == ("hidden",)
    with pytest.raises(ValueError, match="set_size >= 1"):
        shaped([1.0, 0.0, 1.0, 0.0], set_size=0)
