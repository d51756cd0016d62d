"""Token credit from the model's internals (:mod:`genalign.experimental.credit.model_internals`): attention-entropy
weights ([272]), attention-flow credit ([299]) and saliency weights ([269]), against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.model_internals import mean_one, row_zscores

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_mean_one_and_row_zscores():
    valid = MASK > 0
    torch.testing.assert_close(
        mean_one(torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 7.0]], dtype=F64), valid),
        torch.tensor([[0.5, 1.0, 1.5], [1.0, 1.0, 1.0]], dtype=F64),  # a row with mean 0 keeps weight 1
    )
    z = row_zscores(torch.tensor([[1.0, 2.0, 3.0], [5.0, 5.0, 9.0]], dtype=F64), valid)
    torch.testing.assert_close(z, torch.tensor([[-math.sqrt(1.5), 0.0, math.sqrt(1.5)], [0.0, 0.0, 0.0]], dtype=F64))


def test_attention_entropy_weights_move_from_anchors_to_explorers():
    entropy = torch.tensor([[1.0, 2.0, 3.0], [4.0, 4.0, 0.0]])
    ones = torch.ones(2, 3, dtype=F64)
    z = math.sqrt(1.5)

    def weights(progress: float) -> torch.Tensor:
        batch = StepBatch(mask=MASK, attention_entropy=entropy, progress=progress)
        return CREDIT_RULES.get("attention_entropy_weights")(ones, batch, bias_start=-0.5, bias_end=0.5)

    # progress 0: b = −½, w ∝ (1 + ½ tanh z, 1, 1 − ½ tanh z) (mean 1 already): the low-entropy anchor weighs more
    early = torch.tensor([1 + 0.5 * math.tanh(z), 1.0, 1 - 0.5 * math.tanh(z)], dtype=F64)
    torch.testing.assert_close(weights(0.0)[0], early)
    torch.testing.assert_close(weights(1.0)[0], early.flip(0))  # progress 1: the explorer weighs more
    torch.testing.assert_close(weights(0.5), ones)  # b = 0 halfway; the flat row 1 always keeps 1
    with pytest.raises(ValueError, match=r"must be in \[-1, 1\]"):
        CREDIT_RULES.get("attention_entropy_weights")(ones, StepBatch(mask=MASK, attention_entropy=entropy,
                                                                        progress=0.0), bias_start=-2.0)  # fmt: skip


def test_attention_flow_credit_concentrates_on_the_flow_to_the_answer():
    flow = torch.tensor([[0.1, 0.0, 0.5], [0.2, 0.2, 9.0]])
    advantages = torch.tensor([[2.0] * 3, [-1.0] * 3], dtype=F64)
    batch = StepBatch(mask=MASK, answer_attention_flow=flow)
    out = CREDIT_RULES.get("attention_flow_credit")(advantages, batch)
    # row 0: mean flow 0.2 -> w = (0.5, 0, 2.5); row 1: equal flows -> w = 1 (padding untouched)
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0, 5.0], [-1.0, -1.0, -1.0]], dtype=F64))
    half = CREDIT_RULES.get("attention_flow_credit")(advantages, batch, mix=0.5)
    torch.testing.assert_close(half[0], torch.tensor([1.5, 1.0, 3.5], dtype=F64))


def test_saliency_weights_are_capped_and_renormalised():
    saliency = torch.tensor([[0.0, 1.0, 11.0], [3.0, 1.0, 0.0]])
    batch = StepBatch(mask=MASK, answer_saliency=saliency)
    out = CREDIT_RULES.get("saliency_weights")(torch.ones(2, 3, dtype=F64), batch, max_weight=2.0)
    # row 0: s / mean = (0, 0.25, 2.75) -> capped (0, 0.25, 2) -> mean-1 (0, 1/3, 8/3); row 1: (1.5, 0.5) stays
    torch.testing.assert_close(out, torch.tensor([[0.0, 1 / 3, 8 / 3], [1.5, 0.5, 1.0]], dtype=F64))
    with pytest.raises(ValueError, match=r"max_weight=0\.5 must be >= 1"):
        CREDIT_RULES.get("saliency_weights")(torch.ones(2, 3), batch, max_weight=0.5)
