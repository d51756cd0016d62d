"""STEER [328] (``entropy_change``): the first-order entropy change of each token and its exponential / linear
weight maps against hand-computed values; the config loader accepts it on the arith-lm demo."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.algorithms.credit.entropy_dynamics import entropy_change_magnitude
from tests.algorithms.arith_config import arith_lm_config

F64 = torch.float64
ADV = torch.tensor([[1.0, 1.0], [-2.0, -2.0]], dtype=F64)
PROBS = torch.tensor([[0.5, 0.9], [0.5, 0.25]], dtype=F64)
ENTROPY = torch.tensor([[1.0, 0.5], [0.2, 2.0]], dtype=F64)
# Ω = |A·(1 − p)·(ln p + H)|
OMEGA = [
    [1 * 0.5 * (math.log(0.5) + 1.0), 1 * 0.1 * (math.log(0.9) + 0.5)],  # 0.15343, 0.03946
    [2 * 0.5 * abs(math.log(0.5) + 0.2), 2 * 0.75 * (math.log(0.25) + 2.0)],  # 0.49315, 0.92056 (the largest)
]


def steer(advantages=ADV, mask=None, **hp):
    mask = torch.ones(2, 2) if mask is None else mask
    inputs = StepBatch(sample_advantages=advantages[:, 0], mask=mask, group_ids=torch.zeros(2, dtype=torch.long), behaviour_logp=PROBS.log(), entropy=ENTROPY)  # fmt: skip
    return CREDIT_RULES.get("entropy_change")(advantages, inputs, **hp)


def test_entropy_change_magnitude_matches_hand_values():
    torch.testing.assert_close(entropy_change_magnitude(ADV, PROBS.log(), ENTROPY), torch.tensor(OMEGA, dtype=F64))


def test_exponential_map_gives_w_min_to_the_largest_change():
    out = steer()
    k = -math.log(0.8) / OMEGA[1][1]  # the largest Ω gets exactly w_min = 0.8
    expected = torch.tensor([[math.exp(-k * o) for o in row] for row in OMEGA], dtype=F64)
    torch.testing.assert_close(out / ADV, expected)
    assert out[1, 1] / ADV[1, 1] == pytest.approx(0.8)
    # tiny changes: k is capped by Ω_max >= 0.02, so weights stay near 1 instead of all reaching w_min
    small = steer(ADV * 1e-3) / (ADV * 1e-3)  # Ω_max = 0.00092 < 0.02: k = −ln 0.8 / 0.02
    assert small[1, 1] == pytest.approx(math.exp(math.log(0.8) * OMEGA[1][1] * 1e-3 / 0.02))  # 0.9898, not 0.8


def test_linear_map_spans_w_max_to_w_min():
    w = steer(mode="linear", min_weight=0.8, max_weight=1.2) / ADV
    low, high = OMEGA[0][1], OMEGA[1][1]
    expected = [[1.2 - (o - low) * 0.4 / (high - low) for o in row] for row in OMEGA]
    torch.testing.assert_close(w, torch.tensor(expected, dtype=F64))
    assert w[0, 1] == pytest.approx(1.2) and w[1, 1] == pytest.approx(0.8)


def test_padding_is_ignored_and_bad_weights_rejected():
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # without (1, 1), Ω_max is 0.49315 at (1, 0)
    w = steer(mask=mask) / ADV
    assert w[1, 0] == pytest.approx(0.8) and w[1, 1] == 1.0
    with pytest.raises(ValueError, match="min_weight"):
        steer(min_weight=0.0)


def test_config_accepts_steer_on_the_causal_lm():
    arith_lm_config(credit=[{"name": "entropy_change", "mode": "linear", "max_weight": 1.2}])
