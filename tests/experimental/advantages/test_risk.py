"""RiskPO [256] (estimator ``mixed_var``), hand-computed: the gradient weights of a Mixed Value-at-Risk objective
(range VaR plus a lower-tail CVaR), centred per bundle, with bundles of several questions."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import compute_advantages

F64 = torch.float64


def advantages(rewards, groups, **hp):
    return compute_advantages("mixed_var", torch.tensor(rewards, dtype=F64), torch.tensor(groups), **hp)


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=F64), rtol=0, atol=1e-12)


def test_the_middle_band_and_the_lower_tail_drive_the_update():
    # R = 0..4, α = 0.4 -> q_α = 1 (2nd smallest), β = 0.8 -> q_β = 3 (4th smallest)
    # range part (clamp(R, 1, 3) − 3)/0.4 = [−5, −5, −2.5, 0, 0]; tail (min(R, 1) − 1)/0.4 = [−2.5, 0, 0, 0, 0]
    # g = [−7.5, −5, −2.5, 0, 0], mean −3
    close(advantages([0.0, 1.0, 2.0, 3.0, 4.0], [0] * 5, lower=0.4, upper=0.8), [-4.5, -2.0, 0.5, 3.0, 3.0])
    # ω = 0: the range VaR alone: g = [−5, −5, −2.5, 0, 0], mean −2.5
    close(advantages([0.0, 1.0, 2.0, 3.0, 4.0], [0] * 5, lower=0.4, upper=0.8, tail_weight=0.0),
          [-2.5, -2.5, 0.0, 2.5, 2.5])  # fmt: skip


def test_binary_rewards_without_bundles():
    # 3 of 8 wrong: q_0.2 = 0, q_0.8 = 1 -> g = (R − 1)/0.6, centred: the Dr. GRPO advantage over 0.6
    close(advantages([0, 0, 0, 1, 1, 1, 1, 1], [0] * 8), [-(5 / 8) / 0.6] * 3 + [(3 / 8) / 0.6] * 5)
    # a single success among 8: q_0.2 = q_0.8 = 0 -> no signal without bundling
    close(advantages([1, 0, 0, 0, 0, 0, 0, 0], [0] * 8), [0.0] * 8)


def test_bundles_pair_the_jth_samples_of_their_groups():
    # groups 0 and 1 form a bundle: outcomes j = mean of the j-th samples = [0, ½, 1, 1]; q_0.2 = 0, q_0.8 = 1
    # g = (R − 1)/0.6 = [−5/3, −5/6, 0, 0], mean −5/8
    rewards = [*(0, 0, 1, 1), *(0, 1, 1, 1), *(1, 0, 0, 0), *(1, 1, 1, 1)]  # four groups
    first = [-5 / 3 + 5 / 8, -5 / 6 + 5 / 8, 5 / 8, 5 / 8]
    # groups 2 and 3: outcomes [1, ½, ½, ½]; q_0.2 = ½, q_0.8 = 1 -> g = (R − 1)/0.6 + (min(R, ½) − ½)/0.2
    # = [0, −5/6, −5/6, −5/6], mean −5/8
    second = [0.0 + 5 / 8, -5 / 6 + 5 / 8, -5 / 6 + 5 / 8, -5 / 6 + 5 / 8]
    close(advantages(rewards, [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4, bundle_size=2), first * 2 + second * 2)
    # the lone success of group 2 gets a signal in its bundle (it had none on its own)
    assert advantages(rewards, [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4, bundle_size=2)[8] > 0


def test_missing_rewards_and_bad_arguments():
    result = advantages([1.0, float("nan"), 0.0, 0.0, 1.0], [0] * 5, lower=0.25, upper=0.75)
    assert result[1] == 0.0  # a missing reward gets no advantage
    # present R = [1, 0, 0, 1]: q_0.25 = 0, q_0.75 = 1 -> g = (R − 1)/0.5, centred
    close(result[[0, 2, 3, 4]], [1.0, -1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="0 < lower < upper <= 1"):
        advantages([0.0, 1.0], [0, 0], lower=0.8, upper=0.2)
    with pytest.raises(ValueError, match="groups of a bundle need one size"):
        advantages([0.0, 1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1, 1], bundle_size=2)
