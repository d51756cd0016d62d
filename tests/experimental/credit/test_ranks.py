"""Rank-GRPO rank-level credit [104]: causal rank rewards from list-prefix rewards, normalised per rank within the
group, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.ranks import rank_rewards

F64 = torch.float64
NAN = math.nan
# one group of three lists; R(first k ranks) like a DCG: sample 1 has two ranks only
PREFIX = torch.tensor([[0.0, 2.0, 2.0, 3.0], [0.0, 0.0, 1.0, NAN], [0.0, 2.0, 4.0, 4.0]])
SEGMENTS = torch.tensor([[0, 0, 1, 2, 2], [0, 1, 1, 1, 1], [0, 1, 1, 2, 2]])
MASK = torch.tensor([[1.0, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])


def test_rank_rewards_credit_each_rank_with_the_ranks_from_it_on_or_its_own_gain():
    to_go = torch.tensor([[3.0, 1.0, 1.0], [1.0, 1.0, NAN], [4.0, 2.0, 0.0]], dtype=F64)
    torch.testing.assert_close(rank_rewards(PREFIX, "to_go"), to_go, equal_nan=True)
    own = torch.tensor([[2.0, 0.0, 1.0], [0.0, 1.0, NAN], [2.0, 2.0, 0.0]], dtype=F64)
    torch.testing.assert_close(rank_rewards(PREFIX, "own"), own, equal_nan=True)


def test_rank_causal_normalises_each_rank_within_the_group():
    batch = StepBatch(mask=MASK, group_ids=torch.zeros(3, dtype=torch.long), segment_ids=SEGMENTS,
                      prefix_rewards=PREFIX)  # fmt: skip
    out = CREDIT_RULES.get("rank_causal")(torch.full((3, 5), 7.0, dtype=F64), batch, eps=0.0)
    # rank 0: (3, 1, 4), mean 8/3, unbiased std √(7/3); rank 1: (1, 1, 2), mean 4/3, std √(1/3);
    # rank 2: (1, —, 0), mean 1/2, std √(1/2) (sample 1 has no rank 2)
    s0, s1, s2 = math.sqrt(7 / 3), math.sqrt(1 / 3), math.sqrt(1 / 2)
    a = [[(3 - 8 / 3) / s0, (1 - 4 / 3) / s1, 0.5 / s2], [(1 - 8 / 3) / s0, (1 - 4 / 3) / s1], [(4 - 8 / 3) / s0,
         (2 - 4 / 3) / s1, -0.5 / s2]]  # fmt: skip
    expected = torch.tensor(
        [
            [a[0][0], a[0][0], a[0][1], a[0][2], a[0][2]],
            [a[1][0], a[1][1], a[1][1], 0.0, 0.0],  # padding gets 0
            [a[2][0], a[2][1], a[2][1], a[2][2], a[2][2]],
        ],
        dtype=F64,
    )
    torch.testing.assert_close(out, expected)  # the incoming 7.0 is replaced
    assert CREDIT_RULES.meta("rank_causal")["replaces"]
    with pytest.raises(ValueError, match="'to_go' or 'own'"):
        CREDIT_RULES.get("rank_causal")(out, batch, reward="dcg")
