"""AdaGRPO's cross-level advantage fusion [62] (genalign.experimental.advantages.fusion), hand-computed."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import compute_advantages


def test_cross_level_fusion_blends_group_and_batch_standardisation():
    rewards, groups = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    got = compute_advantages("cross_level_fusion", rewards, groups, intra_weight=0.5, eps=0.0)
    # group 0: mean 0.5, std √0.5 -> ±0.7071; group 1 constant -> 0; batch: mean 0.75, std 0.5 -> 0.5, -1.5
    intra = torch.tensor([1 / math.sqrt(2), -1 / math.sqrt(2), 0.0, 0.0])
    global_ = torch.tensor([0.5, -1.5, 0.5, 0.5])
    torch.testing.assert_close(got, 0.5 * intra + 0.5 * global_)
    torch.testing.assert_close(compute_advantages("cross_level_fusion", rewards, groups, intra_weight=1.0, eps=0.0),
                               intra)  # fmt: skip


def test_cross_level_fusion_shared_rules_and_bad_weight():
    rewards, groups = torch.tensor([1.0, float("nan"), 0.0, 1.0]), torch.tensor([0, 0, 1, 1])
    got = compute_advantages("cross_level_fusion", rewards, groups, intra_weight=0.0, eps=0.0)
    assert got[0] == 0 and got[1] == 0  # a group with one valid reward has no baseline; a missing reward gets 0
    # group 1 against the batch of valid rewards (1, 0, 1): mean 2/3, std √(1/3)
    torch.testing.assert_close(got[2:], (torch.tensor([0.0, 1.0]) - 2 / 3) / math.sqrt(1 / 3))
    with pytest.raises(ValueError, match="intra_weight = 2"):
        compute_advantages("cross_level_fusion", rewards, groups, intra_weight=2.0)
