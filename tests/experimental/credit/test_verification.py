"""GRPO-Verif's unified loss [288] (``verification_weighted``): the solution block gets the solution's group advantage,
the verification block α times the verification's."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch


def run(rewards, blocks, mask=None, **hp):
    blocks = torch.tensor(blocks)
    mask = torch.ones(blocks.shape) if mask is None else torch.tensor(mask, dtype=torch.float32)
    batch = StepBatch(mask=mask, group_ids=torch.tensor([0, 0, 0, 0]), block_ids=blocks,
                      rewards=torch.tensor(rewards, dtype=torch.float64))  # fmt: skip
    return CREDIT_RULES.get("verification_weighted")(torch.zeros(mask.shape, dtype=torch.float64), batch, **hp)


def test_each_block_follows_its_own_group_advantage():
    # columns: solution correct, verdict agrees; blocks: solution tokens 0, verification tokens 1
    rewards = [[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]
    blocks = [[0, 0, 1], [0, 1, 1], [0, 0, 0], [0, 1, 1]]
    z = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # GRPO of (1, 0, 1, 0) and of (1, 1, 0, 0): ±z
    got = run(rewards, blocks, weight=0.5, mask=[[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]])
    expected = torch.tensor([[z, z, 0.5 * z], [-z, 0.5 * z, 0.5 * z], [z, z, z], [-z, -0.5 * z, 0.0]],
                            dtype=torch.float64)  # fmt: skip
    torch.testing.assert_close(got, expected)
    # α = 0: the verification tokens get no gradient at all
    assert run(rewards, blocks, weight=0.0)[0, 2].item() == 0.0


def test_columns_are_chosen_and_checked():
    rewards = [[1.0, 0.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]]  # the first column is constant
    swapped = run(rewards, [[0, 1]] * 4, solution_column=1, verification_column=0)
    assert swapped[:, 1].abs().sum().item() == 0.0 and swapped[:, 0].abs().sum().item() > 0
    with pytest.raises(ValueError, match="two different reward columns"):
        run(rewards, [[0, 1]] * 4, verification_column=0)
    with pytest.raises(ValueError, match=r"weight=-1 \(α"):
        run(rewards, [[0, 1]] * 4, weight=-1)
