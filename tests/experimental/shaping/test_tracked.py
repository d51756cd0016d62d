"""SPO's group-free advantage [324]: the reward minus the prompt's tracked value before the visit (given by the sample
source spo as ``prompt_value``), normalised over the batch; one sample per prompt."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS
from genalign.experimental.sampling.curricula import SPOTracker
from genalign.sampling.base import Outcome

F64 = torch.float64


def test_the_reward_minus_the_tracked_value_normalised_over_the_batch():
    rewards = torch.tensor([1.0, 0.0, 1.0, float("nan")], dtype=F64)
    batch = StepBatch(prompt_value=torch.tensor([0.5, 0.5, 0.75, 0.2], dtype=F64))
    shaper = REWARD_SHAPERS.get("tracked_baseline")
    centred = torch.tensor([0.5, -0.5, 0.25, float("nan")], dtype=F64)
    torch.testing.assert_close(shaper(rewards, batch, normalize=False)[0], centred, equal_nan=True)
    mean = (0.5 - 0.5 + 0.25) / 3
    std = math.sqrt(((0.5 - mean) ** 2 + (-0.5 - mean) ** 2 + (0.25 - mean) ** 2) / 3)  # population std over the batch
    shaped, stats = shaper(rewards, batch, eps=0.0)
    torch.testing.assert_close(shaped, centred / std, equal_nan=True)
    assert stats["reward_shaping/tracked_spread"] == pytest.approx(std)
    assert REWARD_SHAPERS.meta("tracked_baseline")["group_free"] is True
    with pytest.raises(ValueError, match="prompt_value"):
        shaper(rewards, StepBatch())


def test_the_spo_source_gives_each_sample_its_prompts_value_before_the_visit():
    """Prompt 7 seen once (group mean 0.5 at discount 0.5: α = β = 1, v̂ = 0.5) is visited again with reward 1; prompt
    9 is new (0.5). The signal carries the values before this visit; the tracker then moves prompt 7 to
    (0.5 + 1) / (0.5 + 1 + 0.5) = 0.75."""
    spo = SPOTracker(discount=0.5)
    spo.alpha, spo.beta = {7: 1.0}, {7: 1.0}

    def outcome(indices, rewards):
        n = len(indices)
        return Outcome(positions=torch.arange(n), indices=torch.tensor(indices),
                       rewards=torch.tensor(rewards, dtype=F64), lengths=torch.ones(n), truncated=None, progress=0.5)  # fmt: skip

    decision = spo.after_rewards(outcome([7, 9], [1.0, 0.0]))
    assert decision.signals["prompt_value"].tolist() == [0.5, 0.5]
    assert spo.value(7) == pytest.approx(0.75) and spo.value(9) == pytest.approx(0.0)
    again = spo.after_rewards(outcome([7, 9], [1.0, 1.0]))
    assert again.signals["prompt_value"].tolist() == pytest.approx([0.75, 0.0])
