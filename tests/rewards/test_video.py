"""shape_motion: hand-computed scores of moving squares, the fps column's effect, and clips that must not earn it."""

from __future__ import annotations

import numpy as np
import pytest

from genalign.rewards import REWARDS

GREY = 90


def _square_clip(xs: list[int], *, size: int = 32, side: int = 6, y: int = 13) -> np.ndarray:
    """A red ``side`` px square at column ``xs[f]`` of frame ``f`` (None: no square) on grey, ``[F, size, size, 3]``."""
    video = np.full((len(xs), size, size, 3), GREY, dtype=np.uint8)
    for f, x in enumerate(xs):
        if x is not None:
            video[f, y : y + side, x : x + side] = (220, 30, 30)
    return video


def _score(videos, fps, reward_args=None, **columns):
    reward = REWARDS.get("shape_motion")(**(reward_args or {}))
    return reward([""] * len(videos), videos, fps=[fps] * len(videos), **columns)


def test_steady_motion_at_the_target_speed_scores_one_and_speed_ratios_scale_it():
    moving = _square_clip([2 + 2 * f for f in range(9)])  # 2 px of 32 per frame: at 8 fps, 0.5 widths per second
    assert _score([moving], 8) == [pytest.approx(1.0)]
    assert _score([moving], 8, {"speed": 0.25}) == [pytest.approx(0.5)]  # 0.25 / 0.5
    assert _score([moving], 16) == [pytest.approx(0.5)]  # the same frames at 16 fps: 1.0 widths per second
    assert _score([moving], 8, direction=["right"]) == [pytest.approx(1.0)]
    assert _score([moving], 8, direction=["left"]) == [0.0]
    assert _score([moving], 8, direction=["down"]) == [0.0]


def test_missing_frames_lower_presence_by_their_share():
    xs = [2 + 2 * f for f in range(9)]
    xs[0] = xs[4] = xs[8] = None  # 6 of 9 frames present; the step across a gap is 4 px
    clip = _square_clip(xs)
    steps = np.diff([x for x in xs if x is not None])  # [2, 4, 2, 2, 4]
    speed = steps.mean() / 32 * 8
    expected = 6 / 9 * min(speed / 0.5, 0.5 / speed)
    assert _score([clip], 8) == [pytest.approx(expected)]


def test_static_blank_noisy_and_jumping_clips_earn_nothing_or_little():
    rng = np.random.default_rng(0)
    static = _square_clip([10] * 9)
    blank = np.full((9, 32, 32, 3), GREY, dtype=np.uint8)
    noise = rng.integers(0, 256, (9, 32, 32, 3), dtype=np.uint8)
    jumping = _square_clip([int(x) for x in rng.integers(0, 26, 9)])
    scores = _score([static, blank, noise, jumping], 8)
    assert scores[:3] == [0.0, 0.0, 0.0]
    assert scores[3] < 0.35


def test_the_fps_column_and_directions_are_required_and_checked():
    reward = REWARDS.get("shape_motion")()
    clip = _square_clip([2, 4, 6])
    with pytest.raises(ValueError, match=r"needs the column 'fps'.*policy.fps"):
        reward([""], [clip])
    with pytest.raises(ValueError, match=r"direction of sample 0 is 'north'; expected one of right, left, down, up"):
        reward([""], [clip], fps=[8], direction=["north"])
    with pytest.raises(ValueError, match=r"fps of sample 0=0 must be a positive whole number"):
        reward([""], [clip], fps=[0])
    with pytest.raises(ValueError, match=r"speed=0 must be > 0"):
        REWARDS.get("shape_motion")(speed=0)
