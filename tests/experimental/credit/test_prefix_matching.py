"""T-SPMO's prefix-matching credit [312] (``prefix_matching``) against hand-computed values on a group's token
prefix tree; accepted by the config loader on the causal LM, which then builds the tree."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.algorithms.structure import token_prefix_tree
from tests.algorithms.arith_config import arith_lm_config

# One group of 4 completions:   s0: 5 6 7   s1: 5 6 8   s2: 5 9 9   s3: 4 9 9
IDS = torch.tensor([[5, 6, 7], [5, 6, 8], [5, 9, 9], [4, 9, 9]])
MASK = torch.ones(4, 3)
GROUP = torch.zeros(4, dtype=torch.long)
REWARD = torch.tensor([1.0, 0.0, -1.0, 2.0])  # E[R] of the whole group (the empty prefix): 0.5


def credit(mask=MASK, reward=REWARD, advantages=None, **hp) -> torch.Tensor:
    batch = StepBatch(
        sample_advantages=2 * reward if advantages is None else advantages,
        combined_reward=reward,
        mask=mask,
        group_ids=GROUP,
        prefix_tree=token_prefix_tree(IDS, mask, GROUP),
    )
    return CREDIT_RULES.get("prefix_matching")(torch.full(mask.shape, 7.0), batch, **hp)


def test_each_token_gets_the_mean_reward_after_it_minus_the_mean_reward_of_its_prefix():
    # E[R|5] = 0, E[R|4] = 2; E[R|5 6] = 0.5, E[R|5 9] = -1; E[R|5 6 7] = 1, E[R|5 6 8] = 0; unshared tokens: 0
    expected = torch.tensor([[-0.5, 0.5, 0.5], [-0.5, 0.5, -0.5], [-0.5, -1.0, 0.0], [1.5, 0.0, 0.0]])
    per_completion = credit(count_once=False)
    torch.testing.assert_close(per_completion, expected)  # the incoming advantages (7) are replaced
    torch.testing.assert_close(per_completion.sum(1), REWARD - 0.5)  # telescopes to R_i − E[R]
    # count_once: a pair shared by k completions is divided by k ((5) by 3, (5 6) by 2), so each enters once
    sizes = torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0], [3.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    torch.testing.assert_close(credit(), expected / sizes)


def test_value_source_and_padding():
    # 'advantage' reads the estimator's sample advantages (here 2 R): twice the reward differences
    torch.testing.assert_close(credit(value="advantage", count_once=False), 2 * credit(count_once=False))
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    assert torch.all(credit(mask=mask)[1, 2] == 0)
    with pytest.raises(ValueError, match="value='token'"):
        credit(value="token")


def test_the_config_loader_asks_the_causal_lm_for_the_prefix_tree():
    config = arith_lm_config(credit=["prefix_matching"])
    assert config.algorithm.needs()["prefix_tree"]
