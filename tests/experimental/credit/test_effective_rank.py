"""VERL's effective-rank advantage bonus [2] (``effective_rank_bonus``): effective ranks, their velocity and
acceleration along a response, and the bounded bonus, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.effective_rank import effective_rank, prefix_ranks, rank_dynamics, rank_indicators

F64 = torch.float64


def test_effective_rank_of_known_spectra():
    two_directions = torch.tensor([[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]])  # σ = (√2, √2)
    one_direction = torch.tensor([[[1.0, 0.0], [-1.0, 0.0], [3.0, 0.0]]])
    identical = torch.tensor([[[2.0, 5.0], [2.0, 5.0]]])  # centred rows are zero
    torch.testing.assert_close(effective_rank(two_directions), torch.tensor([2.0], dtype=F64))
    torch.testing.assert_close(effective_rank(one_direction), torch.tensor([1.0], dtype=F64))
    torch.testing.assert_close(effective_rank(identical), torch.tensor([1.0], dtype=F64))


def test_velocity_and_acceleration_of_the_prefix_ranks():
    states = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    ranks = prefix_ranks(states, 3, stride=1)  # prefixes of 1, 2 and 3 rows
    # the 3-row prefix: centred rows (1, −1/3), (−1, −1/3), (0, 2/3): σ = (√2, √(2/3)), p = (1, 1/√3)/(1 + 1/√3)
    p = torch.tensor([1.0, 1 / math.sqrt(3)]) / (1 + 1 / math.sqrt(3))
    third = math.exp(-float((p * p.log()).sum()))
    assert ranks == pytest.approx([1.0, 1.0, third])
    acceleration, velocity, rank = rank_dynamics(ranks)
    # d_2 = 1 − 1 = 0, d_3 = ER_3 − mean(1, 1); ERV = mean(d_2, d_3); ERA = d_3 − d_2
    assert (acceleration, velocity, rank) == pytest.approx((third - 1, (third - 1) / 2, third))
    assert prefix_ranks(states, 3, stride=2) == pytest.approx([1.0, third])  # every 2 actions, then the whole response
    assert rank_dynamics([2.5]) == (0.0, 0.0, 2.5)


def test_the_bonus_blends_exploration_and_exploitation_and_is_capped():
    # two responses of one group, prefixes of 2 and 4 actions
    hidden = torch.tensor([
        [[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]],  # ER 1 then 2: ERV 1, ERA 0, ER 2
        [[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]],  # ER 1 then 1: ERV 0, ERA 0, ER 1
    ])  # fmt: skip
    mask = torch.ones(2, 4)
    indicators = rank_indicators(hidden, mask, stride=2)
    torch.testing.assert_close(indicators, torch.tensor([[0.0, 1.0, 2.0], [0.0, 0.0, 1.0]], dtype=F64))
    batch = StepBatch(mask=mask, group_ids=torch.tensor([4, 4]), hidden=hidden)
    advantages = torch.tensor([[2.0] * 4, [-2.0] * 4], dtype=F64)
    shaped = CREDIT_RULES.get("effective_rank_bonus")(advantages, batch, stride=2)
    # baselines: ERA 0, ERV 0.5, ER 1.5 -> deviations (0, 1, 1/3) and (0, −1, −1/3); τ = σ(0) = ½:
    # weights (0, ½, ½); aux = ½ tanh 1 + ½ tanh ⅓ for sample 0, negative (no bonus) for sample 1
    aux = 0.5 * math.tanh(1.0) + 0.5 * math.tanh(1 / 3)
    torch.testing.assert_close(shaped, torch.tensor([[2.0 + aux] * 4, [-2.0] * 4], dtype=F64))
    capped = CREDIT_RULES.get("effective_rank_bonus")(advantages / 4, batch, stride=2)  # |A|/κ = 0.25 < aux
    torch.testing.assert_close(capped[0], torch.full((4,), 0.5 + 0.25, dtype=F64))
    last = CREDIT_RULES.get("effective_rank_bonus")(advantages, batch, stride=2, placement="last_action")
    torch.testing.assert_close(last[0], torch.tensor([2.0, 2.0, 2.0, 2.0 + aux], dtype=F64))


def test_the_acceleration_steers_the_blend():
    # identical ER and ERV deviations, but sample 0 accelerates: τ > ½ moves its weight to the ER channel
    hidden = torch.tensor([[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]]])
    batch = StepBatch(mask=torch.ones(2, 3), group_ids=torch.tensor([0, 0]), hidden=hidden)
    indicators = rank_indicators(hidden, batch.mask, stride=1)
    deviation = ((indicators - indicators.mean(0)) / (indicators.mean(0).abs() + 1e-8)).clamp(-5, 5)
    tau = torch.sigmoid(2.0 * deviation[0, 0])
    expected = tau * math.tanh(deviation[0, 2]) + (1 - tau) * math.tanh(deviation[0, 1])
    shaped = CREDIT_RULES.get("effective_rank_bonus")(torch.full((2, 3), 9.0, dtype=F64), batch, stride=1)
    torch.testing.assert_close(shaped[0], torch.full((3,), 9.0 + float(expected), dtype=F64))
    assert float(tau) > 0.5


def test_bad_hyper_parameters():
    batch = StepBatch(mask=torch.ones(1, 1), group_ids=torch.tensor([0]), hidden=torch.zeros(1, 1, 2))
    rule = CREDIT_RULES.get("effective_rank_bonus")
    with pytest.raises(ValueError, match=r"stride=0 must be an integer >= 1"):
        rule(torch.zeros(1, 1), batch, stride=0)
    with pytest.raises(ValueError, match=r"kappa >= 1"):
        rule(torch.zeros(1, 1), batch, kappa=0.5)
    with pytest.raises(ValueError, match=r"3 numbers each"):
        rule(torch.zeros(1, 1), batch, explore_weights=(1.0,))


def test_the_moving_average_baseline_is_kept_across_steps_and_checkpoints():
    from genalign.algorithms import bind_option
    from genalign.experimental.credit.running_means import RunningMean

    hidden = torch.tensor([
        [[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]],  # (ERA, ERV, ER) = (0, 1, 2)
        [[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]],  # (0, 0, 1)
    ])  # fmt: skip
    rule = bind_option(CREDIT_RULES, "effective_rank_bonus", {"stride": 2, "baseline": "moving_average"})
    first = StepBatch(mask=torch.ones(2, 4), group_ids=torch.tensor([0, 0]), hidden=hidden)
    advantages = torch.tensor([[2.0] * 4, [-2.0] * 4], dtype=F64)
    aux = 0.5 * math.tanh(1.0) + 0.5 * math.tanh(1 / 3)  # deviations (0, 1, 1/3) from the baseline (0, 0.5, 1.5)
    # step 1: no earlier step, the batch mean (0, 0.5, 1.5) is the baseline (here the group's mean too)
    torch.testing.assert_close(rule(advantages, first), torch.tensor([[2.0 + aux] * 4, [-2.0] * 4], dtype=F64))
    # step 2: sample 0 alone. Its group's mean is itself (no bonus with baseline: group); the moving baseline is
    # step 1's batch mean, so it earns the same bonus as in step 1
    second = StepBatch(mask=torch.ones(1, 4), group_ids=torch.tensor([3]), hidden=hidden[:1])
    group_only = CREDIT_RULES.get("effective_rank_bonus")(advantages[:1], second, stride=2)
    torch.testing.assert_close(group_only, advantages[:1])
    torch.testing.assert_close(rule(advantages[:1], second), torch.full((1, 4), 2.0 + aux, dtype=F64))
    # the average is 0.9·(0, 0.5, 1.5) + 0.1·(0, 1, 2), and it survives a checkpoint
    torch.testing.assert_close(rule.history.value(), torch.tensor([0.0, 0.55, 1.55], dtype=F64))
    restored = bind_option(CREDIT_RULES, "effective_rank_bonus", {"stride": 2, "baseline": "moving_average"})
    restored.load_state_dict(rule.state_dict())
    assert restored.state_dict() == rule.state_dict() == {"mean": pytest.approx([0.0, 0.55, 1.55]), "updates": 2}
    with pytest.raises(ValueError, match=r"momentum=1.0 must be in \[0, 1\)"):
        RunningMean(size=3, momentum=1.0)
    with pytest.raises(ValueError, match=r"baseline='ema' must be 'group'"):
        bind_option(CREDIT_RULES, "effective_rank_bonus", {"baseline": "ema"})
