"""GRSP [112] (reward shaper ``segment_penalty``), hand-computed: correct completions are penalised, relative to their
group, by a count of their reasoning segments weighted by length cluster (short segments weigh most)."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REWARD_SHAPERS, StepBatch, apply_reward_shaping
from genalign.experimental.shaping.segments import batch_edges, length_clusters, segment_lengths

F64 = torch.float64
#: four samples of one group (8 actions, the last sample padded): segment lengths [2, 2, 4], [4, 4], [2, 6] (all
#: correct, 8 tokens each) and [1, 1, 1, 1, 1] (wrong)
SEGMENT_IDS = torch.tensor([[0, 0, 1, 1, 2, 2, 2, 2], [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1, 1],
                            [0, 1, 2, 3, 4, 4, 4, 4]])  # fmt: skip
MASK = torch.tensor([[1.0] * 8, [1.0] * 8, [1.0] * 8, [1.0] * 5 + [0.0] * 3])
CORRECT = [1.0, 1.0, 1.0, 0.0]


def shaped(rewards=CORRECT, correct=CORRECT, **hp):
    batch = StepBatch(mask=MASK, group_ids=torch.zeros(4, dtype=torch.long), segment_ids=SEGMENT_IDS,
                      rewards=torch.tensor([[c] for c in correct], dtype=F64))  # fmt: skip
    return apply_reward_shaping([("segment_penalty", hp)], torch.tensor(rewards, dtype=F64), batch)


def test_segment_lengths_and_clusters():
    lengths = segment_lengths(SEGMENT_IDS, MASK)
    assert lengths.tolist() == [[2, 2, 4, 0, 0], [4, 4, 0, 0, 0], [2, 6, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert length_clusters(lengths, torch.tensor([3.0])).tolist()[0] == [0, 0, 1, 0, 0]  # longer than 3: cluster 1
    # quantile edges over the 12 non-empty segments: [1, 1, 1, 1, 1, 2, 2, 2, 4, 4, 4, 6] -> the 1/2-quantile is 2
    torch.testing.assert_close(batch_edges(lengths, 2), torch.tensor([2.0], dtype=F64))


def test_more_and_shorter_segments_of_a_correct_answer_cost_more_reward():
    # weights: short (≤ 3 actions) 1.0, long 0.5 -> P = [1 + 1 + 0.5, 0.5 + 0.5, 1 + 0.5] = [2.5, 1.0, 1.5]
    # mean 5/3, population std √(7/18); z = (P − 5/3)/std; the wrong sample is not penalised
    rewards, stats = shaped(coef=0.2, cluster_weights=[1.0, 0.5], length_edges=[3.0], eps=0.0)
    std = math.sqrt(7 / 18)
    z = [(2.5 - 5 / 3) / std, (1.0 - 5 / 3) / std, (1.5 - 5 / 3) / std]
    torch.testing.assert_close(rewards, torch.tensor([1 - 0.2 * z[0], 1 - 0.2 * z[1], 1 - 0.2 * z[2], 0.0], dtype=F64))
    assert rewards[1] > rewards[2] > rewards[0]  # the same 8 tokens in 2 long steps beat 3 steps with restarts
    assert stats["reward_shaping/segments_mean"] == pytest.approx((3 + 2 + 2 + 5) / 4)
    flat, _ = shaped(cluster_weights=[1.0, 1.0], length_edges=[3.0], eps=0.0)  # equal weights: the segment count
    count_z = (torch.tensor([3.0, 2.0, 2.0]) - 7 / 3) / math.sqrt(2 / 9)
    torch.testing.assert_close(flat[:3], (1 - 0.2 * count_z).double())


def test_a_group_with_fewer_than_two_correct_samples_or_no_coefficient_is_unchanged():
    lonely, _ = shaped(rewards=[1.0, 0.0, 0.0, 0.0], correct=[1.0, 0.0, 0.0, 0.0])
    torch.testing.assert_close(lonely, torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64))
    off, _ = shaped(coef=0.0)
    torch.testing.assert_close(off, torch.tensor(CORRECT, dtype=F64))


def test_bad_arguments_are_named():
    assert REWARD_SHAPERS.meta("segment_penalty")["needs"] == ("segment_ids", "rewards")
    with pytest.raises(ValueError, match="coef >= 0"):
        shaped(coef=-1.0)
    with pytest.raises(ValueError, match=r"length_edges=\[3.0, 2.0\] must hold 2 increasing edges"):
        shaped(cluster_weights=[1.0, 0.5, 0.25], length_edges=[3.0, 2.0])
