"""Distillation credit rules against hand-computed values: OPD's per-token reverse KL (token and return horizons),
the forward-KL warm-up and the weight schedule [88] [93], sample selection [131], sample routing with the teacher's
entropy [262], the contrast of a correct and a wrong hint [135], the sigmoid gate [226]; a sample the teacher did not
score keeps its incoming advantage."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, bind_option
from genalign.algorithms.options import HyperparameterError

F64 = torch.float64
LOG2 = math.log(2.0)

# Two samples of three actions; the second sample's last action is padding.
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
# student and teacher probabilities of the sampled tokens: δ = log(p_T / p_S)
STUDENT = torch.tensor([[0.5, 0.5, 0.25], [0.5, 0.25, 1.0]], dtype=F64)
TEACHER = torch.tensor([[0.25, 0.5, 0.5], [1.0, 0.125, 1.0]], dtype=F64)
# δ by hand: [[log 1/2, 0, log 2], [log 2, log 1/2, (padding)]]
GAP = torch.tensor([[-LOG2, 0.0, LOG2], [LOG2, -LOG2, 0.0]], dtype=F64)


def batch(**fields) -> StepBatch:
    values = {
        "mask": MASK,
        "group_ids": torch.zeros(2, dtype=torch.long),
        "behaviour_logp": STUDENT.log() * MASK,
        "teacher_action_logp": TEACHER.log() * MASK,
        "teacher_scored": torch.tensor([True, True]),
        "rewards": torch.tensor([[1.0], [0.0]]),  # sample 0 correct, sample 1 failed
        "progress": 0.0,
    }
    return StepBatch({**values, **fields})


def rule(name: str, inputs: StepBatch, advantages=(1.0, -1.0), **hp) -> torch.Tensor:
    """The rule as the trainer binds it (values checked), on advantages broadcast over the actions."""
    incoming = torch.tensor(advantages, dtype=F64)[:, None].expand(2, 3).clone()
    return bind_option(CREDIT_RULES, name, hp)(incoming, inputs)


def test_opd_is_the_hand_computed_per_token_reverse_kl_mixed_with_the_group_advantage():
    pure = rule("opd", batch(), reward_weight=0.0)
    torch.testing.assert_close(pure, GAP * MASK)  # A_t = −(log π_S − log π_T)
    mixed = rule("opd", batch(), coef=0.5, reward_weight=1.0)
    expected = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]], dtype=F64) + 0.5 * GAP * MASK
    torch.testing.assert_close(mixed, expected)


def test_opd_return_horizon_sums_the_future_log_ratios():
    out = rule("opd", batch(), reward_weight=0.0, horizon="return")
    expected = torch.tensor([[0.0, LOG2, LOG2], [0.0, -LOG2, 0.0]], dtype=F64)  # Σ_{k>=t} δ_k
    torch.testing.assert_close(out, expected)


def test_opd_forward_warm_up_then_reverse_and_the_weight_schedule():
    # during the warm-up (progress 0.1 < 0.25) the term is the clipped importance weight π_T/π_S − 1
    warm = rule("opd", batch(progress=0.1), reward_weight=0.0, forward_until=0.25, max_ratio=1.5)
    forward = torch.tensor([[0.5 - 1, 0.0, 2.0 - 1], [2.0 - 1, 0.5 - 1, 0.0]], dtype=F64).clamp(-1.0, 0.5)
    torch.testing.assert_close(warm, forward * MASK)
    # after it, forward_weight 0.25 mixes 1/4 forward with 3/4 reverse; coef falls linearly from 2 to 0: c(0.5) = 1
    later = rule("opd", batch(progress=0.5), reward_weight=0.0, forward_until=0.25, forward_weight=0.25,
                 max_ratio=1.5, coef=2.0, coef_end=0.0)  # fmt: skip
    torch.testing.assert_close(later, (0.75 * GAP + 0.25 * forward) * MASK)


def test_opd_on_correct_or_failed_samples_only_and_never_on_unscored_ones():
    correct = rule("opd", batch(), reward_weight=0.0, samples="correct")
    torch.testing.assert_close(correct, torch.stack([GAP[0], torch.zeros(3, dtype=F64)]))
    failed = rule("opd", batch(), reward_weight=0.0, samples="failed")
    torch.testing.assert_close(failed, torch.stack([torch.zeros(3, dtype=F64), GAP[1] * MASK[1]]))
    # a remote teacher failed on sample 1: it keeps its group-relative advantage only
    skipped = rule("opd", batch(teacher_scored=torch.tensor([True, False])), coef=1.0, reward_weight=1.0)
    torch.testing.assert_close(skipped[1], torch.full((3,), -1.0, dtype=F64))
    torch.testing.assert_close(skipped[0], 1.0 + GAP[0])


def test_routed_distillation_keeps_grpo_for_correct_samples_and_weights_failed_ones_by_teacher_confidence():
    entropy = torch.tensor([[0.0, 0.0, 0.0], [0.0, math.log(3.0), 0.0]], dtype=F64)
    out = rule("routed_distillation", batch(teacher_entropy=entropy), coef=2.0)
    torch.testing.assert_close(out[0], torch.ones(3, dtype=F64))  # correct: GRPO's advantage
    # failed: w ∝ e^{−H} = (1, 1/3), mean 2/3 -> (3/2, 1/2); A = 2·w·δ
    torch.testing.assert_close(out[1], torch.tensor([2 * 1.5 * LOG2, 2 * 0.5 * -LOG2, 0.0], dtype=F64))


def test_contrastive_distillation_cancels_the_student_and_keeps_the_hint_contrast():
    wrong = torch.tensor([[0.25, 0.25, 0.5], [0.5, 0.125, 1.0]], dtype=F64).log() * MASK
    out = rule("contrastive_distillation", batch(teacher_contrast_logp=wrong), coef=1.0, reward_weight=0.0)
    hand = torch.tensor([[0.0, LOG2, 0.0], [LOG2, 0.0, 0.0]], dtype=F64)  # log π_T(hint) − log π_T(wrong hint)
    torch.testing.assert_close(out, hand)
    other_student = batch(teacher_contrast_logp=wrong, behaviour_logp=torch.zeros(2, 3, dtype=F64))
    torch.testing.assert_close(rule("contrastive_distillation", other_student, reward_weight=0.0), hand)


def test_gated_distillation_passes_endorsed_tokens_and_softens_rejections():
    out = rule("gated_distillation", batch(), reward_weight=0.0, temperature=0.5)
    sigmoid = lambda x: 1.0 / (1.0 + math.exp(-x))  # noqa: E731
    hand = torch.tensor(
        [[sigmoid(-2 * LOG2) * -LOG2, 0.0, sigmoid(2 * LOG2) * LOG2], [sigmoid(2 * LOG2) * LOG2,
         sigmoid(-2 * LOG2) * -LOG2, 0.0]], dtype=F64,
    )  # fmt: skip
    torch.testing.assert_close(out, hand)  # σ(2 log 2) = 0.8: endorsement kept at 80 %, rejection at 20 %


@pytest.mark.parametrize(
    ("name", "hp", "message"),
    [
        ("opd", {"horizon": "sequence"}, "horizon='sequence' must be 'token' or 'return'"),
        ("opd", {"forward_weight": 1.5}, r"forward_weight=1.5 must be in \[0, 1\]"),
        ("opd", {"max_ratio": 1.0}, "max_ratio=1.0 must be > 1"),
        ("opd", {"samples": "right"}, "samples='right'"),
        ("routed_distillation", {"entropy_temperature": 0.0}, "entropy_temperature > 0"),
        ("gated_distillation", {"temperature": -1.0}, "temperature must be > 0"),
        ("contrastive_distillation", {"coef": -1.0}, "coef and reward_weight must be >= 0"),
    ],
)
def test_bad_values_are_refused_when_bound(name, hp, message):
    with pytest.raises(ValueError, match=message):
        bind_option(CREDIT_RULES, name, hp)


def test_unknown_keyword_is_refused_with_a_hint():
    with pytest.raises(HyperparameterError, match="Did you mean 'reward_weight'"):
        bind_option(CREDIT_RULES, "opd", {"reward_weigth": 1.0})
