"""CoRT counterfactual-replay token credit [275]: the signed response advantage redistributed by the rubric's
log-likelihood contrast, against hand-computed weights."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_tokens_the_rubric_made_likely_get_more_of_the_response_advantage():
    rubric = torch.tensor([[-0.5, -1.0, -2.0], [-1.0, -1.0, 0.0]], dtype=F64)  # logπ(o | rubric prompt)
    without = torch.tensor([[-2.5, -1.0, -1.0], [-1.0, -3.0, 5.0]], dtype=F64)  # logπ(o | criteria-free prompt)
    batch = StepBatch(mask=MASK, behaviour_logp=rubric, counterfactual_logp=without)
    incoming = torch.tensor([[2.0, 2.0, 2.0], [-1.0, -1.0, -1.0]], dtype=F64)
    out = CREDIT_RULES.get("rubric_contrast")(incoming, batch)
    # contrasts: row 0 (2, 0, −1), row 1 (0, 2); s = σ(c), w = s / mean_row(s)
    s0 = [sigmoid(2.0), 0.5, sigmoid(-1.0)]
    s1 = [0.5, sigmoid(2.0)]
    m0, m1 = sum(s0) / 3, sum(s1) / 2
    expected = torch.tensor([[2 * s / m0 for s in s0], [-s1[0] / m1, -s1[1] / m1, -1.0]], dtype=F64)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out[0].sum(), torch.tensor(6.0, dtype=F64))  # the response's total is unchanged
    half = CREDIT_RULES.get("rubric_contrast")(incoming, batch, mix=0.5)
    torch.testing.assert_close(half, 0.5 * incoming + 0.5 * expected)
    with pytest.raises(ValueError, match="temperature > 0"):
        CREDIT_RULES.get("rubric_contrast")(incoming, batch, temperature=0.0)
