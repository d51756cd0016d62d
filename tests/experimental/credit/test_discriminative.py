"""DelTA [248] (``discriminative_tokens``): the side-wise centroids of unit hidden states, the discriminating axis and
the self-normalised coefficients against hand-computed values; the config loader accepts it on the causal LM."""

from __future__ import annotations

import math

import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from tests.algorithms.arith_config import arith_lm_config

F64 = torch.float64
ADV = torch.tensor([1.0, -1.0], dtype=F64)
# token 0 of both responses is a shared pattern ([0, 1]); token 1 is side-specific: [1, 0] in the correct response,
# [−1, 0] in the incorrect one
HIDDEN = torch.tensor([[[0.0, 1.0], [1.0, 0.0]], [[0.0, 1.0], [-1.0, 0.0]]], dtype=F64)


def delta(hidden=HIDDEN, adv=ADV, **hp) -> torch.Tensor:
    inputs = StepBatch(
        sample_advantages=adv, mask=torch.ones(2, 2), group_ids=torch.zeros(2, dtype=torch.long), hidden=hidden
    )
    return CREDIT_RULES.get("discriminative_tokens")(adv[:, None].expand(2, 2).clone(), inputs, **hp)


def test_side_specific_tokens_are_amplified_and_shared_ones_damped():
    w = delta(temperature=0.5) / ADV[:, None]
    # μ+ = (0.5, 0.5), μ− = (−0.5, 0.5): axis (1, 0); signed scores s = [[0, 1], [0, 1]]
    # c = exp(s/τ) / mean_side = 2/(1 + e²) and 2e²/(1 + e²) in each side
    low, high = 2 / (1 + math.exp(2)), 2 * math.exp(2) / (1 + math.exp(2))
    torch.testing.assert_close(w, torch.tensor([[low, high], [low, high]], dtype=F64), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(w.mean(1), torch.ones(2, dtype=F64))  # self-normalised: each side keeps its weight
    # α mixes with GRPO; the scale of the hidden states does not matter
    torch.testing.assert_close(delta(alpha=0.5, temperature=0.5) / ADV[:, None], 0.5 + 0.5 * w)
    torch.testing.assert_close(delta(hidden=7.0 * HIDDEN, temperature=0.5), delta(temperature=0.5))


def test_without_both_sides_the_weights_are_one():
    same_side = torch.tensor([1.0, 0.5], dtype=F64)
    torch.testing.assert_close(delta(adv=same_side), same_side[:, None].expand(2, 2))


def test_config_accepts_delta_and_requests_hidden_states_before_the_update():
    config = arith_lm_config(credit=["discriminative_tokens"])
    request = config.algorithm.advantage_stage().prepass()
    assert request is not None and "hidden" in request.features
