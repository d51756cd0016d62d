"""Uncertainty credit rules against hand values: EGSPO entropy gate [84], STAPO spurious tokens [185], UCAS
uncertainty shaping [210], RLSD self-teacher magnitudes [132]; config acceptance on the arith-lm causal LM."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.config import from_dict
from genalign.config.schema import TrainConfig

F64 = torch.float64


def run(name: str, adv, shape, **fields) -> torch.Tensor:
    hp = fields.pop("hp", {})
    adv = torch.tensor(adv, dtype=F64)
    mask = fields.pop("mask", torch.ones(shape))
    inputs = StepBatch(sample_advantages=adv, mask=mask, group_ids=torch.zeros(len(adv), dtype=torch.long), **fields)
    return CREDIT_RULES.get(name)(adv[:, None].expand(shape).clone(), inputs, **hp)


def test_entropy_gated_attenuates_low_entropy_tokens_keeping_the_sign():
    entropy = torch.tensor([[0.1, 2.0], [1.0, 3.0]], dtype=F64)
    fixed = run("entropy_gated", [1.0, -1.0], (2, 2), entropy=entropy, hp={"threshold": 1.0})
    torch.testing.assert_close(fixed, torch.tensor([[0.5, 1.0], [-1.0, -1.0]], dtype=F64))
    # batch median of 0.1, 1.0, 2.0, 3.0 (linear interpolation) = 1.5 -> 1.0 is low now
    median = run("entropy_gated", [1.0, -1.0], (2, 2), entropy=entropy, hp={"quantile": 0.5, "low_weight": 0.1})
    torch.testing.assert_close(median, torch.tensor([[0.1, 1.0], [-0.1, -1.0]], dtype=F64))


def test_spurious_tokens_need_positive_advantage_low_probability_and_low_entropy():
    probs = torch.tensor([[0.005, 0.005, 0.5], [0.005, 0.005, 0.5]], dtype=F64)
    entropy = torch.tensor([[0.1, 2.0, 0.1], [0.1, 2.0, 0.1]], dtype=F64)
    out = run("spurious_tokens", [1.0, -1.0], (2, 3), entropy=entropy, behaviour_logp=probs.log(),
              hp={"entropy_threshold": 0.5})  # fmt: skip
    # only action 0 of the positive sample meets all three conditions (action 1: high entropy; 2: p = 0.5;
    # the negative sample is never masked)
    torch.testing.assert_close(out, torch.tensor([[0.0, 1.0, 1.0], [-1.0, -1.0, -1.0]], dtype=F64))
    # default τ_h: the 5th percentile of the six entropies (0.1, 0.1, 0.1, 0.1, 2, 2) is 0.1 -> nothing is below it
    default = run("spurious_tokens", [1.0, -1.0], (2, 3), entropy=entropy, behaviour_logp=probs.log())
    torch.testing.assert_close(default, torch.tensor([[1.0, 1, 1], [-1, -1, -1]], dtype=F64))


def test_uncertainty_shaping_by_hand():
    stats = torch.zeros(2, 2, 2)
    stats[0, :, 0] = 1.0  # self-certainty sums: 2 and 0 -> group z-scores ±1/sqrt(2) (unbiased std sqrt(2))
    stats[:, :, 1] = torch.tensor([[2.0, 4.0], [0.0, 6.0]])  # raw logits -> min-max over the batch: 1/3, 2/3; 0, 1
    z = 1 / math.sqrt(2)
    positive, negative = math.exp(-0.25 * z), -math.exp(0.35 * -z)  # stage 1: 0.837967, -0.780744
    out = run("uncertainty_shaping", [1.0, -1.0], (2, 2), logit_stats=stats, hp={"eps": 0.0})
    expected = torch.tensor([[positive - 0.05 / 3, positive - 0.05 * 2 / 3], [negative, negative - 0.05]], dtype=F64)
    torch.testing.assert_close(out, expected)
    # a large penalty floors positive-trajectory tokens at 0 (never flipping sign) but not negative ones
    big = run("uncertainty_shaping", [1.0, -1.0], (2, 2), logit_stats=stats, hp={"eps": 0.0, "logit_penalty": 2.0})
    torch.testing.assert_close(big[0], torch.tensor([positive - 2 / 3, 0.0], dtype=F64))
    torch.testing.assert_close(big[1], torch.tensor([negative, negative - 2.0], dtype=F64))


def test_self_distill_magnitude_takes_size_from_the_teacher_and_sign_from_the_reward():
    # δ = log π_teacher − log π = (ln 2, −ln 2, 0) in both samples
    student = torch.full((2, 3), -1.0, dtype=F64)
    teacher = student + torch.tensor([math.log(2), -math.log(2), 0.0], dtype=F64)
    structure = {"teacher_logp": teacher}
    raw = run("self_distill_magnitude", [1.0, -1.0], (2, 3), behaviour_logp=student, **structure,
              hp={"normalize": False})  # fmt: skip
    # correct: e^{δ} = 2, 1/2, 1; wrong: e^{-δ} = 1/2, 2, 1 (the teacher's rejected token carries the blame)
    torch.testing.assert_close(raw, torch.tensor([[2.0, 0.5, 1.0], [-0.5, -2.0, -1.0]], dtype=F64))
    normalised = run("self_distill_magnitude", [1.0, -1.0], (2, 3), behaviour_logp=student, **structure)
    # mean weight 3.5 / 3 -> 12/7, 3/7, 6/7
    torch.testing.assert_close(normalised[0], torch.tensor([12 / 7, 3 / 7, 6 / 7], dtype=F64))
    big = dict(teacher_logp=student + math.log(10.0))
    clamped = run("self_distill_magnitude", [1.0, -1.0], (2, 3), behaviour_logp=student, **big,
                  hp={"normalize": False})  # fmt: skip
    torch.testing.assert_close(clamped, torch.tensor([[3.0] * 3, [-1 / 3] * 3], dtype=F64))


@pytest.mark.parametrize("rule", ["entropy_gated", "spurious_tokens", "uncertainty_shaping", "self_distill_magnitude"])
def test_a_causal_lm_config_accepts_the_rule(rule):
    config = from_dict(
        TrainConfig,
        {
            "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "use_chat_template": False},
            "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8}}},
            "rewards": [{"fn": "exact_match"}],
            "algorithm": {"group_size": 4, "prompts_per_step": 2, "credit": [rule]},
        },
    )
    assert [r.name for r in config.algorithm.credit] == [rule]
