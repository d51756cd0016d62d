"""State objects of the cross-step estimators: Welford merging, hyper-parameters, checkpoint round trip."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import ADVANTAGE_ESTIMATORS, Stateful, bind_option, compute_advantages
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


def bound(name: str):
    return bind_option(ADVANTAGE_ESTIMATORS, name, {})


def test_advantage_state_round_trip_and_mismatch():
    assert not isinstance(bound("grpo"), Stateful)
    state = bound("empirical_bayes")
    state.update(torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1, 2, 2]))
    restored = bound("empirical_bayes")
    restored.load_state_dict(state.state_dict())
    assert restored.learned() == state.learned()
    assert math.isfinite(restored.learned()["prior_var"])
    with pytest.raises(ValueError, match=r"same algorithm\.advantage"):
        bound("smooth_standardized").load_state_dict(state.state_dict())


def test_the_bound_estimator_uses_what_it_learned_and_config_values_win():
    rewards, groups = torch.tensor([0.0, 0, 0, 0, 1, 0, 1, 0]), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    estimator = bound("empirical_bayes")
    torch.testing.assert_close(estimator(rewards, groups), compute_advantages("empirical_bayes", rewards, groups))
    estimator.update(rewards, groups)  # prior_mean 0.25, prior_var 0.0625, noise_var 0.125
    expected = compute_advantages("empirical_bayes", rewards, groups, **estimator.learned())
    torch.testing.assert_close(estimator(rewards, groups), expected)
    fixed = bind_option(ADVANTAGE_ESTIMATORS, "empirical_bayes", {"prior_mean": 0.9})
    fixed.update(rewards, groups)
    hp = fixed.learned() | {"prior_mean": 0.9}
    torch.testing.assert_close(fixed(rewards, groups), compute_advantages("empirical_bayes", rewards, groups, **hp))
