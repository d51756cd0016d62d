"""Perplexity and position reweighting of the plateau stage [180] against hand-computed weights."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from genalign.algorithms import CREDIT_RULES, StepBatch

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
# sample 0: log-perplexity 0.1 (confident), sample 1: 1.0
LOGP = torch.tensor([[-0.1, -0.1, -0.1, -0.1], [-1.0, -1.0, 0.0, 0.0]], dtype=F64)


def batch(progress: float = 0.5) -> StepBatch:
    return StepBatch(mask=MASK, behaviour_logp=LOGP, progress=progress)


def test_low_perplexity_samples_and_late_tokens_get_more_credit():
    out = CREDIT_RULES.get("perplexity_position")(torch.ones(2, 4, dtype=F64), batch())
    # z-scores of (0.1, 1.0): mean 0.55, unbiased std 0.9/√2 -> z = (−1/√2, +1/√2); u = 2·softmax(−0.5·z)
    u0 = 2.0 / (1.0 + math.exp(-1.0 / math.sqrt(2.0)))  # 1.33952
    u1 = 2.0 - u0
    # v = 1 + 0.5·(2(t − ½)/|o| − 1): |o| = 4 -> 0.625, 0.875, 1.125, 1.375; |o| = 2 -> 0.75, 1.25
    expected = torch.tensor(
        [[u0 * 0.625, u0 * 0.875, u0 * 1.125, u0 * 1.375], [u1 * 0.75, u1 * 1.25, 1.0, 1.0]], dtype=F64
    )
    torch.testing.assert_close(out, expected)
    assert u0 == pytest.approx(1.339523, rel=1e-5)
    only_position = CREDIT_RULES.get("perplexity_position")(torch.ones(2, 4, dtype=F64), batch(), perplexity_coef=0.0)
    torch.testing.assert_close(only_position[1, :2], torch.tensor([0.75, 1.25], dtype=F64))


def test_before_the_plateau_the_advantages_are_unchanged():
    incoming = torch.full((2, 4), -2.0, dtype=F64)
    out = CREDIT_RULES.get("perplexity_position")(incoming, batch(progress=0.2), start=0.3)
    torch.testing.assert_close(out, incoming)
    with pytest.raises(ValueError, match="position_coef"):
        CREDIT_RULES.get("perplexity_position")(incoming, batch(), position_coef=1.5)


def test_the_plateau_is_detected_from_the_entropy_dynamics_and_survives_a_checkpoint():
    from genalign.algorithms import bind_option

    options = {"stage": "entropy_plateau", "window": 2, "tolerance": 0.1}
    rule = bind_option(CREDIT_RULES, "perplexity_position", options)
    incoming = torch.ones(2, 4, dtype=F64)
    weighted = CREDIT_RULES.get("perplexity_position")(incoming, batch())

    def step(scale: float) -> Tensor:  # a batch whose mean surprisal is 0.55·scale
        return rule(incoming, StepBatch(mask=MASK, behaviour_logp=LOGP * scale, progress=0.0))

    # mean entropies 0.55·(2, 1.5, 1.4): the change over 2 steps is |1.4 − 2|/2 = 30 % > 10 %: still rising
    for scale in (2.0, 1.5, 1.4):
        torch.testing.assert_close(step(scale), incoming)
    restored = bind_option(CREDIT_RULES, "perplexity_position", options)
    restored.load_state_dict(rule.state_dict())
    assert restored.state_dict() == {"entropies": pytest.approx([1.1, 0.825, 0.77]), "reached": False}
    rule = restored
    # 0.55·(1.5, 1.4, 1.4): |1.4 − 1.5|/1.5 = 6.7 % <= 10 %: the plateau starts, and the weights apply (the
    # perplexity weight is scale-free in z, so a batch with logp·1 gives the unbound rule's weights)
    torch.testing.assert_close(step(1.4), CREDIT_RULES.get("perplexity_position")(incoming, batch_scaled(1.4)))
    torch.testing.assert_close(step(1.0), weighted)  # it lasts, whatever the entropy does next
    assert rule.state_dict()["reached"] is True
    with pytest.raises(ValueError, match="bind the rule"):
        CREDIT_RULES.get("perplexity_position")(incoming, batch(), stage="entropy_plateau")
    with pytest.raises(ValueError, match=r"window=0 must be an integer >= 1"):
        bind_option(CREDIT_RULES, "perplexity_position", {"stage": "entropy_plateau", "window": 0})


def batch_scaled(scale: float) -> StepBatch:
    return StepBatch(mask=MASK, behaviour_logp=LOGP * scale, progress=0.0)
