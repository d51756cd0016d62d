"""Token weights from the sampled token's probability (GRPO-SG [261]) and from the update direction Δlog p ([266])
against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ADV = torch.tensor([2.0, -1.0], dtype=F64)


def incoming() -> torch.Tensor:
    return ADV[:, None].expand(MASK.shape).clone()  # [2, 3]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_probability_shaping_weights_each_token_by_a_clipped_sigmoid_of_its_probability():
    probs = torch.tensor([[1.0, 0.5, 0.05], [0.9, 0.2, 0.3]], dtype=F64)
    batch = StepBatch(mask=MASK, sample_advantages=ADV, behaviour_logp=probs.log())
    out = CREDIT_RULES.get("probability_shaping")(incoming(), batch)
    # w = clip(4·(σ(p) − 0.5), 0.1, 1): p = 1 -> 0.92423, 0.5 -> 0.48984, 0.05 -> 0.05 clipped up to 0.1
    w = [
        [4 * (sigmoid(1.0) - 0.5), 4 * (sigmoid(0.5) - 0.5), 0.1],
        [4 * (sigmoid(0.9) - 0.5), 4 * (sigmoid(0.2) - 0.5)],
    ]
    expected = torch.tensor([[2 * w[0][0], 2 * w[0][1], 2 * 0.1], [-w[1][0], -w[1][1], -1.0]], dtype=F64)
    torch.testing.assert_close(out, expected)  # the padding action keeps its incoming -1
    assert math.isclose(w[0][0], 0.924234, rel_tol=1e-5) and math.isclose(w[0][1], 0.489837, rel_tol=1e-5)
    # a steeper, wider setting reaches the upper bound: w = clip(10·(σ(p/0.5) − 0.5), 0, 1.2) = 1.2 at p = 1
    steep = CREDIT_RULES.get("probability_shaping")(incoming(), batch, alpha=10.0, tau=0.5, low=0.0, high=1.2)
    assert float(steep[0, 0]) == pytest.approx(2 * 1.2)
    with pytest.raises(ValueError, match="low <= high"):
        CREDIT_RULES.get("probability_shaping")(incoming(), batch, low=0.5, high=0.2)


def test_delta_logp_weights_follow_the_signed_change_from_the_reference():
    # k1 = logπθ − logπ_ref per action; the third action of sample 1 is padding (its value must not count)
    delta = torch.tensor([[0.0, 1.0, -3.0], [0.5, 0.0, 9.0]], dtype=F64)
    batch = StepBatch(mask=MASK, sample_advantages=ADV, kl=delta)
    out = CREDIT_RULES.get("delta_logp_weights")(incoming(), batch)
    raw = [1.0, math.e, math.exp(-2.0), math.exp(0.5), 1.0]  # exp(clip(Δ, −2, 2)) of the five valid actions
    mean = sum(raw) / 5  # 1.30047
    expected = torch.tensor(
        [[2 * raw[0] / mean, 2 * raw[1] / mean, 2 * raw[2] / mean], [-raw[3] / mean, -raw[4] / mean, -1.0]], dtype=F64
    )
    torch.testing.assert_close(out, expected)
    assert mean == pytest.approx(1.300468, rel=1e-6)
    # at the first step the policy is the reference: every weight is 1
    flat = CREDIT_RULES.get("delta_logp_weights")(incoming(), StepBatch(mask=MASK, kl=torch.zeros(2, 3, dtype=F64)))
    torch.testing.assert_close(flat, incoming())
    assert CREDIT_RULES.meta("delta_logp_weights")["needs"] == ("kl",)
