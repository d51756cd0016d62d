"""MedLoc-R1 [121] (reward combiner ``tightening_threshold``), hand-computed: the score column's reward tightens from
dense to stricter thresholds when a sliding window of the stage's success is full, high and stable."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import REWARD_COMBINERS, bind_option
from genalign.experimental.combiners.tightening import TighteningTracker

F64 = torch.float64
#: column 0: an IoU; column 1: a format reward (weight ½)
REWARDS = torch.tensor([[0.6, 1.0], [0.2, 0.0], [0.4, 1.0], [float("nan"), 1.0]], dtype=F64)
WEIGHTS = torch.tensor([1.0, 0.5], dtype=F64)
GROUPS = torch.tensor([0, 0, 1, 1])


def test_each_stage_replaces_the_score_by_its_reward():
    combine = REWARD_COMBINERS.get("tightening_threshold")
    dense, stats = combine(REWARDS, GROUPS, WEIGHTS)  # stage 0: the IoU itself
    torch.testing.assert_close(dense, torch.tensor([1.1, 0.2, 0.9, 0.5], dtype=F64))
    assert stats["tightening/stage"] == 0 and stats["tightening/threshold"] == 0
    first, _ = combine(REWARDS, GROUPS, WEIGHTS, stage=1)  # IoU ≥ 0.3
    torch.testing.assert_close(first, torch.tensor([1.5, 0.0, 1.5, 0.5], dtype=F64))
    strict, stats = combine(REWARDS, GROUPS, WEIGHTS, stage=2)  # IoU ≥ 0.5
    torch.testing.assert_close(strict, torch.tensor([1.5, 0.0, 0.5, 0.5], dtype=F64))
    assert stats["tightening/threshold"] == 0.5


def test_the_tracker_advances_only_on_a_full_high_and_stable_window():
    tracker = TighteningTracker(stages=3, window=2, advance_at=0.6, max_spread=0.2)
    assert not tracker.observe(0.9)  # window not full
    assert not tracker.observe(0.4)  # mean 0.65 but spread 0.5: not stable
    assert not tracker.observe(0.5)  # [0.4, 0.5]: stable, mean 0.45 < 0.6
    assert tracker.observe(0.7) and tracker.stage == 1 and tracker.history == []  # [0.5, 0.7]: advance, fresh window
    tracker.stage = 2
    tracker.observe(1.0)
    tracker.observe(1.0)
    assert tracker.stage == 2  # the last stage stays


def test_the_bound_combiner_tracks_the_stage_and_checkpoints_it():
    bound = bind_option(REWARD_COMBINERS, "tightening_threshold", {"window": 2, "advance_at": 0.4, "max_spread": 0.2})
    for _ in range(2):  # dense success: mean IoU of the present samples = 0.4
        bound.update(REWARDS, GROUPS)
    assert bound.stage == 1
    combined, _ = bound(REWARDS, GROUPS, WEIGHTS)
    torch.testing.assert_close(combined, torch.tensor([1.5, 0.0, 1.5, 0.5], dtype=F64))
    restored = bind_option(REWARD_COMBINERS, "tightening_threshold", {})
    restored.load_state_dict(bound.state_dict())
    assert restored.stage == 1 and restored.tracker.history == []
    pinned = bind_option(REWARD_COMBINERS, "tightening_threshold", {"stage": 3})
    pinned.update(REWARDS, GROUPS)
    assert pinned.stage == 3  # a stage fixed in the config wins


def test_bad_arguments_are_named():
    combine = REWARD_COMBINERS.get("tightening_threshold")
    with pytest.raises(ValueError, match="must increase strictly"):
        combine(REWARDS, GROUPS, WEIGHTS, thresholds=[0.5, 0.3])
    with pytest.raises(ValueError, match="stage=4 must be one of the 4 stages"):
        combine(REWARDS, GROUPS, WEIGHTS, stage=4)
    with pytest.raises(ValueError, match="score_column=2 is not one of the 2 rewards"):
        combine(REWARDS, GROUPS, WEIGHTS, score_column=2)
