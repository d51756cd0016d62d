"""Credit rules of genalign.experimental.credit.sampling: D³S token-level down-sampling [27] and XRPO's novelty-aware
advantage sharpening [241], on hand-computed batches."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, apply_credit
from genalign.experimental.credit.sampling import annealed_fraction

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ENTROPY = torch.tensor([[0.5, 0.1, 0.3], [0.2, 0.4, 9.0]])


def d3s(progress, **hp):
    inputs = StepBatch(sample_advantages=torch.tensor([1.0, -2.0]), mask=MASK, group_ids=torch.tensor([0, 0]),
                          entropy=ENTROPY, progress=progress)  # fmt: skip
    return apply_credit([("d3s_tokens", hp)], inputs["sample_advantages"], inputs)


def test_annealed_fraction_schedule():
    assert annealed_fraction(0.0, 0.5, 0.75) == 0.5
    assert annealed_fraction(0.375, 0.5, 0.75) == pytest.approx(0.75)
    assert annealed_fraction(0.9, 0.5, 0.75) == 1.0
    assert annealed_fraction(0.0, 0.5, 0.0) == 1.0  # relax_until = 0: never down-sample


@pytest.mark.parametrize(
    ("progress", "expected"),
    [
        # |A|·H = [[0.5, 0.1, 0.3], [0.4, 0.8, pad]]; 5 valid tokens
        (0.0, [[1.0, 0.0, 0.0], [-2.0, -2.0, 0.0]]),  # ρ = 0.5: the top ⌈2.5⌉ = 3 (0.8, 0.5, 0.4)
        (0.375, [[1.0, 0.0, 1.0], [-2.0, -2.0, 0.0]]),  # ρ = 0.75: the top ⌈3.75⌉ = 4 adds 0.3
        (0.8, [[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]]),  # ρ = 1: unchanged (padding is masked by the loss)
    ],
)
def test_d3s_tokens_keeps_the_largest_advantage_times_entropy(progress, expected):
    got = d3s(progress, start_fraction=0.5, relax_until=0.75)
    torch.testing.assert_close(got, torch.tensor(expected))


def test_d3s_tokens_needs_entropy_and_checks_its_schedule():
    assert CREDIT_RULES.meta("d3s_tokens")["needs"] == ("entropy",)
    with pytest.raises(ValueError, match=r"start_fraction = 1\.5"):
        d3s(0.0, start_fraction=1.5)
    inputs = StepBatch(sample_advantages=torch.ones(2), mask=MASK, group_ids=torch.tensor([0, 0]), progress=0.0)
    with pytest.raises(ValueError, match=r"needs the signal 'entropy'"):
        apply_credit([("d3s_tokens", {})], inputs["sample_advantages"], inputs)


def xrpo(**hp):
    # group 0: geometric-mean token probabilities 0.8, 0.4, 0.6 (mean 0.6); group 1: two equal responses
    probabilities = torch.tensor([[0.8, 0.8], [0.4, 0.4], [0.6, 0.6], [0.5, 0.5], [0.5, 0.5]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    logp = torch.where(mask > 0, probabilities.log(), -30.0)  # padding log-probs are ignored
    inputs = StepBatch(sample_advantages=torch.tensor([1.0, 0.5, -1.5, 0.7, -0.7]), mask=mask,
                          group_ids=torch.tensor([0, 0, 0, 1, 1]), behaviour_logp=logp)  # fmt: skip
    return apply_credit([("xrpo_novelty", hp)], inputs["sample_advantages"], inputs)


def test_xrpo_novelty_amplifies_unlikely_correct_responses():
    got = xrpo(novelty_weight=0.6, max_ratio=0.5)
    # novelty: sample 0: 1 − 0.8/0.6 < 0 -> 0; sample 1: 1 − 0.4/0.6 = 1/3 -> bonus min(0.2, 0.25) = 0.2;
    # sample 2 is negative; group 1: no novelty
    factors = torch.tensor([1.0, (0.5 + 0.2) / 0.5, 1.0, 1.0, 1.0])
    expected = torch.tensor([1.0, 0.5, -1.5, 0.7, -0.7])[:, None] * factors[:, None] * torch.ones(5, 2)
    torch.testing.assert_close(got, expected)
    capped = xrpo(novelty_weight=3.0, max_ratio=0.5)  # 3 · 1/3 = 1 > κ·A = 0.25
    assert capped[1, 0].item() == pytest.approx(0.5 + 0.25)
    assert math.isclose(xrpo(novelty_weight=0.0)[1, 0].item(), 0.5)


def test_xrpo_novelty_rejects_negative_weights():
    with pytest.raises(ValueError, match="novelty_weight = -1"):
        xrpo(novelty_weight=-1.0)
