"""The decaying token budget of curriculum length-controlled GRPO [176] (``length_budget_curriculum``): budget
schedule, length efficiency and the shaped rewards, and the progress signal reaching a reward shaper."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REWARD_SHAPERS, AdvantageStage, Option, StepBatch
from genalign.experimental.shaping.length_budget import token_budget
from genalign.trainer.step_batch import gather_batch

NAN = float("nan")


def test_the_budget_starts_generous_and_tightens():
    exponential = [
        token_budget(p, start=400, end=100, decay_until=0.5, schedule="exponential") for p in (0, 0.25, 0.5, 1)
    ]
    assert exponential == pytest.approx([400.0, 200.0, 100.0, 100.0])  # 400·(1/4)^u
    linear = [token_budget(p, start=400, end=100, decay_until=1.0, schedule="linear") for p in (0, 0.5, 1)]
    assert linear == pytest.approx([400.0, 250.0, 100.0])


def shape(rewards, lengths, progress, **hp):
    mask = torch.tensor([[1.0] * n + [0.0] * (8 - n) for n in lengths])
    batch = StepBatch(mask=mask, progress=progress)
    return REWARD_SHAPERS.get("length_budget_curriculum")(torch.tensor(rewards), batch, **hp)


def test_the_same_lengths_are_rewarded_early_and_penalised_late():
    hp = {"budget_start": 8.0, "budget_end": 2.0, "schedule": "linear", "weight": 0.5}
    early, stats = shape([1.0, 1.0, 0.0], [2, 6, 4], 0.0, **hp)  # B = 8: e = 1 − L/8
    torch.testing.assert_close(early, torch.tensor([1.0 + 0.5 * 0.75, 1.0 + 0.5 * 0.25, 0.5 * 0.5]))
    assert stats["reward_shaping/token_budget"] == pytest.approx(8.0)
    late, stats = shape([1.0, 1.0, 0.0], [2, 6, 4], 1.0, **hp)  # B = 2: e = 0, clamp(−2) = −1, −1
    torch.testing.assert_close(late, torch.tensor([1.0, 0.5, -0.5]))
    assert stats["reward_shaping/length_efficiency_mean"] == pytest.approx(-2 / 3)


def test_the_term_can_be_kept_for_good_samples_and_missing_rewards_stay_missing():
    shaped, _ = shape([1.0, 0.0, NAN], [2, 2, 2], 0.0, budget_start=4.0, weight=1.0, min_reward=1.0)
    torch.testing.assert_close(shaped, torch.tensor([1.5, 0.0, NAN]), equal_nan=True)
    with pytest.raises(ValueError, match=r"schedule='cosine' must be"):
        shape([1.0], [1], 0.0, schedule="cosine")
    with pytest.raises(ValueError, match=r"budget_start > 0"):
        shape([1.0], [1], 0.0, budget_end=0.0)
    with pytest.raises(ValueError, match=r"needs the signal 'progress'"):
        REWARD_SHAPERS.get("length_budget_curriculum")(torch.ones(1), StepBatch(mask=torch.ones(1, 1)))


def test_progress_reaches_the_shaper_through_the_gathered_batch():
    stage = AdvantageStage.build(combiner=Option("weighted_sum"), estimator=Option("grpo"),
                                 shapers=[Option("length_budget_curriculum")])  # fmt: skip
    assert stage.gathered() == {"progress", "mask"}
    local = StepBatch(mask=torch.ones(2, 3), progress=0.25, rewards=torch.ones(2, 1), group_ids=torch.tensor([0, 0]))
    gathered = gather_batch(local, stage.gathered() | {"rewards", "group_ids"})
    assert gathered["progress"] == 0.25 and gathered["mask"].shape == (2, 3)
    values, stats = stage.sample_advantages(gathered, torch.ones(1))
    expected = 512 * (128 / 512) ** 0.25
    assert stats["reward_shaping/token_budget"] == pytest.approx(expected)
    assert not math.isnan(stats["reward_shaping/length_efficiency_mean"])
    torch.testing.assert_close(values["combined_reward"], torch.full((2,), 1.0 + 0.5 * (1 - 3 / expected)))
