"""REVA-PO's response-weighted KL [18] (``response_weighted_kl``): per-response weights from the advantage sign and the
group-normalised reference entropy, against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import REGULARIZERS, ScoreOutput, StepBatch
from genalign.algorithms.regularizers.response_weighted import RANGE_EPS, normalized_group_entropy

F64 = torch.float64


def weighted(kl, ref_entropy, mask, advantages, group_ids, **hp):
    kl = torch.tensor(kl, dtype=F64, requires_grad=True)
    score = ScoreOutput(torch.zeros_like(kl), {"kl": kl, "ref_entropy": torch.tensor(ref_entropy, dtype=F64)})
    batch = StepBatch(mask=torch.tensor(mask, dtype=F64), group_ids=torch.tensor(group_ids))
    value = REGULARIZERS.get("response_weighted_kl")(score, torch.tensor(advantages, dtype=F64), batch, **hp)
    (grad,) = torch.autograd.grad(value.sum(), kl)
    return value.detach(), grad


def test_weights_follow_the_advantage_sign_and_the_reference_entropy_rank():
    # group 0: mean reference entropies (1, 2, 3) -> x = (0, 1/2, 1); group 1: equal entropies -> x = 0
    ref_entropy = [[1.0, 1.0], [1.0, 3.0], [3.0, 9.0], [5.0, 5.0], [5.0, 5.0]]
    mask = [[1, 1], [1, 1], [1, 0], [1, 1], [1, 1]]  # the padded action of sample 2 is not averaged
    x = [0.0, 1.0 / (2.0 + RANGE_EPS), 2.0 / (2.0 + RANGE_EPS), 0.0, 0.0]
    value, grad = weighted([[0.5, 1.0]] * 5, ref_entropy, mask, [1.0, 1.0, -1.0, 0.0, -2.0], [0, 0, 0, 1, 1])
    beta = [0.05 + 0.05 * (1 - x[0]), 0.05 + 0.05 * (1 - x[1]), 0.10 + 0.02 * x[2], 0.10, 0.10 + 0.02 * x[4]]
    expected = torch.tensor([[b * m[0], b * m[1]] for b, m in zip(beta, mask)], dtype=F64)
    torch.testing.assert_close(grad, expected)  # the weight multiplies the KL's gradient
    torch.testing.assert_close(value, expected * torch.tensor([0.5, 1.0], dtype=F64))
    # a positive response with the group's lowest reference entropy keeps β_base, one halfway up gets β_min + half the
    # range; a negative one at the top of the range gets β_max
    assert beta[2] == pytest.approx(0.12, abs=1e-7) and beta[1] == pytest.approx(0.075, abs=1e-7)


def test_normalised_entropy_is_a_group_min_max():
    x = normalized_group_entropy(torch.tensor([[2.0], [4.0], [7.0], [1.0]]), torch.ones(4, 1),
                                 torch.tensor([3, 3, 9, 9]))  # fmt: skip
    torch.testing.assert_close(x, torch.tensor([0.0, 2 / (2 + RANGE_EPS), 6 / (6 + RANGE_EPS), 0.0]))


def test_bad_weights_are_rejected():
    with pytest.raises(ValueError, match=r"0 <= beta_min <= beta_base <= beta_max"):
        weighted([[1.0]], [[1.0]], [[1]], [1.0], [0], beta_min=0.2)
