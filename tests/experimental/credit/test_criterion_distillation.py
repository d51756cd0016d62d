"""CriPO [273] against hand-computed values: the localized forward-KL term on the tokens with the largest vocabulary
forward KL, and the counterfactual flip of criterion-relevant tokens in negative-advantage samples."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, bind_option
from genalign.experimental.credit.criterion_distillation import top_fraction

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
STUDENT = torch.tensor([[0.5, 0.5, 0.25, 0.5], [0.5, 0.25, 1.0, 1.0]], dtype=F64)
TEACHER = torch.tensor([[0.25, 0.5, 0.5, 1.0], [1.0, 0.125, 1.0, 1.0]], dtype=F64)  # π_T/π_S − 1: (−.5, 0, 1, 1)
PLAIN = torch.tensor([[0.25, 0.25, 0.5, 0.125], [0.5, 0.125, 1.0, 1.0]], dtype=F64)  # the teacher without criterion
FORWARD_KL = torch.tensor([[0.1, 0.9, 0.5, 0.2], [0.3, 0.1, 0.0, 0.0]], dtype=F64)


def batch() -> StepBatch:
    return StepBatch(
        mask=MASK, behaviour_logp=STUDENT.log() * MASK, teacher_action_logp=TEACHER.log() * MASK,
        teacher_contrast_logp=PLAIN.log() * MASK, teacher_scored=torch.tensor([True, True]),
        teacher_vocab_forward_kl=FORWARD_KL,
    )  # fmt: skip


def rule(advantages, **hp):
    incoming = torch.tensor(advantages, dtype=F64)[:, None].expand(2, 4).clone()
    return bind_option(CREDIT_RULES, "criterion_distillation", hp)(incoming, batch())


def test_top_fraction_keeps_the_largest_valid_positions():
    kept = top_fraction(FORWARD_KL, MASK, 0.5)
    assert kept.tolist() == [[False, True, True, False], [True, False, False, False]]


def test_negative_advantages_flip_on_criterion_relevant_tokens():
    # relevance r = log(TEACHER / PLAIN): sample 0: (0, ln2, 0, ln8); sample 1: (ln2, 0, pad, pad); τ = 0.5
    out = rule((-1.0, -2.0), coef=0.0)
    expected = torch.tensor([[-1.0, 1.0, -1.0, 1.0], [2.0, -2.0, -2.0, -2.0]], dtype=F64)
    torch.testing.assert_close(out, expected)
    positive = rule((1.0, 1.0), coef=0.0)  # positive advantages are never touched
    torch.testing.assert_close(positive, torch.ones(2, 4, dtype=F64))


def test_forward_kl_term_is_localized_to_the_largest_vocabulary_forward_kl():
    # ρ = 0.5: sample 0 keeps positions 1, 2 (KL .9, .5): F = (0, 1); sample 1 keeps position 0: F = 1
    out = rule((0.0, 0.0), reward_weight=0.0, coef=2.0, fraction=0.5)
    expected = torch.tensor([[0.0, 0.0, 2.0, 0.0], [2.0, 0.0, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(out, expected)
    everywhere = rule((0.0, 0.0), reward_weight=0.0, fraction=1.0)
    torch.testing.assert_close(everywhere, ((TEACHER / STUDENT - 1) * MASK).clamp(-1, 4))
    assert math.isclose(float(everywhere[0, 0]), -0.5)


@pytest.mark.parametrize("hp", [{"fraction": 0.0}, {"max_ratio": 1.0}, {"coef": -1.0}])
def test_bad_hyperparameters_are_refused(hp):
    with pytest.raises(ValueError):
        bind_option(CREDIT_RULES, "criterion_distillation", hp)
