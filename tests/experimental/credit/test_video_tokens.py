"""Video-KTR [230] key-token credit: the union of the visual, temporal and entropy top fractions, hand-checked."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit import CREDIT_RULES, apply_credit


def k3_inverse(d: float) -> float:
    """A log-prob change δ > 0 with exp(δ) − δ − 1 = d (bisection), to build inputs with known scores."""
    low, high = 0.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if math.exp(mid) - mid - 1 < d else (low, mid)
    return low


def make_inputs(visual, temporal, entropy, mask=None):
    logp = torch.zeros(1, 5)
    mask = torch.ones(1, 5) if mask is None else mask
    return StepBatch(
        sample_advantages=torch.tensor([2.0]),
        mask=mask,
        group_ids=torch.tensor([0]),
        behaviour_logp=logp,
        entropy=torch.tensor([entropy]),
        logp_without_image=torch.tensor([[k3_inverse(v) for v in visual]]),
        logp_frames_shuffled=torch.tensor([[k3_inverse(t) for t in temporal]]),
    )


def test_key_tokens_union_of_each_signals_top_fraction():
    inputs = make_inputs(
        visual=[0.1, 3.0, 0.2, 0.0, 0.0], temporal=[0.0, 0.0, 0.0, 0.5, 0.1], entropy=[0.1, 0.2, 0.3, 0.05, 0.01]
    )
    # fraction 0.2 of 5 tokens = 1 token per signal: visual -> 1, temporal -> 3, entropy -> 2
    out = apply_credit([("video_key_tokens", {})], inputs["sample_advantages"], inputs)
    assert out.tolist() == [[0.0, 2.0, 2.0, 2.0, 0.0]]
    only_temporal = {"visual_fraction": 0.0, "entropy_fraction": 0.0, "temporal_fraction": 0.4}
    out = apply_credit([("video_key_tokens", only_temporal)], inputs["sample_advantages"], inputs)
    assert out.tolist() == [[0.0, 0.0, 0.0, 2.0, 2.0]]


def test_tokens_without_signal_and_padding_are_never_key():
    inputs = make_inputs(
        visual=[0.0] * 5, temporal=[0.0] * 5, entropy=[0.0, 0.0, 0.0, 0.0, 9.0], mask=torch.tensor([[1, 1, 1, 1, 0.0]])
    )  # single-frame sample without visual signal; the high-entropy token is padding
    out = apply_credit([("video_key_tokens", {"entropy_fraction": 1.0})], inputs["sample_advantages"], inputs)
    assert out.abs().sum() == 0


def test_key_tokens_declares_its_features_and_rejects_bad_fractions():
    assert set(CREDIT_RULES.meta("video_key_tokens")["needs"]) == {
        "logp_without_image", "logp_frames_shuffled", "entropy", "behaviour_logp"
    }  # fmt: skip
    inputs = make_inputs([0.0] * 5, [0.0] * 5, [0.0] * 5)
    with pytest.raises(ValueError, match="temporal_fraction"):
        apply_credit([("video_key_tokens", {"temporal_fraction": 1.5})], inputs["sample_advantages"], inputs)
    with pytest.raises(ValueError, match="every fraction is 0"):
        zero = {"visual_fraction": 0.0, "temporal_fraction": 0.0, "entropy_fraction": 0.0}
        apply_credit([("video_key_tokens", zero)], inputs["sample_advantages"], inputs)
