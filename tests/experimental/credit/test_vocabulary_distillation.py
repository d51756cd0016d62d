"""Full-distribution distillation credit against hand-computed values: COPSD's per-token vocabulary KL as the
reward-to-go of the later tokens with the sampled token for its own term [107], AlignDistil's β/w_t weights [85], and
RTO's DPO log-ratio token rewards [89]; a sample the teacher did not score keeps its incoming advantage."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, bind_option
from genalign.algorithms.options import HyperparameterError

F64 = torch.float64
LOG2 = math.log(2.0)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
STUDENT = torch.tensor([[0.5, 0.5, 0.25], [0.5, 0.25, 1.0]], dtype=F64)
TEACHER = torch.tensor([[0.25, 0.5, 0.5], [1.0, 0.125, 1.0]], dtype=F64)
GAP = torch.tensor([[-LOG2, 0.0, LOG2], [LOG2, -LOG2, 0.0]], dtype=F64)  # δ = log p_T − log p_S
REVERSE = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.0]], dtype=F64)  # KL_V(π_S‖π_T) per token
FORWARD = torch.tensor([[0.6, 0.7, 0.8], [0.9, 1.0, 0.0]], dtype=F64)


def batch(**fields) -> StepBatch:
    values = {
        "mask": MASK,
        "behaviour_logp": STUDENT.log() * MASK,
        "teacher_action_logp": TEACHER.log() * MASK,
        "teacher_scored": torch.tensor([True, True]),
        "teacher_vocab_reverse_kl": REVERSE,
        "teacher_vocab_forward_kl": FORWARD,
    }
    return StepBatch({**values, **fields})


def rule(name: str, inputs: StepBatch, advantages=(1.0, -1.0), **hp) -> torch.Tensor:
    incoming = torch.tensor(advantages, dtype=F64)[:, None].expand(2, 3).clone()
    return bind_option(CREDIT_RULES, name, hp)(incoming, inputs)


def test_full_distillation_adds_the_later_tokens_vocabulary_kl_to_the_sampled_gap():
    out = rule("full_distillation", batch(), reward_weight=0.0)
    # sample 0: δ = (−ln2, 0, ln2); future KL sums: 0.2 + 0.3, 0.3, 0
    expected = torch.tensor([[-LOG2 - 0.5, -0.3, LOG2], [LOG2 - 0.5, -LOG2, 0.0]], dtype=F64)
    torch.testing.assert_close(out, expected)
    mixed = rule("full_distillation", batch(), coef=2.0, reward_weight=1.0, future_weight=0.5)
    incoming = torch.tensor([[1.0], [-1.0]], dtype=F64)
    future = torch.tensor([[0.5, 0.3, 0.0], [0.5, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(mixed, incoming + 2.0 * (GAP - 0.5 * future))


def test_full_distillation_forward_uses_the_importance_weight_and_the_forward_kl():
    out = rule("full_distillation", batch(), reward_weight=0.0, divergence="forward")
    ratio = (TEACHER / STUDENT - 1).clamp(-1, 4) * MASK  # e^δ − 1
    future = torch.tensor([[1.5, 0.8, 0.0], [1.0, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(out, ratio - future)


def test_unscored_samples_keep_their_advantage():
    out = rule("full_distillation", batch(teacher_scored=torch.tensor([True, False])), reward_weight=1.0)
    torch.testing.assert_close(out[1], torch.tensor([-1.0, -1.0, -1.0], dtype=F64))


def test_aligndistil_weights_each_token_by_beta_over_its_extrapolation():
    weights = torch.tensor([[0.5, 1.0, 2.0], [0.25, 0.5, 0.0]], dtype=F64)
    out = rule("aligndistil", batch(teacher_extrapolation=weights), beta=0.5)
    u = torch.tensor([[1.0, 0.5, 0.25], [2.0, 1.0, 0.0]], dtype=F64)  # β / w
    # future: Σ_{k>t} u_k·KL_k: sample 0: 0.5·0.2 + 0.25·0.3 = 0.175, 0.075, 0; sample 1: 1·0.5 = 0.5, 0
    future = torch.tensor([[0.175, 0.075, 0.0], [0.5, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(out, u * GAP - future)


def test_dpo_token_reward_is_the_reward_to_go_of_the_dpo_log_ratio():
    reference = torch.tensor([[0.5, 0.25, 0.5], [0.5, 0.5, 1.0]], dtype=F64)
    inputs = batch(teacher_anchor_logp=reference.log() * MASK)
    tokens = rule("dpo_token_reward", inputs, reward_weight=0.0, beta=2.0, horizon="token")
    ratio = torch.tensor([[-LOG2, LOG2, 0.0], [LOG2, -2 * LOG2, 0.0]], dtype=F64)  # log(p_dpo / p_ref)
    torch.testing.assert_close(tokens, 2.0 * ratio)
    returns = rule("dpo_token_reward", inputs, beta=2.0)
    to_go = torch.tensor([[0.0, LOG2, 0.0], [-LOG2, -2 * LOG2, 0.0]], dtype=F64)
    torch.testing.assert_close(returns, torch.tensor([[1.0], [-1.0]], dtype=F64) + 2.0 * to_go)


@pytest.mark.parametrize(
    ("name", "hp"),
    [("full_distillation", {"divergence": "jsd"}), ("aligndistil", {"beta": 0.0}),
     ("dpo_token_reward", {"horizon": "sequence"})],
)  # fmt: skip
def test_bad_hyperparameters_are_refused(name, hp):
    with pytest.raises((ValueError, HyperparameterError)):
        bind_option(CREDIT_RULES, name, hp)
