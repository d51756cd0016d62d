"""EGSW [314] (``entropy_softmax_weights``): temperature-scaled softmax of advantage plus entropy over the samples of
a group, step-wise and trajectory-wise, against hand-computed weights; accepted by the config loader."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from tests.algorithms.arith_config import arith_lm_config

F64 = torch.float64
ADV = torch.tensor([1.0, -1.0], dtype=F64)
ENTROPY = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=F64)


def egsw(mask=None, groups=None, **hp):
    mask = torch.ones(2, 2) if mask is None else mask
    groups = torch.zeros(2, dtype=torch.long) if groups is None else groups
    inputs = StepBatch(sample_advantages=ADV, mask=mask, group_ids=groups, entropy=ENTROPY)
    return CREDIT_RULES.get("entropy_softmax_weights")(ADV[:, None].expand(2, 2).clone(), inputs, **hp)


def test_token_level_softmax_over_the_group_at_each_step():
    w = egsw(alpha=1.0, temperature=1.0) / ADV[:, None]
    # scores (A + α·H)/P: step 0 -> (1, −1); step 1 -> (2, −1); weights = 2·softmax over the two samples
    s0, s1 = 1 / (1 + math.exp(-2)), 1 / (1 + math.exp(-3))
    torch.testing.assert_close(w, torch.tensor([[2 * s0, 2 * s1], [2 * (1 - s0), 2 * (1 - s1)]], dtype=F64))
    # a high temperature flattens the weights toward GRPO's
    torch.testing.assert_close(egsw(temperature=1e6) / ADV[:, None], torch.ones(2, 2, dtype=F64), rtol=1e-5, atol=1e-5)


def test_sequence_level_uses_mean_entropy_and_padding_counts_out():
    w = egsw(alpha=1.0, level="sequence") / ADV[:, None]
    s = 1 / (1 + math.exp(-2.5))  # scores 1 + 0.5 and −1 + 0
    torch.testing.assert_close(w, torch.tensor([[2 * s] * 2, [2 * (1 - s)] * 2], dtype=F64))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    w = egsw(mask=mask, alpha=1.0) / ADV[:, None]
    assert w[0, 1] == 1.0 and w[1, 1] == 1.0  # step 1 has one valid sample: its softmax is 1, times 1 sample


def test_groups_are_normalised_separately():
    w = egsw(groups=torch.tensor([0, 1]), alpha=1.0)
    torch.testing.assert_close(w, ADV[:, None].expand(2, 2))  # singleton groups: weight 1 each
    with pytest.raises(ValueError, match="temperature"):
        egsw(temperature=0.0)


def test_config_accepts_egsw_on_the_causal_lm():
    arith_lm_config(credit=[{"name": "entropy_softmax_weights", "level": "sequence"}])
