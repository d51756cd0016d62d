"""RCCA's hierarchical reward ([92], ``hierarchical_levels``): ordered failure levels, the graded last level only
after every earlier one, against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import REWARD_COMBINERS


def test_levels_are_cleared_in_order_and_the_last_is_graded():
    nan = float("nan")
    # levels: format, source, runtime, functional (graded)
    rewards = torch.tensor([
        [0.0, 1.0, 1.0, 1.0],  # format fails: nothing counts after it
        [1.0, 0.0, 1.0, 0.9],  # source fails: ¼
        [1.0, 1.0, 0.0, 0.9],  # runtime fails: 2/4
        [1.0, 1.0, 1.0, 0.5],  # all earlier pass: (3 + 0.5)/4
        [1.0, nan, 1.0, 1.0],  # a missing level fails
        [1.0, 1.0, 1.0, nan],  # a missing functional score earns 0 of that level
    ])  # fmt: skip
    combined, stats = REWARD_COMBINERS.get("hierarchical_levels")(rewards, torch.zeros(6, dtype=torch.long), [1.0] * 4)
    torch.testing.assert_close(combined, torch.tensor([0.0, 0.25, 0.5, 0.875, 0.25, 0.75]))
    assert stats["hierarchical_levels/frac_level_0"] == pytest.approx(5 / 6)
    assert stats["hierarchical_levels/frac_level_2"] == pytest.approx(2 / 6)
    assert stats["hierarchical_levels/frac_level_3"] == pytest.approx(0.0)  # 0.5 < τ = 1 and NaN never clear it
    half, _ = REWARD_COMBINERS.get("hierarchical_levels")(
        rewards[:3], torch.zeros(3, dtype=torch.long), [1.0] * 4, threshold=0.0
    )
    torch.testing.assert_close(half, torch.tensor([0.75 + 0.25, 0.75 + 0.9 / 4, 0.75 + 0.9 / 4]))
    with pytest.raises(ValueError, match="at least 2 reward columns"):
        REWARD_COMBINERS.get("hierarchical_levels")(rewards[:, :1], torch.zeros(6, dtype=torch.long), [1.0])
