"""Temporal scheduling of credit allocation [260]: the high-entropy tokens of each trajectory first, the others
attenuated back in over training, against hand-computed weights."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.schedules import attenuation

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
ENTROPY = torch.tensor([[0.1, 2.0, 0.5, 1.5], [3.0, 0.2, 0.1, 9.0]])


def weights(progress: float, **hp) -> torch.Tensor:
    batch = StepBatch(mask=MASK, entropy=ENTROPY, progress=progress)
    return CREDIT_RULES.get("scheduled_token_focus")(torch.ones(2, 4, dtype=F64), batch, **hp)


def test_targeted_tokens_are_the_trajectory_percentile_and_the_others_fade_in():
    # q = 0.5: the top ⌈0.5·4⌉ = 2 entropies of row 0 (2.0, 1.5) and ⌈0.5·3⌉ = 2 of row 1 (3.0, 0.2); the padded 9.0
    # is not a candidate
    targeted = torch.tensor([[0, 1, 0, 1], [1, 1, 0, 1]], dtype=torch.bool)  # padding keeps weight 1
    hp = {"percentile": 0.5, "until": 0.5}
    torch.testing.assert_close(weights(0.0, **hp), torch.where(targeted, 1.0, 0.0).to(F64))  # targeted tokens only
    torch.testing.assert_close(weights(0.25, **hp), torch.where(targeted, 1.0, 0.5).to(F64))  # halfway back in
    torch.testing.assert_close(weights(0.75, **hp), torch.ones(2, 4, dtype=F64))  # uniform after `until`
    start = weights(0.0, percentile=0.5, until=0.5, start_weight=0.2)
    torch.testing.assert_close(start, torch.where(targeted, 1.0, 0.2).to(F64))
    cosine = weights(0.125, percentile=0.5, until=0.5, shape="cosine")  # s = (1 − cos(π/4)) / 2
    assert float(cosine[0, 0]) == pytest.approx((1 - math.cos(math.pi / 4)) / 2)


def test_attenuation_and_bad_values():
    assert attenuation(0.2, until=0.4, shape="linear") == pytest.approx(0.5)
    assert attenuation(0.9, until=0.4, shape="cosine") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="percentile"):
        weights(0.0, percentile=1.0)
