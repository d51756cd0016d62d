"""State objects of the cross-step estimators: Welford merging, hyper-parameters, checkpoint round trip."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import compute_advantages, make_advantage_state
from genalign.algorithms.advantages.state import EmpiricalBayesPrior, RewardHistory, RunningMoments


def test_running_moments_match_the_whole_stream():
    values = torch.tensor([0.5, 2.0, -1.0, 4.0, 3.0, float("nan")], dtype=torch.float64)
    moments = RunningMoments()
    moments.update(values[:2])
    moments.update(values[2:])
    finite = values[:5]
    assert moments.count == 5
    assert moments.mean == pytest.approx(float(finite.mean()))
    assert moments.variance == pytest.approx(float(finite.var(correction=0)))


def test_empirical_bayes_prior_feeds_the_estimator():
    prior = EmpiricalBayesPrior()
    assert prior.hyperparameters() == {}
    prior.update(torch.tensor([0.0, 0, 0, 0, 1, 0, 1, 0]), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))
    hp = prior.hyperparameters()
    assert hp == pytest.approx({"prior_mean": 0.25, "prior_var": 0.0625, "noise_var": 0.125})
    rewards, groups = torch.tensor([0.0, 0, 1, 1]), torch.tensor([0, 0, 1, 1])
    out = compute_advantages("empirical_bayes", rewards, groups, **hp, normalize=False)
    lam = (0.125 / 2) / (0.125 / 2 + 0.0625)  # = 0.5
    torch.testing.assert_close(out, torch.tensor([-lam * 0.25] * 2 + [1 - (0.5 + lam * 0.25)] * 2))


def test_reward_history_ema_and_cumulative_std():
    history = RewardHistory(momentum=0.9)
    history.update(torch.tensor([1.0, 1.0]))
    history.update(torch.tensor([0.0, 0.0]))
    assert history.hyperparameters("momentum_augmented") == {"momentum_mean": pytest.approx(0.9)}
    assert history.hyperparameters("smooth_standardized") == pytest.approx({"history_mean": 0.5, "history_std": 0.5})
    with pytest.raises(ValueError, match="momentum"):
        RewardHistory(momentum=1.0)


def test_advantage_state_round_trip_and_mismatch():
    assert make_advantage_state("grpo") is None
    state = make_advantage_state("empirical_bayes")
    state.update(torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1, 2, 2]))
    restored = make_advantage_state("empirical_bayes")
    restored.load_state_dict(state.state_dict())
    assert restored.hyperparameters() == state.hyperparameters()
    assert math.isfinite(restored.hyperparameters()["prior_var"])
    with pytest.raises(ValueError, match=r"same algorithm\.advantage"):
        make_advantage_state("smooth_standardized").load_state_dict(state.state_dict())
