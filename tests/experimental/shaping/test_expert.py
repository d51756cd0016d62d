"""ICPO's annealed expert bonus [44] (``expert_bonus``) on hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REWARD_SHAPERS, StepBatch
from genalign.experimental.shaping.expert import annealed_bonus, expert_bonus


def test_the_bonus_fades_linearly_to_zero_at_anneal_end():
    assert annealed_bonus(0.0, bonus=0.4, anneal_end=0.5) == 0.4
    assert annealed_bonus(0.25, bonus=0.4, anneal_end=0.5) == pytest.approx(0.2)
    assert annealed_bonus(0.75, bonus=0.4, anneal_end=0.5) == 0.0


def test_expert_bonus_rewards_only_the_guided_samples():
    assert REWARD_SHAPERS.get("expert_bonus") is expert_bonus
    rewards = torch.tensor([1.0, 1.0, 0.0, math.nan])
    guided = torch.tensor([True, False, False, True])
    shaped, stats = expert_bonus(rewards, StepBatch(progress=0.25, expert_guided=guided), bonus=0.4, anneal_end=0.5)
    torch.testing.assert_close(shaped, torch.tensor([1.2, 1.0, 0.0, math.nan]), equal_nan=True)
    assert stats == {"reward_shaping/expert_bonus": pytest.approx(0.2)}
    late, _ = expert_bonus(rewards, StepBatch(progress=1.0, expert_guided=guided))
    torch.testing.assert_close(late, rewards, equal_nan=True)
    with pytest.raises(ValueError, match="anneal_end = 0"):
        expert_bonus(rewards, StepBatch(progress=0.1, expert_guided=guided), anneal_end=0.0)
