"""NAT [220] (``token_subsample``): uniform and random-prefix token subsets with Horvitz–Thompson weights; hand-computed
inclusion probabilities and a Monte-Carlo check that the reweighted advantages are unbiased."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.subsampling import prefix_inclusion
from tests.algorithms.arith_config import arith_lm_config

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
ADV = torch.tensor([[2.0, 2.0, 2.0, 2.0], [-1.0, -1.0, -1.0, -1.0]], dtype=F64)


def subsample(**hp) -> torch.Tensor:
    inputs = StepBatch(sample_advantages=ADV[:, 0], mask=MASK, group_ids=torch.zeros(2, dtype=torch.long))
    return CREDIT_RULES.get("token_subsample")(ADV, inputs, **hp)


def test_prefix_inclusion_probabilities_match_hand_values():
    position = torch.tensor([[1, 2, 3, 4]])
    length = torch.tensor([[4]])
    # K uniform on {1, 2, 3, 4}: P(K >= t) = 1, 3/4, 2/4, 1/4
    low, inclusion = prefix_inclusion(position, length, 0.0)
    assert low.item() == 1 and inclusion.tolist() == [[1.0, 0.75, 0.5, 0.25]]
    # at least half the response: K uniform on {2, 3, 4}: 1, 1, 2/3, 1/3
    _, inclusion = prefix_inclusion(position, length, 0.5)
    torch.testing.assert_close(inclusion, torch.tensor([[1.0, 1.0, 2 / 3, 1 / 3]], dtype=F64))


def test_uniform_scheme_keeps_tokens_with_inverse_probability_weights():
    torch.manual_seed(0)
    out = subsample(keep_fraction=0.5)
    kept = out != 0
    assert torch.equal(out[kept], (ADV / 0.5)[kept])  # kept tokens carry A / q
    assert not kept[1, 2:].any()  # never on padding


def test_prefix_scheme_keeps_a_prefix_with_its_inclusion_weights():
    torch.manual_seed(1)
    out = subsample(scheme="prefix")
    kept = out != 0
    for row in kept:  # a prefix: once dropped, dropped to the end
        assert row.int().diff().le(0).all()
    torch.testing.assert_close(out[0][kept[0]], (2.0 / torch.tensor([1.0, 0.75, 0.5, 0.25], dtype=F64))[kept[0]])


@pytest.mark.parametrize(
    "hp", [{"keep_fraction": 0.3}, {"scheme": "prefix"}, {"scheme": "prefix", "min_fraction": 0.5}]
)
def test_horvitz_thompson_weights_are_unbiased(hp):
    torch.manual_seed(0)
    mean = torch.stack([subsample(**hp) for _ in range(4000)]).mean(0)
    torch.testing.assert_close(mean, ADV * MASK, atol=0.12, rtol=0.0)  # E[keep/π]·A = A on valid tokens


def test_config_accepts_nat_on_the_causal_lm():
    arith_lm_config(credit=[{"name": "token_subsample", "scheme": "prefix"}])
    with pytest.raises(ValueError, match="scheme"):
        subsample(scheme="suffix")
